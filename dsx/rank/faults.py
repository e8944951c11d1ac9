"""How a rank fails: injected failures for dsx's own tests, and an exception sorted into oom / error."""

from __future__ import annotations

import os
import re
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


FIRST_LAYER = re.compile(r"(^|\.)(h|layers|layer)\.0\.")
"""Parameter names of a transformers model's first block: GPT-2 transformer.h.0., Llama model.layers.0., BERT
encoder.layer.0. (ALBERT's one shared layer: albert_layer_groups.0. is not matched; no block, no fault)."""


def install_gradient_fault(injection: Injection | None, rank: int, model) -> int:
    """`--inject-failure grad[@RANK]`: a training that is silently wrong, for the parity check's own test. Every
    gradient of the model's first block is zeroed on its way to DeepSpeed (a tensor hook, which runs before ZeRO's
    accumulation hooks at every stage), as when a configuration loses a module's gradients (DeepSpeed #8224). A
    scaled gradient would not do: Adam divides a constant scale away. Returns the parameters hooked."""
    if not injection or injection.kind != "grad" or injection.rank not in (None, rank):
        return 0
    hooked = [p for name, p in model.named_parameters() if FIRST_LAYER.search(name) and p.requires_grad]
    if not hooked:
        raise InjectedFailure("injected gradient fault: the model has no first block (h.0, layers.0, layer.0)")
    for parameter in hooked:
        parameter.register_hook(lambda grad: grad * 0)
    return len(hooked)


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
