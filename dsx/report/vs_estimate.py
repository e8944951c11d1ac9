"""`dsx report --vs-estimate`: dsx estimate's prediction next to what each row measured, and DeepSpeed's own estimator.

dsx.estimate (which builds the model with torch and transformers) is imported inside the functions only: a report
that does not ask for a comparison never pays for it.
"""

from __future__ import annotations

import json
from datetime import datetime

from dsx.report.facts import label, model_text, nccl_link_changed, speed_not_steady, tokens_per_s
from dsx.report.table import Table
from dsx.units import MIB, fmt_gib, fmt_num, fmt_pct

SPEED_OFF = 0.15
"""A predicted tokens/s further than this from the measured one is 'off' (issue 30: fix the model of it)."""

JUDGED_SPEED = ("judged", "fit calibration")
"""The calibration roles (dsx.calibration_roles.calibration_role) whose speed judges the estimate: no speed constant
came from them."""


SAME_COMMAND_S = 900
"""A multi-GPU row and a 1-GPU row of its configuration that started this close together ran in one command on one
machine (bench/multigpu/run.sh runs N GPUs, then 1): the 1-GPU row carries that machine's own speed."""

_BATCH_FIELDS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def scaling_key(row: dict) -> str:
    """What a multi-GPU row and its 1-GPU row share: the GPU kind, model, batch split, toggles, precision, sparse
    layout, pipeline, whether the comms logger timed it and the DeepSpeed config but for its batch sizes (which
    count the GPUs)."""
    from dsx.estimate.rows import logger_timed

    model = {k: v for k, v in (row.get("model") or {}).items() if k != "dims"}
    config = {k: v for k, v in (row.get("ds_config") or {}).items() if k not in _BATCH_FIELDS}
    return json.dumps([row.get("gpu_name"), config, model, row.get("micro_batch"), row.get("grad_accum"),
                       row.get("toggles"), row.get("sparse_attention"), row.get("pipeline"), row.get("precision"),
                       logger_timed(row)], sort_keys=True, default=str)


def one_gpu_partner(row: dict, rows: list[dict]) -> dict | None:
    """The 1-GPU row of `row`'s configuration among `rows` that ran in its command (SAME_COMMAND_S, the nearest in
    time), None without one or for a row of one GPU."""
    if (row.get("world_size") or 1) < 2 or not row.get("time"):
        return None
    started = datetime.fromisoformat(row["time"]).timestamp()
    key = scaling_key(row)
    partners = [(abs(datetime.fromisoformat(one["time"]).timestamp() - started), i) for i, one in enumerate(rows)
                if (one.get("world_size") or 1) == 1 and one.get("status") == "ok" and one.get("time")
                and tokens_per_s(one) and scaling_key(one) == key]
    near = [(gap, i) for gap, i in partners if gap < SAME_COMMAND_S]
    return rows[min(near)[1]] if near else None


def scaling_error(row: dict, predicted: float, one: dict, predicted_one: float) -> float:
    """The estimate's n-GPU / 1-GPU tokens/s ratio against the measured one, less 1: a row's speed error once the
    machine's own speed, which its 1-GPU partner carries, is taken out (what the multi-GPU terms get wrong)."""
    return (predicted / predicted_one) / (tokens_per_s(row) / tokens_per_s(one)) - 1


