"""Tables for bench/mfu/README.md, computed from the committed rows (no hand-copied figures).

    python bench/mfu/summary.py bench/mfu/h100 [bench/mfu/h100_tuned]

The second folder holds parts 4-7 (the tuned runs): runs_part*.jsonl, baseline.jsonl, profile_*.jsonl.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dsx.models import resolve_model  # the same preset the rows name: model dimensions for the seed table

GIB = 1024 ** 3
MIB = 1024 ** 2


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def setup(row: dict) -> str:
    zero = row["ds_config"].get("zero_optimization", {})
    parts = [f"ZeRO-{zero.get('stage', 0)}"]
    offload = [k.split("_")[1] for k in ("offload_optimizer", "offload_param")
               if zero.get(k, {}).get("device", "none") != "none"]
    if offload:
        parts.append("CPU offload of " + " + ".join(offload))
    if row["toggles"].get("act_ckpt"):
        parts.append("act. ckpt")
    if row["toggles"].get("compile"):
        parts.append("engine.compile()")
    params = row["ds_config"].get("optimizer", {}).get("params", {})
    if offload and "optimizer" in offload:
        parts.append("DeepSpeedCPUAdam")
    else:
        parts.append("torch fused AdamW" if params.get("torch_adam") else "FusedAdam")
    config = row["ds_config"]
    if not config.get("gradient_clipping") and config.get("bf16", {}).get("check_grad_overflow") is False:
        parts.append("no clipping, no overflow check")
    return ", ".join(parts)


def baseline_line(b: dict) -> str:
    """A plain-PyTorch row of the 124M tables."""
    return (f"| {b['setup']} | {b['micro_batch']} | {b['step_time_s']['median'] * 1e3:.1f} | {b['tokens_per_s']:,.0f} | "
            f"{b['model_tflops_per_s']:.0f} | {b['mfu']:.1%} | {b['peak_allocated_bytes'] / GIB:.1f} | 1.00 |")


def dsx_line(r: dict, b: dict) -> str:
    """A dsx row of the 124M tables, with its tokens/s against baseline row `b`'s."""
    f = r["figures"]
    return (f"| dsx run: {setup(r)} | {r['micro_batch']} | {f['step_time_s']['median'] * 1e3:.1f} | "
            f"{f['tokens_per_s']:,.0f} | {f['model_tflops_per_s']:.0f} | {f['mfu']:.1%} | "
            f"{r['memory']['max']['peak_allocated'] / GIB:.1f} | {f['tokens_per_s'] / b['tokens_per_s']:.2f} |")


