"""How a run's sparse attention reads in dsx's output: the lines `dsx run` prints (reports: dsx.report)."""

from __future__ import annotations


def summary_lines(info) -> list[str]:
    """dsx run's lines about a row's sparse_attention (dsx.results.SparseAttentionInfo)."""
    kernel = {"flex_attention": "FlexAttention", "sdpa_mask": "masked SDPA"}.get(info.kernel or "", "dense SDPA")
    lines = [f"  sparse      {info.mode} (block {info.block}, asked: {info.requested}) -> {kernel}; layout density "
             f"{info.layout_density:.1%}, {info.attended_fraction:.1%} of dense's token pairs, "
             f"{info.tile_fraction:.1%} of its tiles; applied by dsx"
             + ("" if info.handed_to_deepspeed else ", not handed to DeepSpeed")]
    if info.decision:
        lines.append(f"              {info.decision}")
    if info.predicted_attention_speedup is not None and info.predicted_attention_speedup < 1 and info.applied:
        lines.append("              dense SDPA is predicted faster here: --sparse-attention auto would run dense")
    return lines
