"""How a rank fails: injected failures for dsx's own tests, and an exception sorted into oom / error."""

from __future__ import annotations

import os
import time

from dsx.rank.protocol import Injection


class InjectedFailure(RuntimeError):
    """A failure asked for with --inject-failure (tests of dsx's failure handling)."""


def maybe_inject(injection: Injection | None, rank: int, step: int | None) -> None:
    """Fail as `injection` asks when this is its rank and step (step None: right after deepspeed.initialize)."""
    if not injection or injection.step != step or injection.rank not in (None, rank):
        return
    where = "after deepspeed.initialize" if step is None else f"at timed step {step}"
    if injection.kind == "error":
        raise InjectedFailure(f"injected failure {where} on rank {rank}")
    if injection.kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"injected out-of-memory {where} on rank {rank}")
    if injection.kind == "exit":
        os._exit(17)  # dies without writing its result, like a rank killed by the OOM killer
    if injection.kind == "hang":
        while True:
            time.sleep(1)


def classify(exc: BaseException) -> str:
    """'oom' for device or host out-of-memory errors, else 'error'."""
    if isinstance(exc, MemoryError):
        return "oom"
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return "oom"
    except ImportError:
        pass
    text = str(exc).lower()
    if isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text
                                          or "not enough memory" in text):
        return "oom"
    return "error"


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 600:
        text = text[:600] + " ..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
