"""The multi-GPU evidence (issue 30) from the committed rows of bench/multigpu/run.sh:

    python3 bench/multigpu/summary.py                       # every bench/multigpu/**/*.jsonl
    python3 bench/multigpu/summary.py ROWS.jsonl|DIR ...     # only these

Plain JSON (no dsx import), so it reads rows of any dsx version. A row seen twice (the same run_id in two files) counts
once.

1. Data-parallel scaling: rows without a pipeline grouped by what must match (GPU, model and its overrides, sequence
   length, vocabulary padding, precision, ZeRO stage and offload, micro-batch, grad-accum, the toggles compile /
   act_ckpt / tf32 / attn, and the rest of the DeepSpeed config but train_batch_size); each row on N > 1 GPUs against
   the group's 1-GPU row nearest in time on a host of the same name (run.sh runs them in one command; the lent
   machines may share a host name): efficiency = tokens/s (N) / (N x tokens/s (1)), one line per multi-GPU row. One
   node or a hostfile's nodes, and whether DeepSpeed's comms logger ran (it synchronises after every collective),
   are said on each line, not matched.
2. Pipeline rows (the latest of each setup and m): stages x replicas, micro-batches per step m, step time, tokens/s
   per GPU, and the bubble: ideal (p-1)/(m+p-1) (the row's pipeline.bubble_fraction); measured against data
   parallel, 1 - tokens/s per GPU of the pipeline / that of a plain-engine row of the same model, GPU, micro-batch
   and m (the same world size when there is one); and from the pipeline's own step times: a line t(m) = a m + b
   fitted over the setup's m values, the idle share 1 - a m / t(m) (a: one micro-batch slot; what is left is the
   fill and drain, the optimizer step and any stage imbalance).
3. Communication rows (1-bit optimizers, ZeRO++, and the plain rows of the same model, micro-batch and GPUs): bytes
   per step measured and predicted, step time, and each 1-bit phase's bytes and step time.
4. Rows over several nodes (a hostfile): hosts, ranks per node, launcher, tokens/s, bytes per step.
5. Sweeps: each sweep's configurations with their best tokens/s and the one it picked.
6. The largest model that ran (most parameters; larger ones tried and not finished above it): its shape, GPUs,
   configuration, tokens/s, model TFLOP/s per GPU against issue 30's target, GPU and host memory (dsx's predictions
   beside them: `dsx report --vs-estimate`), and deepspeed.initialize's seconds.
7. Rows that did not finish (oom, error, timeout), with their error.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent
GiB = 2**30
ONEBIT = {"OneBitAdam", "ZeroOneAdam", "OneBitLamb"}
ZEROPP = {"zero_quantized_weights": "qwZ", "zero_quantized_gradients": "qgZ", "zero_hpz_partition_size": "hpZ"}


def zeropp_words(zero: dict) -> list[str]:
    """The ZeRO++ options a ZeRO block turns on, by their paper names (qwZ, qgZ, hpZ=N). A flag is on when it is
    True (not merely equal to 1: True == 1 in Python), a partition size when it is above 1."""
    words = []
    for key, name in ZEROPP.items():
        value = zero.get(key)
        if value is True:
            words.append(name)
        elif isinstance(value, int) and not isinstance(value, bool) and value > 1:
            words.append(f"{name}={value}")
    return words


def load(paths: list[str]) -> list[dict]:
    files: list[Path] = []
    for p in paths or [str(ROOT)]:
        path = Path(p)
        files += sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
    rows, seen = [], set()
    for f in files:
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("kind", "run") != "run" or r.get("run_id") in seen:
                continue
            seen.add(r.get("run_id"))
            r["_file"] = str(f)
            rows.append(r)
    rows.sort(key=lambda r: r.get("time") or "")
    return rows


def zero_of(r: dict) -> dict:
    return r["ds_config"].get("zero_optimization") or {}


def comm_log(r: dict) -> bool:
    return "--no-comm-log" not in (r.get("command") or [])


def tps(r: dict) -> float:
    return r["figures"]["tokens_per_s"]


def fmt(value, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def describe(r: dict) -> str:
    """The row's setup in a few words: model, ZeRO stage and offload, micro-batch x grad-accum, toggles."""
    m, t, z = r["model"], r.get("toggles") or {}, zero_of(r)
    words = [m["preset"] + (f" (+{len(m['overrides'])} overrides)" if m.get("overrides") else "")]
    words.append(f"ZeRO-{z.get('stage', 0)}")
    off = (z.get("offload_optimizer") or {}).get("device")
    if off and off != "none":
        ratio = (z.get("offload_optimizer") or {}).get("ratio")
        words.append(f"offload {off}" + (f":{ratio}" if ratio not in (None, 1, 1.0) else ""))
    words += zeropp_words(z)
    words.append(f"mb {r['micro_batch']} x ga {r['grad_accum']}")
    words += [k for k in ("compile", "act_ckpt", "tf32") if t.get(k)]
    if m.get("vocab_pad"):
        words.append(f"vocab pad {m['vocab_pad']}")
    return ", ".join(words)


