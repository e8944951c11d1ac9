"""What `dsx launch` checks before it starts a user's script: the config, linted for the launch's world size with the
fill rules of the transformers Trainer / accelerate when they fill it (--hf), and a Trainer launch's warmup."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dsx.lint.findings import Finding
from dsx.userjob.trainer import TRAINER_CONFIG_ARG, flag_on, installed_transformers, warmup_finding

COMMAND_LINE = "(the script's arguments)"
"""The path of a finding about the command line rather than a key of the config."""


def script_and_args(command: list[str]) -> tuple[str, list[str]]:
    """(the script's file name or the module, the arguments it gets); ('', []) when the command is not one dsx
    launch can run (build_launch says why later)."""
    from dsx.launcher import LaunchError, user_rank_command

    try:
        rank_command, _ = user_rank_command(command)
    except LaunchError:
        return "", []
    return Path(rank_command[0]).name, rank_command[1:]


def is_trainer_launch(config_arg: str, args: list[str]) -> bool:
    """The config goes to the transformers Trainer: through its own flag --deepspeed, by --config-arg or by hand."""
    return config_arg == TRAINER_CONFIG_ARG or any(a == TRAINER_CONFIG_ARG or a.startswith(TRAINER_CONFIG_ARG + "=")
                                                  for a in args)


@dataclass
class Checked:
    findings: list[Finding] = field(default_factory=list)
    hf_only: list[Finding] = field(default_factory=list)
    """Errors --hf would clear: "auto" values the transformers Trainer / accelerate fill (without --hf only)."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != "error"]

    def error_lines(self) -> list[str]:
        """Every error, the ones --hf would clear folded into one line that says so."""
        lines = ["  " + f.render() for f in self.errors if f not in self.hf_only]
        if self.hf_only:
            paths = ", ".join(f.path for f in self.hf_only)
            lines.append(f"  {len(self.hf_only)} \"auto\" value(s) only the transformers Trainer / accelerate fill "
                         f"({paths}): if the script is one, launch with --hf (implied by --config-arg --deepspeed)")
        return lines


def cpu_world_finding(device: str, world_size: int, args: list[str]) -> Finding | None:
    """A Trainer on several CPU ranks without --use_cpu: accelerate takes the DeepSpeed path only with a GPU, so
    each rank sees a world of 1, fills train_batch_size for it, and deepspeed.initialize asserts (seen with
    transformers 5.24 and accelerate 1.15)."""
    if device != "cpu" or world_size < 2 or flag_on(args, "use_cpu"):
        return None
    return Finding(COMMAND_LINE, "error", "trainer-cpu-ranks",
                   f"the transformers Trainer on {world_size} CPU ranks needs --use_cpu: without it accelerate sees "
                   "no distributed job (its DeepSpeed path wants a GPU), every rank fills train_batch_size for a world "
                   "of 1, and deepspeed.initialize asserts \"train_batch_size is not equal to micro_batch_per_gpu * "
                   "gradient_acc_step * world_size\"",
                   "add --use_cpu to the script's arguments")


def check(data: dict, *, duplicate_keys, target, world_size: int, hf: bool, trainer: bool, args: list[str],
          device: str = "cuda", transformers_version: str | None = None) -> Checked:
    """The findings that decide a launch: lint at the world size (with the Trainer / accelerate fill rules under
    --hf); for a Trainer launch the warmup verdict for these script arguments and this transformers replaces the
    lint's general hf-zero-warmup warning, and CPU ranks need --use_cpu."""
    from dsx.lint.engine import lint

    findings = lint(data, target=target, world_size=world_size, hf=hf, duplicate_keys=duplicate_keys)
    if trainer:
        version = transformers_version if transformers_version is not None else installed_transformers()
        verdict = warmup_finding(data, args, version, target)
        findings = [f for f in findings if f.code != "hf-zero-warmup"] + ([verdict] if verdict else [])
        findings += [f for f in [cpu_world_finding(device, world_size, args)] if f]
    checked = Checked(findings)
    if not hf and checked.errors:
        with_hf = {(f.path, f.code) for f in lint(data, target=target, world_size=world_size, hf=True,
                                                  duplicate_keys=duplicate_keys) if f.severity == "error"}
        checked.hf_only = [f for f in checked.errors if (f.path, f.code) not in with_hf]
    return checked
