"""dsx estimate's speed against every committed row that measured one on a calibrated GPU (H100, H200).

The figure the READMEs quote ("N of M rows off by more than 15%") comes from here, with the rule `dsx report
--vs-estimate` applies row by row (dsx.report.vs_estimate.speed_error): rows that set a speed constant are left out,
and so are rows whose timed steps are not steady (no warm-up step). Run from the repository root:

    python bench/estimator/speed_rows.py            # every row, and the files whose rows are off
    python bench/estimator/speed_rows.py --multi    # rows of two or more GPUs only
    python bench/estimator/speed_rows.py --rows     # every row off, one line each
    python bench/estimator/speed_rows.py --spread   # the floor: rows of one configuration against each other
    python bench/estimator/speed_rows.py --against-one-gpu   # each multi-GPU row over its 1-GPU row of one command
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from dsx.calibration_roles import calibration_role
from dsx.estimate import EstimateError, estimate, setup_of_row
from dsx.report.facts import model_text, zero_stage
from dsx.report.load import ReportError
from dsx.report.vs_estimate import (JUDGED_SPEED, SPEED_OFF, one_gpu_partner, scaling_error, scaling_key, speed_error,
                                    tokens_per_s)
from dsx.results import read_rows

ROOT = Path(__file__).resolve().parents[2]


def judged(multi: bool) -> tuple[list[tuple[str, dict, float]], dict[str, int]]:
    """([(file, row, error)] of every judged row, {reason: rows} of those left out)."""
    out, left_out = [], defaultdict(int)
    for path in sorted((ROOT / "bench").rglob("*.jsonl")):
        try:
            rows = list(read_rows(path))
        except (ReportError, ValueError, OSError):
            continue  # not a results file (a profile's, a plan's)
        for row in rows:
            if not isinstance(row, dict) or row.get("status") != "ok" or (multi and (row.get("world_size") or 1) < 2):
                continue
            try:
                predicted = estimate(setup_of_row(row), search_max=False).tokens_per_s
            except (EstimateError, KeyError, TypeError):
                continue  # a GPU without calibration, a CPU row, a row of another schema
            error = speed_error(row, predicted)
            if isinstance(error, str):
                left_out[error] += 1
            elif error is not None and calibration_role(row) not in JUDGED_SPEED:
                left_out[f"calibration ({calibration_role(row)})"] += 1
            elif error is not None:
                out.append((str(path.relative_to(ROOT)), row, error))
    return out, dict(left_out)


def configuration_key(row: dict) -> str:
    """What fixes a row's speed but the machine it ran on: its GPU count and what it shares with the other counts'
    rows of its configuration (dsx.report.vs_estimate.scaling_key: the GPU kind, the DeepSpeed config, the model, the
    batch split, the toggles, sparse layout, pipeline and whether the comms logger timed it). Two rows with one key
    ran the same configuration; they differ by host, GPU and the moment."""
    return json.dumps([row.get("world_size"), scaling_key(row)])


def spread(rows: list[tuple[str, dict, float]]) -> tuple[int, int, list[float]]:
    """(configurations measured more than once, their rows, each such row's deviation from its configuration's
    median tokens/s): what no estimate of the configuration alone can get under."""
    groups: dict[str, list[float]] = defaultdict(list)
    for _, row, _ in rows:
        groups[configuration_key(row)].append(tokens_per_s(row))
    repeated = [speeds for speeds in groups.values() if len(speeds) > 1]
    deviations = [speed / statistics.median(speeds) - 1 for speeds in repeated for speed in speeds]
    return len(repeated), len(deviations), deviations


def against_one_gpu(multi_rows: list[tuple[str, dict, float]]) -> list[tuple[str, dict, float, float]]:
    """[(file, row, error, scaling error)] of the multi-GPU rows with a 1-GPU row of their configuration from their
    file and command (dsx.report.vs_estimate.one_gpu_partner): the scaling error is the row's error once the machine's
    own speed is taken out (scaling_error). The 1-GPU row may be a calibration row: here it is the reference."""
    out, file_rows, predicted_ones = [], {}, {}
    for path, row, error in multi_rows:
        if path not in file_rows:
            file_rows[path] = [r for r in read_rows(ROOT / path) if isinstance(r, dict)]
        one = one_gpu_partner(row, file_rows[path])
        if one is None:
            continue
        if one["run_id"] not in predicted_ones:  # a 1-GPU row is the partner of each GPU count of its command
            try:
                predicted_ones[one["run_id"]] = estimate(setup_of_row(one), search_max=False).tokens_per_s
            except (EstimateError, KeyError, TypeError):
                predicted_ones[one["run_id"]] = None
        if predicted_ones[one["run_id"]] is None:
            continue
        predicted = (1 + error) * tokens_per_s(row)
        out.append((path, row, error, scaling_error(row, predicted, one, predicted_ones[one["run_id"]])))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multi", action="store_true", help="rows of two or more GPUs only")
    parser.add_argument("--rows", action="store_true", help="every row off, one line each")
    parser.add_argument("--spread", action="store_true",
                        help="rows of one configuration measured more than once, against their median")
    parser.add_argument("--against-one-gpu", action="store_true",
                        help="multi-GPU rows with a 1-GPU row of one command: the error of the n-GPU / 1-GPU ratio")
    args = parser.parse_args(argv)
    rows, left_out = judged(args.multi or args.against_one_gpu)
    if not rows:
        print("no judged rows")
        return 1
    if args.spread:
        groups, n, deviations = spread(rows)
        far = sum(abs(d) > SPEED_OFF for d in deviations)
        typical = statistics.median(map(abs, deviations))
        print(f"{groups} configurations measured more than once, {n} rows: {far} of them more than {SPEED_OFF:.0%} "
              f"from their configuration's median tokens/s, median |deviation| {typical:.1%}, largest "
              f"{max(deviations):+.0%} / {min(deviations):+.0%}")
        return 0
    if args.against_one_gpu:
        paired = against_one_gpu(rows)
        print(f"{len(paired)} of {len(rows)} judged rows of 2+ GPUs have a 1-GPU row of their configuration in their "
              f"command: {sum(abs(e) > SPEED_OFF for _, _, e, _ in paired)} off by more than {SPEED_OFF:.0%}, "
              f"{sum(abs(s) > SPEED_OFF for _, _, _, s in paired)} with their n-GPU / 1-GPU ratio off by more than "
              f"{SPEED_OFF:.0%} (median |error| {statistics.median(abs(e) for _, _, e, _ in paired):.1%}, of the ratio "
              f"{statistics.median(abs(s) for _, _, _, s in paired):.1%})")
        for path, row, error, scaling in paired if args.rows else ():
            print(f"{error:+6.0%} {scaling:+6.0%}  run {row['run_id'][:8]} ({model_text(row)}, "
                  f"ZeRO-{zero_stage(row)}, micro-batch {row['micro_batch']} x {row['grad_accum']}, "
                  f"{row['world_size']} x {row['gpu_name']})  {path}")
        return 0
    off = [(path, row, error) for path, row, error in rows if abs(error) > SPEED_OFF]
    print(f"{len(rows)} judged rows{' of 2+ GPUs' if args.multi else ''}: {len(off)} off by more than "
          f"{SPEED_OFF:.0%}, median |error| {statistics.median(abs(e) for _, _, e in rows):.1%}")
    print("left out: " + (", ".join(f"{n} {reason}" for reason, n in sorted(left_out.items())) or "none"))
    by_file: dict[str, list[float]] = defaultdict(list)
    for path, _, error in off:
        by_file[path].append(error)
    for path, errors in sorted(by_file.items()):
        print(f"  {path}: {len(errors)} off, {', '.join(f'{e:+.0%}' for e in sorted(errors))}")
    if args.rows:
        for path, row, error in off:
            print(f"{error:+6.0%}  run {row['run_id'][:8]} ({model_text(row)}, ZeRO-{zero_stage(row)}, micro-batch "
                  f"{row['micro_batch']} x grad-accum {row['grad_accum']}, {row['world_size']} x {row['gpu_name']})"
                  f"  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
