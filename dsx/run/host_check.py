"""`dsx run`'s look at the host's memory before it launches GPU ranks that keep state there.

Ranks that offload optimizer states or parameters to the CPU, or checkpointed inputs (--act-ckpt-offload), hold
them in this machine's RAM; past it the kernel's OOM killer ends a rank, or another process of the machine. `dsx
sweep` skips such a configuration when it plans; `dsx run` refuses it with the same estimate (dsx.estimate's host
memory, dsx.fit's resources) before it starts anything. The estimate's host memory was under the measured one by up
to dsx.fit.HOST_ERROR on the judged rows, so a refused run would not fit even as predicted; --no-host-check starts it
anyway.
"""

from __future__ import annotations

from dsx.run.request import Trial

ON_HOST = ("cpu",)
"""Offload devices whose state lives in the host's RAM (NVMe offload keeps pinned staging buffers only)."""


def keeps_state_on_host(trial: Trial) -> bool:
    """Whether the trial's ranks keep optimizer states, parameters or checkpointed inputs in host memory."""
    from dsx.estimate.states import zero_layout

    _, optimizer, params, _ = zero_layout(trial.ds_config)
    return optimizer in ON_HOST or params in ON_HOST or trial.request.act_ckpt_offload


def host_memory_refusal(trial: Trial, gpu_name: str | None, host_memory: int | None = None) -> str | None:
    """Why the trial's ranks would not fit the host's RAM (`host_memory`, default this machine's), as dsx estimate
    predicts their host memory; None when they fit, keep nothing there, or the estimate cannot price the run. The
    ranks are the trial's world size on one host. A GPU dsx has no calibration for is priced with the H100's host
    constants (the host's share does not depend on the GPU)."""
    if not keeps_state_on_host(trial):
        return None
    from dsx.estimate import GPUS, EstimateError, estimate
    from dsx.estimate.rows import gpu_kind_of, setup_of_trial
    from dsx.fit import HOST, Resource, host_capacity, shortfall_text

    kind = gpu_kind_of(gpu_name) or GPUS["h100-80gb"]
    try:
        predicted = estimate(setup_of_trial(trial, kind, host_memory=host_capacity(host_memory)), search_max=False)
    except EstimateError:
        return None
    host = next(Resource(r["name"], r["needed"], r["capacity"], r["detail"]) for r in predicted.resources
                if r["name"] == HOST)
    if host.fits:
        return None
    return (f"predicted not to fit this machine: {shortfall_text(host)}; the kernel would kill the ranks once they "
            "fill it (dsx estimate prices the run; offload less, to NVMe, or run fewer ranks; --no-host-check runs it "
            "anyway)")
