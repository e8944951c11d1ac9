"""The best row of a report (`dsx report --best`): the fastest ok row, its config linted, and what reproduces it."""

from __future__ import annotations

from dataclasses import dataclass

from dsx.report.facts import describe, examples_per_s, memory, memory_field, spread, tokens_per_s, within_noise
from dsx.report.load import ReportError
from dsx.units import fmt_gib, fmt_num, fmt_pct, fmt_spread, fmt_tflops, size_arg


TIES_SHOWN = 3
"""Rows within the noise of the best that --best names (the rest are counted)."""


def best_ok(rows: list[dict]) -> dict | None:
    """The ok row with the most tokens/s."""
    ok = [r for r in rows if r["status"] == "ok" and tokens_per_s(r) is not None]
    return max(ok, key=tokens_per_s) if ok else None


@dataclass
class Best:
    row: dict
    config: dict
    findings: list
    """dsx.lint findings of the row's ds_config at its world size (warnings only, or it would have been refused)."""
    command: str
    """The argv that made the row, shell-quoted: run it to reproduce."""
    ties: list[dict]
    """Other ok rows (fastest first) whose tokens/s is within the noise of the best's: the pick among them is a guess."""
    target: object
    """The DeepSpeed version (dsx.versions.Version) the config was linted against."""


def row_target(row: dict):
    """The DeepSpeed version a row ran on (a --python lane's 0.18.9, say), else the installed one's target."""
    from dsx.versions import Version, VersionError, resolve_target

    ran = (row.get("versions") or {}).get("deepspeed")
    try:
        return resolve_target(str(Version(ran))) if ran else resolve_target(None)
    except (VersionError, ValueError):  # a version dsx does not know the config surface of
        return resolve_target(None)


def pick_best(rows: list[dict], target=None) -> Best:
    """The ok row with the most tokens/s, its DeepSpeed config linted at the row's world size against `target`
    (None: the DeepSpeed the row ran on, so a 1-bit row of a 0.18.9 lane is judged by 0.18.9).

    Refused (ReportError, exit 1) when there is no ok row, or when the config has lint errors: a config dsx would
    itself reject is no recommendation."""
    import shlex

    from dsx.lint.engine import lint

    row = best_ok(rows)
    if row is None:
        raise ReportError(f"no ok row with a throughput among {len(rows)} row(s): nothing to pick", 1)
    target = target or row_target(row)
    data_parallel = row["world_size"] // ((row.get("pipeline") or {}).get("stages") or 1)  # a pipeline's replicas
    findings = lint(row["ds_config"], target=target, world_size=data_parallel, model_params=row["model"]["params"])
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        details = "; ".join(f.render().replace("\n    ", " ") for f in errors)
        raise ReportError(f"the best row {row['run_id'][:8]} has a DeepSpeed config with {len(errors)} lint "
                          f"error(s) for DeepSpeed {target} at data-parallel size {data_parallel}, not writing it: "
                          f"{details}", 1)
    ties = sorted((r for r in rows if r is not row and r["status"] == "ok" and within_noise(row, r)),
                  key=tokens_per_s, reverse=True)
    return Best(row, row["ds_config"], findings, shlex.join(readable_command(row["command"])), ties, target)


def readable_command(argv: list[str]) -> list[str]:
    """A row's command as a person would type it: --memory-cap as a size (rows before dsx 0.1 recorded bytes)."""
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word == "--memory-cap" and out[i + 1].isdigit():
            out[i + 1] = size_arg(int(out[i + 1]))
    return out


def best_summary(best: Best) -> list[str]:
    """What `--best` prints: which row, its figures, and the command that reproduces it."""
    r, f = best.row, best.row["figures"]
    lines = [
        f"best: {describe(r)}",
        (f"  {fmt_num(tokens_per_s(r), 0)} tokens/s, {fmt_num(examples_per_s(r))} ex/s, "
         + ("" if r.get("device") == "cpu" else  # CPU ranks: no GPU, no peak to measure a utilisation against
            f"{fmt_tflops(f['model_tflops_per_s'])} TFLOP/s per GPU, MFU {fmt_pct(f['mfu'])}, ")
         + f"peak memory {fmt_gib(memory(r))} GiB ({memory_field(r)})"),
        f"  reproduce: {best.command}",
    ]
    if best.ties:
        lines.append(f"  within the noise: {len(best.ties)} other row(s) are slower by less than the larger step-time "
                     f"spread of the two runs, so which is fastest is a guess (rerun them with more --steps):")
        for tie in best.ties[:TIES_SHOWN]:
            gap = 1 - tokens_per_s(tie) / tokens_per_s(r)
            noise = max(spread(tie) or 0.0, spread(r) or 0.0)
            lines.append(f"    {describe(tie)}: {fmt_num(tokens_per_s(tie), 0)} tokens/s, {gap:.1%} slower, "
                         f"spread {fmt_spread(noise)}")
        if len(best.ties) > TIES_SHOWN:
            lines.append(f"    and {len(best.ties) - TIES_SHOWN} more")
    lines += ["  " + finding.render("config").replace("\n", "\n  ") for finding in best.findings]
    return lines

