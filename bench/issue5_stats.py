"""Summary of dsx estimate against the committed H100 rows (judged rows only; --compile rows left out: not modelled).
Run: python bench/issue5_stats.py"""
import json
from dsx.estimate import estimate, setup_of_row, CALIBRATION_ROWS
from dsx.results import read_rows
cal=set(CALIBRATION_ROWS.values())
files=["bench/results/issue4/h100/gpt2xl.jsonl","bench/results/issue4/h100/bert_effects.jsonl","bench/results/issue3/h100/runs.jsonl"]
mem=[];fit=[];host=[];speed=[]
for f in files:
    for r in read_rows(f):
        if r["toggles"]["compile"]: continue
        lab=((r.get("sweep") or {}).get("label"), r["micro_batch"])
        if f.endswith("gpt2xl.jsonl") and lab in cal and r["status"]=="ok": continue
        e=estimate(setup_of_row(r), search_max=False)
        fit.append(e.fits == (r["status"]=="ok"))
        if r["status"]=="ok":
            m=r["memory"]["max"]["peak_allocated"]; mem.append((e.peak_allocated-m)/m)
            t=r["figures"]["tokens_per_s"]; speed.append((e.tokens_per_s-t)/t)
            if e.offload!="none": h=r["memory"]["max"]["host_rss_peak"]; host.append((e.host_per_rank-h)/h)
print(f"judged rows: {len(fit)}; ok {len(mem)}: within ±10%: {sum(abs(x)<0.10 for x in mem)}, within ±5%: {sum(abs(x)<0.05 for x in mem)}, max |err| {max(abs(x) for x in mem):.1%}")
print(f"fit/OOM right: {sum(fit)}/{len(fit)}")
print(f"host (offload): {len(host)} rows, within ±15%: {sum(abs(x)<0.15 for x in host)}, max |err| {max(abs(x) for x in host):.1%}")
import statistics
print(f"tokens/s: median |err| {statistics.median(abs(x) for x in speed):.1%}, max {max(abs(x) for x in speed):.1%}")