def dropout(row: dict) -> str:
    """GPT-2's three dropout probabilities as the row set them (the preset keeps transformers' 0.1)."""
    overrides = row["model"]["overrides"]
    values = {overrides.get(k, 0.1) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    return "/".join(f"{v:g}" for v in sorted(values))


def profile_kinds(row: dict) -> dict:
    """Kernel ms per step by kind. Two fixes for profile_xl.jsonl, written by an earlier step_profile, both made
    from the row's top kernels (which hold every kernel concerned): cuDNN's attention kernels were counted under
    matmul, and the device-side "Optimizer.step#AdamW.step" annotation was counted as an optimizer kernel."""
    kinds = dict(row["kernel_ms_per_step"])
    if row.get("user_annotations") != "excluded":
        for name, kind, ms in row["top_kernels_ms_per_step"]:
            if "#" in name:
                kinds[kind] -= ms
    if "attention" not in kinds:
        moved = sum(ms for name, _, ms in row["top_kernels_ms_per_step"] if "sdpa" in name or "flash" in name)
        kinds["matmul"] -= moved
        kinds["attention"] = moved
    return kinds


def tuned(folder: Path) -> list[str]:
    """Parts 4-7: dsx doing only the baseline's work (124M), and gpt2-xl pushed towards the MFU goal."""
    runs = [r for f in sorted(folder.glob("runs_part*.jsonl")) for r in rows(f) if r["status"] == "ok"]
    baselines = {b["micro_batch"]: b for b in rows(folder / "baseline.jsonl")}
    out = ["### GPT-2 124M again, doing only the baseline's work (part 4: one command, same GPU)", "",
           "| setup | micro-batch | median step ms | tokens/s | model TFLOP/s | MFU | peak alloc GiB | "
           "vs baseline at the same micro-batch |", "|---|---|---|---|---|---|---|---|"]
    for mb, b in sorted(baselines.items()):
        out.append(baseline_line(b))
        out += [dsx_line(r, b) for r in runs if r["model"]["preset"] == "gpt2" and r["micro_batch"] == mb]

    profiles = [row for p in sorted(folder.glob("profile_*.jsonl")) for row in rows(p)]  # not superseded_*
    columns = ("matmul", "attention", "compiled (triton)", "copy/fill", "optimizer")
    out += ["", "### Where the step goes (bench/tools/step_profile.py: phases timed between synchronisations; "
            "kernel time per step from torch.profiler)", "",
            "| model, micro-batch | setup | step ms | forward | backward | optimizer step | "
            + " | ".join(f"{c} kernels" for c in columns) + " | other kernels | GPU idle | kernels per step |",
            "|" + "---|" * (9 + len(columns))]
    for p in profiles:
        kinds, phases = profile_kinds(p), p["phase_ms"]
        other = sum(v for k, v in kinds.items() if k not in columns)
        out.append(f"| {p['model']}, {p['micro_batch']} | {p['setup']} | {p['step_ms']:.1f} | "
                   f"{phases['forward']:.1f} | {phases['backward']:.1f} | {phases['step']:.1f} | "
                   + " | ".join(f"{kinds.get(c, 0.0):.1f}" for c in columns)
                   + f" | {other:.1f} | {p['gpu_idle_ms_per_step']:.1f} | {p['kernels_per_step']:.0f} |")

    xl = [r for r in runs if r["model"]["preset"] == "gpt2-xl"]
    out += ["", "### GPT-2 1.56B (gpt2-xl shape), ZeRO-2 + engine.compile(), 1 GPU (parts 5-7)", "",
            "| setup | dropout | micro-batch | grad-accum | tokens per step | median step ms | tokens/s | "
            "model TFLOP/s | MFU | peak alloc GiB | NVML GiB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in xl:
        f, m = r["figures"], r["memory"]["max"]
        out.append(f"| {setup(r)} | {dropout(r)} | {r['micro_batch']} | {r['grad_accum']} | "
                   f"{r['micro_batch'] * r['grad_accum'] * r['model']['seq_len']:,} | "
                   f"{f['step_time_s']['median'] * 1e3:.0f} | {f['tokens_per_s']:,.0f} | "
                   f"{f['model_tflops_per_s']:.0f} | {f['mfu']:.1%} | {m['peak_allocated'] / GIB:.1f} | "
                   f"{m['nvml_used'] / GIB:.1f} |")
    pair = {(dropout(r), r["grad_accum"]): r["figures"]["step_time_s"]["median"] for r in xl}
    if ("0.1", 1) in pair and ("0.1", 4) in pair:
        micro = (pair[("0.1", 4)] - pair[("0.1", 1)]) / 3
        out += ["", f"From the grad-accum 1 and 4 rows (dropout 0.1): forward + backward of one micro-batch "
                f"{micro * 1e3:.0f} ms, the optimizer step and its copies {(pair[('0.1', 1)] - micro) * 1e3:.0f} ms."]
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    tuned_folder = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    every = rows(folder / "runs.jsonl")
    runs = [r for r in every if r["status"] == "ok"]
    baseline = rows(folder / "baseline.jsonl")[0]
    first = runs[0]
    out = [f"Versions: torch {first['versions']['torch']}, DeepSpeed {first['versions']['deepspeed']}, "
           f"transformers {first['versions']['transformers']}, dsx {first['versions']['dsx']}; GPU "
           f"{first['gpu_name']} (bf16 dense peak {first['figures']['peak_tflops']} TFLOP/s).", ""]

    gpt2 = [r for r in runs if r["model"]["preset"] == "gpt2"]
    out += ["### GPT-2 124M, seq 1024, vocab 50304: dsx run vs plain PyTorch (same command, same GPU)", "",
            "| setup | micro-batch | median step ms | tokens/s | model TFLOP/s | MFU | peak alloc GiB | vs baseline |",
            "|---|---|---|---|---|---|---|---|",
            baseline_line(baseline)]
    for r in gpt2:
        out.append(dsx_line(r, baseline))
        if r["figures"].get("flop_counter_flops_per_step"):
            out += ["", f"FLOP cross-check ({r['model']['preset']}): {r['figures']['flop_check_note']}"]

    xl = [r for r in runs if r["model"]["preset"] == "gpt2-xl"]
    out += ["", "### GPT-2 1.56B (gpt2-xl shape), seq 1024, 1 GPU", "",
            "| setup | micro-batch | median step ms | tokens/s | model TFLOP/s | MFU | peak alloc GiB | NVML GiB | "
            "host RSS GiB | pinned host GiB | deepspeed.initialize s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(xl, key=lambda r: -r["figures"]["mfu"]):
        f, m = r["figures"], r["memory"]["max"]
        pinned = m["pinned_host"] / GIB if m["pinned_host"] and m["pinned_host"] > MIB else 0.0
        out.append(f"| {setup(r)} | {r['micro_batch']} | {f['step_time_s']['median'] * 1e3:.0f} | "
                   f"{f['tokens_per_s']:,.0f} | {f['model_tflops_per_s']:.0f} | {f['mfu']:.1%} | "
                   f"{m['peak_allocated'] / GIB:.1f} | {m['nvml_used'] / GIB:.1f} | {m['host_rss_peak'] / GIB:.1f} | "
                   f"{pinned:.1f} | {r['overhead']['ds_initialize_s']:.1f} |")

    enc = [r for r in runs if r["model"]["family"] in ("bert", "albert")]
    out += ["", "### BERT-base and ALBERT-base, seq 512, bf16, ZeRO-1, 1 GPU (the seeds' columns)", "",
            "| GPU | model | mixed | vocab | width | layers | hidden | forward | batch_size | memory MiB | batch/s | "
            "mem/ex MiB | ex/s | tokens/s | TFLOP/s | MFU |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in enc:
        f, m = r["figures"], r["memory"]["max"]
        dims = resolve_model(r["model"]["preset"], r["model"]["overrides"], r["model"]["seq_len"],
                             r["model"]["vocab_pad"])
        ffn = getattr(dims.hf_config, "intermediate_size", "")
        memory = m["nvml_used"] / MIB
        out.append(f"| H100 | {r['model']['preset']} | bf16 | {dims.vocab_size:,} | {dims.seq_len} | {dims.num_layers} | "
                   f"{dims.hidden_size} | {ffn} | {r['micro_batch']} | {memory:,.0f} | "
                   f"{1 / f['step_time_s']['median']:.2f} | {memory / r['micro_batch']:.1f} | {f['samples_per_s']:.1f} | "
                   f"{f['tokens_per_s']:,.0f} | {f['model_tflops_per_s']:.0f} | {f['mfu']:.1%} |")

    failed = [r for r in every if r["status"] != "ok"]
    if failed:
        out += ["", "Runs that did not fit (rows with status `oom`, kept in runs.jsonl): " + "; ".join(
            f"{r['model']['preset']} micro-batch {r['micro_batch']}: {r['status']} "
            f"(peak allocated {r['memory']['max']['peak_allocated'] / GIB:.1f} GiB before it)" for r in failed) + "."]

    out += ["", "### Wall time dsx adds around each run (from the rows' `overhead`)", "",
            "| run | total s | timed steps s | warm-up s | launch->rank s | rank imports s | model build s | "
            "deepspeed.initialize s | teardown s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        o = r["overhead"]
        out.append(f"| {r['model']['preset']} {setup(r)} mb {r['micro_batch']} | {o['total_s']:.1f} | {o['timed_s']:.1f} | "
                   f"{o['warmup_s']:.1f} | {o['launch_to_rank_start_s']:.1f} | {o['rank_import_s']:.1f} | "
                   f"{o['model_build_s']:.1f} | {o['ds_initialize_s']:.1f} | {o['teardown_s']:.1f} |")
    if tuned_folder is not None:
        out += [""] + tuned(tuned_folder)
    print("\n".join(out))


if __name__ == "__main__":
    main()