def where(r: dict) -> str:
    n = r.get("nodes")
    if n:
        return f"{len(n['hosts'])} nodes x {'/'.join(map(str, n['ranks_per_node']))} ({n['launcher']})"
    return "1 node"


def scaling_key(r: dict) -> str:
    """What two rows must share to be compared across GPU counts."""
    m, config = r["model"], dict(r["ds_config"])
    config.pop("train_batch_size", None)
    return json.dumps([r.get("gpu_name"), m["preset"], m.get("overrides"), m["seq_len"], m.get("vocab_pad"),
                       r.get("precision"), r["micro_batch"], r["grad_accum"], r.get("toggles"), r.get("python"),
                       config], sort_keys=True)


def minutes(r: dict) -> float:
    return datetime.fromisoformat(r["time"]).timestamp() / 60 if r.get("time") else 0.0


def scaling(rows: list[dict]) -> list[str]:
    out = []
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and not r.get("pipeline") and r["figures"].get("tokens_per_s"):
            groups[scaling_key(r)].append(r)
    for members in groups.values():
        ones = [r for r in members if r["world_size"] == 1]
        many = sorted((r for r in members if r["world_size"] > 1), key=lambda r: (r["world_size"], r["time"]))
        if not ones or not many:
            continue
        lines_of: dict[str, list[str]] = defaultdict(list)  # by the 1-GPU row they are measured against
        bases = {}
        for r in many:
            host, n, place, logged = str(r.get("host")), r["world_size"], where(r), comm_log(r)
            # the 1-GPU row nearest in time on a host of the same name (the same command, as run.sh runs them:
            # the lent machines may share a host name), else the nearest anywhere
            same_host = [o for o in ones if str(o.get("host")) == host]
            base = min(same_host or ones, key=lambda o: abs(minutes(o) - minutes(r)))
            n_base = len(same_host or ones)
            apart = abs(minutes(base) - minutes(r))
            bases[base["run_id"]] = (base, n_base)
            eff = tps(r) / (n * tps(base))
            goal = {2: 0.95, 4: 0.90}.get(n)
            comm = (r.get("comm") or {}).get("bytes_per_step")
            lines_of[base["run_id"]].append(
                f"  scaling 1 -> {n} GPUs, {place}{'' if logged else ', comms logger off'}: {eff:.1%} "
                f"({tps(r):,.0f} vs {n} x {tps(base):,.0f} tokens/s"
                + (f"; {comm / GiB:.2f} GiB communicated per step" if comm else "")
                + ("" if same_host else f"; on host {host}, its 1-GPU row on another")
                + (f"; its 1-GPU row ran {apart:.0f} min apart" if apart > 15 else "") + ")"
                + (f" [{'meets' if eff >= goal else 'BELOW'} the issue's {goal:.0%}]" if goal else ""))
        for run_id, lines in lines_of.items():
            base, n_base = bases[run_id]
            out.append(f"{describe(base)} on {base.get('gpu_name')} (host {base.get('host')}): 1 GPU "
                       f"{tps(base):,.0f} tokens/s ({fmt(base['figures'].get('mfu'), '.1%')} MFU"
                       f"{', comms logger off' if not comm_log(base) else ''}"
                       f"{f', the nearest in time of {n_base} runs' if n_base > 1 else ''})")
            out += lines
    return out or ["(no group with a 1-GPU row and a multi-GPU row)"]


