"""The config the ranks of a `dsx run` get: the user's config plus DeepSpeed's comms logger.

The row keeps the user's config (RunRow.ds_config: what `dsx report --best` hands back and what the trial key
hashes); the ranks' ds_config.json in the run's folder adds `comms_logger`, which DeepSpeed's engine reads at
deepspeed.initialize (deepspeed/comm/config.py: the block's mere presence turns the logger on, whatever its
`enabled` says). `dsx config` never writes the block unless asked (`--set comms_logger.enabled=true`).

verbose is forced off: verbose logging prints one line per collective from rank 0, thousands per step with ZeRO-3,
into the run's launcher.log. prof_all on and debug off: every collective, under its op's name.
"""

from __future__ import annotations

import copy

from dsx.config_facts import ONEBIT

LOGGER_BLOCK = {"enabled": True, "prof_all": True, "verbose": False, "debug": False}


def rank_config(config: dict, comm_log: bool = True) -> tuple[dict, list[str]]:
    """(the config the ranks get, notes). With comm_log, the comms logger is on with LOGGER_BLOCK's settings (a
    user's own comms_logger block keeps its prof_ops); without, a user's block is removed, so nothing is logged."""
    out = copy.deepcopy(config)
    notes: list[str] = []
    own = out.get("comms_logger")
    if not comm_log:
        if own is not None:
            del out["comms_logger"]
            notes.append("--no-comm-log: the config's comms_logger block is left out of the ranks' config")
        return out, notes
    block = dict(own) if isinstance(own, dict) else {}
    if block.get("verbose"):
        notes.append("comms_logger.verbose is turned off for the ranks (one line per collective would flood the "
                     "output); the row's comm field holds the counts")
    block.update(LOGGER_BLOCK)
    out["comms_logger"] = block
    return out, notes


def logger_in_timed_steps(comm_log: bool, config: dict, warmup: int) -> bool:
    """Whether the logger stays on in a run's timed steps (dsx.rank.comms says why): with a 1-bit optimizer (its
    compressed phase is among them) or fewer than two warm-up steps; otherwise it counts the warm-up steps after the
    first and is off in the timed ones."""
    onebit = str((config.get("optimizer") or {}).get("type", "")).lower() in ONEBIT
    return comm_log and (onebit or warmup < 2)