def vs_estimate_table(rows: list[dict]) -> Table:
    """Predicted (dsx estimate) next to measured for every row whose GPU is calibrated, with the error; DeepSpeed's
    own model-states estimators (estimate_zero2/3_model_states_mem_needs, additional_buffer_factor 1) beside them.
    Imports torch and transformers (the model is built on the meta device)."""
    from dsx.calibration_roles import calibration_role
    from dsx.estimate import EstimateError, estimate, setup_of_row

    table = Table("Predicted vs measured (dsx estimate)", [
        "configuration", "model", "mb", "status", "peak alloc GiB", "predicted", "error", "fit predicted",
        "host GiB", "predicted host", "tokens/s", "predicted tokens/s", "speed error", "vs 1 GPU",
        "MiB sent/step", "predicted sent", "DeepSpeed estimator GiB", "role"])
    estimates = {}
    for r in rows:
        try:
            estimates[id(r)] = estimate(setup_of_row(r), search_max=False)
        except EstimateError:
            continue
    speed_errors, scaling_errors = [], []
    for r in rows:
        if (e := estimates.get(id(r))) is None:
            continue
        role, speed = calibration_role(r), speed_error(r, e.tokens_per_s)
        one = one_gpu_partner(r, rows) if isinstance(speed, float) else None
        scaling = (scaling_error(r, e.tokens_per_s, one, estimates[id(one)].tokens_per_s)
                   if one is not None and id(one) in estimates else None)
        if isinstance(speed, float) and role in JUDGED_SPEED:
            speed_errors.append(speed)
            if scaling is not None:
                scaling_errors.append(scaling)
        measured = r["memory"]["max"].get("peak_allocated")
        ok = r["status"] == "ok"
        error = _signed_pct((e.peak_allocated - measured) / measured if ok and measured else None)
        # a run that ended otherwise (timeout, error) says nothing of the fit: no mark
        judged = ok or r["status"] == "oom"
        right = (e.fits and ok) or (not e.fits and r["status"] == "oom")
        host = r["memory"]["max"].get("host_rss_peak")
        on_host = e.offload != "none" or (r.get("toggles") or {}).get("act_ckpt_offload")  # what the host holds
        sent, predicted_sent = _bytes_per_step(r)
        table.rows.append([
            label(r), model_text(r), str(r["micro_batch"]), r["status"], fmt_gib(measured) if ok else "-",
            fmt_gib(e.peak_allocated), error,
            ("fits" if e.fits else "OOM") + ((" ✓" if right else " ✗") if judged else ""),
            fmt_gib(host) if ok and on_host else "-", fmt_gib(e.host_per_rank) if on_host else "-",
            fmt_num(tokens_per_s(r), 0) if ok else "-", fmt_num(e.tokens_per_s, 0), _signed_pct(speed),
            _signed_pct(scaling), _mib(sent) if ok else "-", predicted_sent,
            fmt_gib(deepspeed_estimator_gpu_bytes(r, e)), role])
    table.legend = [
        "peak alloc: torch's peak allocated on the busiest rank; error: (predicted - measured) / measured; fit "
        "predicted: peak allocated + CUDA context + allocator headroom <= the GPU's memory (✓ when the row's status "
        "agrees; no mark on a row that neither ran nor ran out of memory); DeepSpeed estimator: its "
        "model-states-only formula (no activations) for the row's stage and offload; role: calibration rows set "
        "dsx.estimate's constants, fit calibration rows set the allocator "
        "headroom (their memory is judged), judged rows set nothing. MiB sent/step: what DeepSpeed's comms logger "
        "counted per optimizer step and rank on a multi-GPU row, beside dsx.comm's prediction (the row's own). host GiB: "
        "the peak RSS per rank, on rows that keep optimizer state or checkpointed inputs in host memory. A row of one "
        "step (no warm-up) is predicted without Adam's moments in its forward/backward: they are made at its first "
        "optimizer step. speed error: (predicted - measured tokens/s) / measured; a row whose timed steps are not "
        "steady says why instead (no warm-up step: the first step's set-up is in its time). vs 1 GPU: on a multi-GPU "
        "row with a 1-GPU row of its configuration from its command (started within 15 minutes), the predicted "
        "n-GPU / 1-GPU tokens/s ratio against the measured one, less 1: its speed error with the machine's own speed "
        "taken out."]
    if speed_errors:
        off = sum(abs(error) > SPEED_OFF for error in speed_errors)
        table.legend.append(f"speed: {len(speed_errors)} judged row(s) (no constant came from them), {off} off by "
                            f"more than {SPEED_OFF:.0%}")
    if scaling_errors:
        off = sum(abs(error) > SPEED_OFF for error in scaling_errors)
        table.legend.append(f"scaling: {len(scaling_errors)} of them with a 1-GPU row of their configuration from "
                            f"their command: {off} with the n-GPU / 1-GPU tokens/s ratio off by more than "
                            f"{SPEED_OFF:.0%} (the machine's own speed taken out)")
    return table


def speed_error(row: dict, predicted: float) -> float | str | None:
    """(predicted - measured) / measured tokens/s of an ok row; the reason its speed is not judged (a string) when
    its timed steps are not steady (dsx.report.facts.speed_not_steady) or NCCL's variables moved its collectives off
    the GPUs' own links, which the estimate prices (nccl_link_changed); None when it measured no speed."""
    measured = tokens_per_s(row) if row["status"] == "ok" else None
    if not measured:
        return None
    if link := nccl_link_changed(row):
        return f"collectives off the GPUs' links ({link})"
    return speed_not_steady(row) or (predicted - measured) / measured


def _signed_pct(error: float | str | None) -> str:
    """A relative error with its sign ('+4.1%', '-2.0%'), '-' for none, the reason where a row is not judged."""
    if isinstance(error, str):
        return f"not judged: {error}"
    return "-" if error is None else ("+" if error > 0 else "") + fmt_pct(error)


def _bytes_per_step(row: dict) -> tuple[int | None, str]:
    """(measured bytes, predicted MiB as text) communicated per optimizer step and rank, from the row's comm part; a
    1-bit optimizer's prediction names both phases (its measured figure mixes the two over the timed steps)."""
    comm = row.get("comm") or {}
    if (row.get("world_size") or 1) < 2:
        return None, "-"  # one rank sends nothing, whatever the logger counted for its collectives
    predicted = comm.get("predicted") or {}
    text = _mib(predicted.get("bytes_per_step"))
    if predicted.get("compressed_bytes_per_step"):
        text += f" ({_mib(predicted['compressed_bytes_per_step'])} compressed)"
    return comm.get("bytes_per_step"), text


def _mib(n: int | None) -> str:
    return fmt_num(n / MIB, 1) if n else "-"


def deepspeed_estimator_gpu_bytes(row: dict, e) -> int | None:
    """DeepSpeed 0.19's estimate_zero{2,3}_model_states_mem_needs GPU figure for the row (its formulas: params and
    optimizer states only), additional_buffer_factor 1. None where it has no estimator (ZeRO-0)."""
    n, w = e.params, e.world_size
    if e.zero in (1, 2):
        return 2 * n if e.offload != "none" else 2 * n + int(18 * n / w)
    if e.zero == 3:
        from dsx.estimate import setup_of_row
        from dsx.models import largest_module_params

        largest = 4 * largest_module_params(setup_of_row(row).resolved)  # its _all_live term
        if e.offload != "none":
            return largest if e.offload_params != "none" else largest + int(2 * n / w)
        return largest + int(18 * n / w)
    return None