def pipe_key(r: dict) -> tuple:
    """What a pipeline row and its data-parallel reference share: the model, precision, micro-batch and ZeRO stage
    (a ZeRO-1 pipeline measured against ZeRO-2 data parallel would charge the pipeline with ZeRO-2's traffic)."""
    m = r["model"]
    return (r.get("gpu_name"), m["preset"], json.dumps(m.get("overrides"), sort_keys=True), m["seq_len"],
            m.get("vocab_pad"), r.get("precision"), r["micro_batch"], zero_of(r).get("stage", 0))


def pipeline(rows: list[dict]) -> list[str]:
    ok = [r for r in rows if r["status"] == "ok" and r["figures"].get("tokens_per_s")]
    pipes = [r for r in ok if r.get("pipeline")]
    if not pipes:
        return ["(no pipeline rows)"]
    plain: dict[tuple, list[dict]] = defaultdict(list)
    for r in ok:
        if not r.get("pipeline"):
            plain[(pipe_key(r), r["grad_accum"])].append(r)
    # the pipeline's own line: step time against m, per setup
    setups: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in pipes:
        p = r["pipeline"]
        setups[(pipe_key(r), p["stages"], p["data_parallel"])][p["micro_batches"]] = r  # latest of each m
    fits = {}
    for setup, by_m in setups.items():
        if len(by_m) >= 2:
            ms = sorted(by_m)
            ts = [by_m[m]["figures"]["step_time_s"]["median"] for m in ms]
            mean_m, mean_t = statistics.fmean(ms), statistics.fmean(ts)
            a = sum((m - mean_m) * (t - mean_t) for m, t in zip(ms, ts)) / sum((m - mean_m) ** 2 for m in ms)
            fits[setup] = (a, mean_t - a * mean_m)
    out = ["| model | GPU | stages x replicas | micro-batch | m | step ms | tokens/s | per GPU | TFLOP/s per GPU "
           "| ideal bubble | measured vs DP | idle share (fit) | DP reference |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for setup, by_m in sorted(setups.items(), key=lambda kv: (kv[0][1], kv[0][2], str(kv[0][0]))):
        key, stages, replicas = setup
        for m in sorted(by_m):
            r = by_m[m]
            step = r["figures"]["step_time_s"]["median"]
            per_gpu = tps(r) / r["world_size"]
            ideal = r["pipeline"].get("bubble_fraction", (stages - 1) / (m + stages - 1))
            refs = plain.get((key, m), [])
            same = [x for x in refs if x["world_size"] == r["world_size"]]
            ref = (same or refs or [None])[-1]
            vs_dp = 1 - per_gpu / (tps(ref) / ref["world_size"]) if ref else None
            fit = fits.get(setup)
            idle = 1 - fit[0] * m / step if fit else None
            reference = "-"
            if ref:
                reference = (f"{ref['world_size']} GPU(s) ZeRO-{zero_of(ref).get('stage', 0)}, "
                             f"{tps(ref) / ref['world_size']:,.0f} per GPU")
            out.append(f"| {key[1]} | {key[0]} | {stages} x {replicas} | {r['micro_batch']} | {m} | {step * 1e3:,.0f} "
                       f"| {tps(r):,.0f} | {per_gpu:,.0f} | {fmt(r['figures'].get('model_tflops_per_s'), '.0f')} "
                       f"| {ideal:.1%} | {fmt(vs_dp, '.1%')} | {fmt(idle, '.1%')} | {reference} |")
    for setup, (a, b) in fits.items():
        key, stages, replicas = setup
        out.append(f"fit {key[1]} on {key[0]}, {stages} x {replicas}: step = {a * 1e3:.1f} ms x m + {b * 1e3:.0f} ms; "
                   f"the 1F1B fill and drain alone would be (p-1) x {a * 1e3:.1f} = {(stages - 1) * a * 1e3:.0f} ms")
    return out


def communication(rows: list[dict]) -> list[str]:
    def special(r: dict) -> bool:
        opt = (r["ds_config"].get("optimizer") or {}).get("type")
        return opt in ONEBIT or bool(r.get("python")) or any(zero_of(r).get(k) for k in ZEROPP)

    marked = [r for r in rows if special(r)]
    if not marked:
        return ["(no 1-bit or ZeRO++ rows)"]
    keys = {(r.get("gpu_name"), r["model"]["preset"], r["micro_batch"], r["world_size"]) for r in marked}
    chosen = [r for r in rows if not r.get("pipeline")
              and (r.get("gpu_name"), r["model"]["preset"], r["micro_batch"], r["world_size"]) in keys]
    out = ["| model | GPUs | optimizer | ZeRO | precision | DeepSpeed | logger | status | step ms | tokens/s "
           "| MiB/step | predicted MiB/step | phases: MiB/step, step ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in chosen:
        c = r.get("comm") or {}
        step = (r["figures"].get("step_time_s") or {}).get("median")
        pred = (c.get("predicted") or {}).get("bytes_per_step")
        compressed = (c.get("predicted") or {}).get("compressed_bytes_per_step")
        phases = "; ".join(f"{name} {fmt(v.get('bytes_per_step') and v['bytes_per_step'] / 2**20, ',.1f')}, "
                           f"{fmt(v.get('step_time_s_median') and v['step_time_s_median'] * 1e3, '.1f')}"
                           for name, v in (c.get("phases") or {}).items())
        zero = " + ".join([f"{zero_of(r).get('stage', 0)}", *zeropp_words(zero_of(r))])
        optimizer = (r["ds_config"].get("optimizer") or {}).get("type")
        out.append(f"| {r['model']['preset']} | {r['world_size']} | {optimizer} "
                   f"| {zero} | {r.get('precision')} | {(r.get('versions') or {}).get('deepspeed')} "
                   f"| {'on' if comm_log(r) else 'off'} | {r['status']} | {fmt(step and step * 1e3, '.1f')} "
                   f"| {fmt(r['figures'].get('tokens_per_s'), ',.0f')} "
                   f"| {fmt(c.get('bytes_per_step') and c['bytes_per_step'] / 2**20, ',.1f')} "
                   f"| {fmt(pred and pred / 2**20, ',.1f')}"
                   + (f" ({compressed / 2**20:,.1f} compressed)" if compressed else "") + f" | {phases or '-'} |")
    return out


def nodes(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        n = r.get("nodes")
        if not n:
            continue
        comm = (r.get("comm") or {}).get("bytes_per_step")
        rss = ", ".join(f"{h} {v / GiB:.1f} GiB" for h, v in (n.get("host_rss_peak") or {}).items() if v)
        out.append(f"{r['status']}: {describe(r)}, {r['world_size']} ranks on {len(n['hosts'])} nodes "
                   f"{', '.join(n['hosts'])} (ranks per node {n['ranks_per_node']}, launcher {n['launcher']}): "
                   f"{fmt(r['figures'].get('tokens_per_s'), ',.0f')} tokens/s"
                   + (f", {comm / GiB:.2f} GiB communicated per step" if comm else "")
                   + (f"; host RSS by node: {rss}" if rss else ""))
    return out or ["(no rows over several nodes)"]


def sweep_label(r: dict) -> str:
    """The trial's sweep label with its grad-accum (the label names it only when grad-accum was an axis)."""
    label = r["sweep"]["label"]
    return label if f" ga{r['grad_accum']}" in f" {label}" else f"{label} ga{r['grad_accum']}"


def sweeps(rows: list[dict]) -> list[str]:
    by_sweep: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("sweep"):
            by_sweep[r["sweep"]["sweep_id"]].append(r)
    out = []
    for sid, rs in by_sweep.items():
        best: dict[str, dict] = {}
        for r in rs:
            label = sweep_label(r)
            if r["status"] == "ok" and (label not in best or tps(r) > tps(best[label])):
                best[label] = r
        tried = defaultdict(list)
        for r in rs:
            tried[sweep_label(r)].append(f"mb{r['micro_batch']} {r['status']}")
        if len(tried) < 2:
            continue
        winner = max(best.values(), key=tps) if best else None
        out.append(f"sweep {sid[:8]} ({rs[0]['model']['preset']}, {rs[0]['world_size']} GPU(s), {len(rs)} trials):")
        for label, trials in tried.items():
            b = best.get(label)
            out.append(f"  {label}: {', '.join(trials)}"
                       + (f"; best mb {b['micro_batch']}: {tps(b):,.0f} tokens/s, "
                          f"{fmt(b['figures'].get('model_tflops_per_s'), '.0f')} TFLOP/s per GPU" if b else ""))
        if winner:
            out.append(f"  picked: {sweep_label(winner)} mb {winner['micro_batch']}, "
                       f"{tps(winner):,.0f} tokens/s")
    return out or ["(no sweep with several configurations)"]


def sequence_parallel_of(r: dict) -> int:
    size = r["ds_config"].get("sequence_parallel_size")
    return size if isinstance(size, int) and size > 1 else 1


def attention_of(r: dict) -> str:
    """'dense', or the sparse layout dsx applied (FlexAttention): sparse and dense rows are not compared."""
    sparse = r.get("sparse_attention") or {}
    return f"sparse {sparse['mode']}" if sparse.get("applied") else "dense"


def sequence_parallel(rows: list[dict]) -> list[str]:
    """Ulysses rows (issue 32): the length, each rank's share, speed and memory, and tokens/s against the same model
    at the same length and attention on one GPU (the nearest such row in time), where there is one."""
    ok = [r for r in rows if r["status"] == "ok" and r["figures"].get("tokens_per_s")]
    ulysses = [r for r in ok if sequence_parallel_of(r) > 1]
    if not ulysses:
        return ["(no --sequence-parallel rows)"]
    out = ["| model | GPUs | Ulysses group | tokens per sequence | per rank | attention | steps (warm-up) | step s "
           "| tokens/s | TFLOP/s per GPU | MFU | peak allocated / reserved GiB | host RSS, pinned GiB | against 1 GPU |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(ulysses, key=lambda r: (r["model"]["params"], r["model"]["seq_len"])):
        n, seq, f, mem = sequence_parallel_of(r), r["model"]["seq_len"], r["figures"], r["memory"]["max"]
        ones = [o for o in ok if o["world_size"] == 1 and o["model"]["preset"] == r["model"]["preset"]
                and o["model"]["seq_len"] == seq and o.get("gpu_name") == r.get("gpu_name")
                and attention_of(o) == attention_of(r)]
        against = "-"
        if ones:
            one = min(ones, key=lambda o: abs(minutes(o) - minutes(r)))
            speedup = tps(r) / tps(one)
            against = f"{speedup:.2f}x of {tps(one):,.0f} ({speedup / r['world_size']:.0%} per GPU)"
        out.append(f"| {r['model']['preset']} | {r['world_size']} x {r.get('gpu_name')} | {n} | {seq:,} | {seq // n:,} "
                   f"| {attention_of(r)} | {r['steps']} ({r['warmup']}) | {f['step_time_s']['median']:.2f} | {tps(r):,.0f} "
                   f"| {fmt(f.get('model_tflops_per_s'), '.0f')} | {fmt(f.get('mfu'), '.1%')} "
                   f"| {mem['peak_allocated'] / GiB:.1f} / {mem['peak_reserved'] / GiB:.1f} "
                   f"| {mem['host_rss_peak'] / GiB:.1f}, {(mem.get('pinned_host') or 0) / GiB:.1f} | {against} |")
    return out


LARGEST_FROM = 10e9
"""The largest-model section reads rows of this many parameters or more (largest4's 16.9B-34B), not every model."""


def largest(rows: list[dict]) -> list[str]:
    sized = [r for r in rows if (r["model"].get("params") or 0) >= LARGEST_FROM]
    if not sized:
        return [f"(no row of {LARGEST_FROM / 1e9:.0f}B parameters or more)"]
    ran = [r["model"]["params"] for r in sized if r["status"] == "ok"]
    top = max(ran) if ran else max(r["model"]["params"] for r in sized)
    out = []
    for r in sorted([r for r in sized if r["model"]["params"] >= top], key=lambda r: -r["model"]["params"]):
        params = r["model"]["params"]
        f, mem, o = r["figures"], r["memory"]["max"], r["overhead"]
        tflops = f.get("model_tflops_per_s")
        d = r["model"].get("dims") or {}
        shape = ", ".join(f"{k} {d[k]}" for k in ("layers", "hidden", "heads", "kv_heads", "ffn") if k in d)
        out.append(f"{r['status']}: {params / 1e9:.1f}B parameters ({shape}), "
                   f"{describe(r)}, {r['world_size']} x {r.get('gpu_name')}: {fmt(f.get('tokens_per_s'), ',.0f')} "
                   f"tokens/s, {fmt(tflops, '.1f')} model TFLOP/s per GPU, MFU {fmt(f.get('mfu'), '.1%')}")
        out.append(f"  peak allocated {fmt(mem.get('peak_allocated') and mem['peak_allocated'] / GiB, '.1f')} GiB, "
                   f"reserved {fmt(mem.get('peak_reserved') and mem['peak_reserved'] / GiB, '.1f')} GiB "
                   "(busiest rank); "
                   f"host RSS {fmt(mem.get('host_rss_peak') and mem['host_rss_peak'] / GiB, '.1f')} GiB per rank, "
                   f"pinned {fmt(mem.get('pinned_host') and mem['pinned_host'] / GiB, '.1f')} GiB; "
                   f"deepspeed.initialize {fmt(o.get('ds_initialize_s'), '.1f')} s "
                   f"of {fmt(o.get('total_s'), '.0f')} s "
                   f"(model build {fmt(o.get('model_build_s'), '.1f')} s, steps {fmt(o.get('timed_s'), '.1f')} s)")
        if r["status"] == "ok":
            met = params >= 30e9 and (tflops or 0) >= 100
            out.append(f"  issue 30's target (>= 30B at >= 100 model TFLOP/s per GPU): {'met' if met else 'NOT met'}")
    return out


def failures(rows: list[dict]) -> list[str]:
    return [f"{r['status']}: {describe(r)}, {r['world_size']} GPU(s) {where(r)}: {(r.get('error') or '')[:160]}"
            for r in rows if r["status"] != "ok"] or ["(none)"]


def main(paths: list[str]) -> None:
    rows = load(paths)
    gpus = sorted({str(r.get("gpu_name")) for r in rows})
    print(f"{len(rows)} row(s) from {len({r['_file'] for r in rows})} file(s); GPUs: {', '.join(gpus)}")
    for title, lines in (("Data-parallel scaling", scaling(rows)), ("Pipeline stages", pipeline(rows)),
                         ("Communication: 1-bit optimizers, ZeRO++ and their plain rows", communication(rows)),
                         ("Several nodes (a hostfile)", nodes(rows)),
                         ("Sequence parallel (Ulysses)", sequence_parallel(rows)), ("Sweeps", sweeps(rows)),
                         ("The largest model", largest(rows)), ("Rows that did not finish", failures(rows))):
        print(f"\n## {title}\n")
        print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
