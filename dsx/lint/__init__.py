"""The linter: every problem of a DeepSpeed config for a target version and world size (dsx validate, and every
config dsx writes or runs). engine runs the checks, rules holds the cross-field ones, context what they all know."""
