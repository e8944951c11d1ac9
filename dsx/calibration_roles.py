"""Which committed result rows set a calibrated constant (dsx.calibration names them) and which are judged: the rule
`dsx report --vs-estimate` and bench/estimator/speed_rows.py apply before counting a row against the estimate."""

from __future__ import annotations

from dsx.calibration import (ACT_OFFLOAD_RUN_IDS, AUTOCAST_RUN_IDS, BF16_OPTIMIZER_RUN_IDS, CALIBRATION_ROWS,
                             COMM_LOGGER_RUN_IDS, COMPILE_RUN_IDS, FIRST_OFFLOAD_BEFORE, H100,
                             H200_CALIBRATION_RUN_IDS, H200_COMPILE_RUN_IDS,
                             HEADROOM_RUN_IDS, HOST_SPEED_RUN_IDS, LLAMA_COMPILE_RUN_IDS, ULYSSES_RUN_IDS,
                             WIDTH_RUN_IDS, ZERO3_FETCH_RUN_IDS, ZERO3_LINK_RUN_IDS)
from dsx.calibration_ladders import H200_LADDER_RUN_IDS


ROLE_BY_RUN_ID = (
    (frozenset({COMPILE_RUN_IDS["layers"], COMPILE_RUN_IDS["head"], *H200_COMPILE_RUN_IDS,
                *LLAMA_COMPILE_RUN_IDS.values()}), "compile calibration"),
    (frozenset(WIDTH_RUN_IDS), "width calibration"),
    (ZERO3_FETCH_RUN_IDS, "zero3 fetch calibration"),
    (COMM_LOGGER_RUN_IDS, "comm logger calibration"),
    (frozenset(ULYSSES_RUN_IDS.values()), "ulysses calibration"),
    (frozenset(ACT_OFFLOAD_RUN_IDS.values()), "act offload calibration"),
    (HOST_SPEED_RUN_IDS, "host speed calibration"),
    (H200_LADDER_RUN_IDS, "step calibration"),
    (AUTOCAST_RUN_IDS, "autocast calibration"),
    (BF16_OPTIMIZER_RUN_IDS, "bf16 optimizer calibration"),
    (ZERO3_LINK_RUN_IDS, "zero3 link calibration"),
)
"""The roles a row has by its run id alone, checked in this order (first match) before the rules by kind and time."""


def calibration_role(row: dict) -> str:
    """What a result row is to the calibration: 'calibration' (a CALIBRATION_ROWS configuration on the H100, or a row of
    H200_CALIBRATION_FILES: it set a GPU kind's constants), 'fit calibration' (a HEADROOM_FILE trial: its fit/OOM
    outcome set the headroom; its memory is judged), 'compile calibration' (a compiled row of COMPILE_RUN_IDS or
    LLAMA_COMPILE_RUN_IDS, or a row of H200_COMPILE_PAIRS: it set the compile factors), 'width calibration' (a
    WIDTH_RUN_IDS row: it set the width curve), 'zero3 fetch calibration' (a ZERO3_FETCH_PAIRS row: it set
    ZERO3_FETCH_S), 'comm logger calibration' (a COMM_LOGGER_PAIRS row: it set the logger's constants), 'ulysses
    calibration' (a ULYSSES_RUN_IDS row: it set ULYSSES_BYTES_PER_S), 'act offload calibration' (an
    ACT_OFFLOAD_RUN_IDS row: it set ACT_OFFLOAD_BYTES_PER_S), 'host speed calibration' (a HOST_SPEED_RUNS row: it
    set ZERO3_HOST_SENSITIVITY), 'step calibration' (an H200_STEP_LADDERS,
    H200_MICRO_BATCH_LADDERS or H200_ZERO3_LADDERS row: it set H200.fixed_s_per_param, micro_batch_s_per_param,
    step_s_per_tensor, zero3_s_per_module_pass and host_loop_ns), 'autocast calibration' (an AUTOCAST_PAIRS
    row: it set AUTOCAST_S_PER_PARAM), 'bf16 optimizer calibration' (a BF16_OPTIMIZER_PAIR row: it set
    BF16_OPTIMIZER_S_PER_TENSOR), 'zero3 link calibration' (a ZERO3_LINK_PAIRS row: it set ZERO3_LINK_EXPOSED) or
    'judged'."""
    for run_ids, role in ROLE_BY_RUN_ID:
        if row.get("run_id") in run_ids:
            return role
    if (row.get("toggles") or {}).get("act_ckpt_offload") and row.get("time", "") < FIRST_OFFLOAD_BEFORE:
        return "first offload"
    if row.get("run_id") in H200_CALIBRATION_RUN_IDS:
        return "calibration"
    if row.get("gpu_name") == H100.name:
        if row["model"].get("preset") == "gpt2-xl" and row["status"] == "ok" and \
                ((row.get("sweep") or {}).get("label"), row["micro_batch"]) in CALIBRATION_ROWS.values():
            return "calibration"
        if row.get("run_id") in HEADROOM_RUN_IDS:
            return "fit calibration"
    return "judged"
