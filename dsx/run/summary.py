"""What `dsx run` prints when a run ends: the row in a dozen lines."""

from __future__ import annotations

from dsx.config_facts import offload_devices, zero_stage
from dsx.report.comm import measured_over_predicted
from dsx.results import RunRow
from dsx.run.pipeline import summary_lines as pipeline_lines
from dsx.sparse.rows import summary_lines as sparse_lines
from dsx.units import format_bytes


def summary(row: RunRow, results: str) -> str:
    """The short table `dsx run` prints."""
    f, m, o = row.figures, row.memory.max, row.overhead
    zero = zero_stage(row.ds_config)
    offload = [what for what, device in zip(("optimizer", "param"), offload_devices(row.ds_config)) if device != "none"]
    where = f"{row.world_size} x {row.gpu_name or 'GPU'}" if row.device == "cuda" else f"{row.world_size} CPU rank(s)"
    lines = [
        f"{row.status.upper()}  {row.model.preset} ({row.model.params:,} params, seq {row.model.seq_len})"
        if row.model.params else f"{row.status.upper()}  {row.model.preset} (seq {row.model.seq_len})",
        f"  {where}, ZeRO-{zero}{' + offload ' + '/'.join(offload) if offload else ''}, {row.precision}, "
        f"micro-batch {row.micro_batch} x grad-accum {row.grad_accum}",
    ]
    if f.step_time_s:
        lines += [
            f"  step time   median {f.step_time_s.median * 1e3:.1f} ms (min {f.step_time_s.min * 1e3:.1f}, max "
            f"{f.step_time_s.max * 1e3:.1f}) over {len(f.step_time_s.all)} steps",
            f"  throughput  {f.tokens_per_s:,.0f} tokens/s, {f.samples_per_s:,.1f} samples/s, "
            f"{f.model_tflops_per_s:.3g} TFLOP/s per GPU" if f.model_tflops_per_s is not None else
            f"  throughput  {f.tokens_per_s:,.0f} tokens/s, {f.samples_per_s:,.1f} samples/s",
            f"  MFU         {f.mfu:.1%} of {f.peak_tflops:g} TFLOP/s {f.flops_dtype}" if f.mfu is not None else
            "  MFU         - (" + ("CPU run" if row.device == "cpu" else f"no peak for {row.gpu_name!r} in dsx.gpus")
            + ")",
        ]
    lines += loss_lines(row)
    if row.sparse_attention is not None:
        lines += sparse_lines(row.sparse_attention)
    if f.flop_check_note:
        lines.append(f"  flop check  {f.flop_check_note}")
    lines.append(f"  memory max  allocated {format_bytes(m.peak_allocated)}, reserved {format_bytes(m.peak_reserved)}, NVML "
                 f"{format_bytes(m.nvml_used)}, host RSS {format_bytes(m.host_rss_peak)}, pinned {format_bytes(m.pinned_host)}")
    lines += pipeline_lines(row.pipeline, row.device)
    if row.comm is not None:
        lines.append(comm_line(row))
    if o.total_s is not None:
        def sec(v):
            return "-" if v is None else f"{v:.1f} s"

        lines.append(f"  wall        {o.total_s:.1f} s total, {o.added_s:.1f} s around the steps (launch "
                     f"{sec(o.launch_to_rank_start_s)}, imports {sec(o.rank_import_s)}, deepspeed.initialize "
                     f"{sec(o.ds_initialize_s)}, teardown {sec(o.teardown_s)})")
    if row.error:
        lines.append(f"  error       {row.error}")
    lines.append(f"  row {row.run_id} appended to {results}")
    return "\n".join(lines)


def loss_lines(row: RunRow) -> list[str]:
    """'  loss        6.94 -> 5.15 over 22 steps (ln vocab 6.91)' and the data's source and wait."""
    import math

    ranks = row.ranks[0] if row.ranks else None
    curve = (ranks.warmup_loss + ranks.loss) if ranks else []
    lines = []
    if curve:
        vocab = (row.model.dims or {}).get("token_vocab_size") if row.model else None
        scale = f"; ln(vocab) {math.log(vocab):.2f}" if vocab else ""
        lines.append(f"  loss        {curve[0]:.4g} -> {curve[-1]:.4g} over {len(curve)} steps (warm-up included"
                     f"{scale})")
    if row.data is not None:
        d = row.data
        wait = (f", {d.wait_s_median * 1e3:.1f} ms a step making batches ({d.wait_share:.1%} of the wall)"
                if d.wait_s_median is not None and d.wait_share is not None else "")
        lines.append(f"  data        {d.label}{wait}")
    return lines


def comm_line(row: RunRow) -> str:
    """'  comm        1.0 MiB/step (6.00 bytes/param), predicted 1.0 MiB (x1.00), ZeRO paper 673.0 KiB'."""
    c = row.comm
    if c.bytes_per_step is None:
        return f"  comm        - ({'; '.join(c.notes) or 'not counted'})"
    text = f"  comm        {format_bytes(c.bytes_per_step)}/step"
    if c.bytes_per_param is not None:
        text += f" ({c.bytes_per_param:.2f} bytes/param)"
    ratio = measured_over_predicted(c.model_dump())
    if ratio is not None:
        of = " over the warm-up steps" if c.phases and "warmup" in c.phases else ""
        text += (f", predicted {format_bytes(c.predicted.bytes_per_step)} (x{ratio:.2f}{of}), ZeRO paper "
                 f"{format_bytes(c.predicted.paper_bytes_per_step)}")
    for name, phase in (c.phases or {}).items():
        if phase.bytes_per_step is not None:
            time = f", {phase.step_time_s_median * 1e3:.1f} ms/step" if phase.step_time_s_median else ""
            predicted = c.predicted.compressed_bytes_per_step if c.predicted and name == "compressed" else None
            text += (f"; {name} steps {format_bytes(phase.bytes_per_step)}/step{time}"
                     + (f" (predicted {format_bytes(predicted)})" if predicted is not None else ""))
    return text
