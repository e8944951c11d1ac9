"""The collectives' term judged on bench/estimator/link/'s rows: every dsx run of link.sh's commands, predicted with
the link it ran over (its command's own probe: NCCL's bus bandwidth of a bf16 all-reduce of
dsx.calibration.LINK_PROBE_MIB over NVLink or over sockets), beside the measured step:

    python bench/estimator/link_judge.py [FOLDER...]      # default: every bench/estimator/link/*/

Over sockets the collectives are most of the step, so these rows judge the term itself; `dsx report --vs-estimate`
leaves them out (the estimate prices the GPUs' own links).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibrate import ROOT, probe_busbw  # noqa: E402

from dsx.estimate import setup_of_row  # noqa: E402
from dsx.estimate.predict import collective_seconds, sent_bytes, step_time  # noqa: E402
from dsx.report.facts import nccl_link_changed  # noqa: E402


def judged(folder: Path) -> list[dict]:
    """Every row of the folder's ladder.jsonl with the link it ran over, its measured and predicted step (ok rows)."""
    probes = folder / "link.jsonl"
    out = []
    for row in map(json.loads, (folder / "ladder.jsonl").read_text().splitlines()):
        link = ("socket" if nccl_link_changed(row) else "nvlink") if row["world_size"] > 1 else None
        setup = replace(setup_of_row(row), link_busbw=probe_busbw(probes, link) if link else None)
        out.append({"folder": folder.name, "row": row, "link": link, "setup": setup,
                    "measured": row["figures"]["step_time_s"]["median"] if row["status"] == "ok" else None,
                    "predicted": step_time(setup, setup.micro_batch)})
    return out


def describe(j: dict) -> str:
    row, setup = j["row"], j["setup"]
    text = (f"{j['folder']}  {row['model']['preset']:<8} ZeRO-{row['ds_config']['zero_optimization']['stage']} "
            f"{row['micro_batch']} x {row['grad_accum']} {row['world_size']} GPU(s) {j['link'] or '':<6}")
    if j["measured"] is None:
        return f"{text}  {row['status']}: {(row.get('error') or '')[:60]}"
    busbw = f"{setup.link_busbw / 1e9:.1f} GB/s" if setup.link_busbw else "-"
    return (f"{text}  measured {j['measured'] * 1e3:8.1f} ms  predicted {j['predicted'] * 1e3:8.1f} ms "
            f"({j['measured'] / j['predicted'] - 1:+.1%} measured over predicted; collectives "
            f"{collective_seconds(setup) * 1e3:.1f} ms: {sent_bytes(setup) / 2**30:.2f} GiB at {busbw})")


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv] or sorted(p.parent for p in (ROOT / "bench/estimator/link").glob("*/ladder.jsonl"))
    for folder in folders:
        print("\n".join(map(describe, judged(folder))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
