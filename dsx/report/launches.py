"""`dsx launch` rows in a report: a table of their own beside the runs, since what dsx knows of a user's script
(exit status, wall time, sampled memory, the Trainer's own throughput) is not what it measures in `dsx run`."""

from __future__ import annotations

from dsx.report.facts import gpu_label, launch_label, short_error
from dsx.report.table import Table
from dsx.units import fmt_gib, fmt_num


def split_kinds(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(run rows, launch rows): every table, plot and --best of a report reads run rows; launches get their own."""
    runs = [r for r in rows if r.get("kind", "run") != "launch"]
    return runs, [r for r in rows if r.get("kind") == "launch"]


LAUNCH_COLUMNS = ["GPU", "launch", "micro-batch", "exit", "wall s", "GPU GiB", "host RSS GiB", "samples/s",
                  "steps/s", "tokens/s", "loss", "config"]


def launches_table(rows: list[dict], show_status: bool = False) -> Table:
    """One line per `dsx launch`: where and what ran, how it ended, the memory dsx sampled, the Trainer's own
    throughput (when the script is a Trainer that reported it)."""
    table = Table("Launches", LAUNCH_COLUMNS + (["status", "error"] if show_status else []))
    for r in rows:
        launch, peak = r["launch"], r["memory"]["max"]
        trainer = launch["trainer"] or {}
        mb = "-" if r["micro_batch"] is None else str(r["micro_batch"])
        if (r["grad_accum"] or 1) > 1:
            mb += f" x{r['grad_accum']} accum"
        cells = [gpu_label(r), launch_label(r), mb, "-" if launch["exit_code"] is None else str(launch["exit_code"]),
                 fmt_num(launch["wall_s"]), fmt_gib(peak["nvml_used"]), fmt_gib(peak["host_rss_peak"]),
                 fmt_num(trainer.get("samples_per_s"), 2), fmt_num(trainer.get("steps_per_s"), 3),
                 fmt_num(trainer.get("tokens_per_s"), 0),
                 "-" if trainer.get("train_loss") is None else f"{trainer['train_loss']:.4g}",
                 f"{r['ds_config_source'].rsplit('/', 1)[-1]} {r['ds_config_hash'][:8]}"]
        if show_status:
            cells += [r["status"], short_error(r)]
        table.rows.append(cells)
    table.legend = [
        "Launches: your own scripts under `dsx launch`. GPU GiB: the peak NVML used memory of a rank's GPU (the whole "
        "device), host RSS GiB: the peak resident set of a rank process (max over ranks), both sampled by dsx while "
        "the job ran; samples/s, steps/s, loss: what the transformers Trainer reported (train_runtime starts after "
        "DeepSpeed's initialisation), tokens/s: samples/s x --seq-len; config: the file and its hash."]
    return table
