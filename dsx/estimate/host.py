"""What the ranks need of the host (RAM, NVMe space; dsx.fit checks it) with optimizer or parameter offload, and the
notes saying what the estimate assumed of partial offload and compilation: they add to the GPU arithmetic of
dsx.estimate.states, they do not change it.
"""

from __future__ import annotations

from dsx.calibration import compile_speedup
from dsx.config_facts import precision_of, weights_precision
from dsx.estimate.states import (Setup, compiled_counted, data_parallel, optimizer_state_bytes, pinned_input_bytes,
                                 zero_layout)


def host_bytes(setup: Setup, n_rank: int, world: int, fraction: float) -> tuple[int, int]:
    """(host RAM, NVMe bytes) of one rank: the process, the offloaded share `fraction` of the optimizer's
    calibrated host bytes (on NVMe: its states on the drive, the rest in RAM), offloaded parameters, the
    checkpointed layer inputs of --act-ckpt-offload (pinned, in power-of-two pieces)."""
    config = setup.ds_config
    stage, offload, offload_params, _ = zero_layout(config)
    precision = weights_precision(precision_of(config))
    host = setup.gpu.host_process_bytes[stage]
    per_param = setup.gpu.host_bytes_per_param
    nvme = 0
    states = (0 if (stage == 0 and precision == "fp32") else 4) + optimizer_state_bytes(config)
    if offload == "cpu":
        host += int(per_param[stage] * fraction * n_rank) // world
    elif offload == "nvme":
        nvme += int(states * fraction * n_rank) // world
        host += int((per_param[stage] - states) * fraction * n_rank) // world
    if setup.act_ckpt and setup.act_ckpt_offload:
        host += pinned_input_bytes(setup, setup.micro_batch)
    p = 4 if precision == "fp32" else 2
    if offload_params == "cpu":
        host += p * n_rank // world
    elif offload_params == "nvme":
        nvme += p * n_rank // world
    return host, nvme


def host_notes(setup: Setup, fraction: float) -> list[str]:
    """What the estimate assumed of partial offload and compilation, in words."""
    from dsx.calibration import FP8_SPEEDUP, LIGER_SPEEDUP, compile_memory_factors
    from dsx.offload import describe

    notes = []
    if 0.0 < fraction < 1.0:
        notes.append("partial optimizer offload: " + describe(setup.ds_config, setup.resolved, data_parallel(setup)))
    if compiled_counted(setup):
        measured = (f"{setup.gpu.name} eager/compiled pairs" if setup.gpu.compile_speedup
                    else "an eager/compiled pair of gpt2-xl on an H100")
        layers, head = compile_memory_factors(setup.resolved.family)
        notes.append(f"compiled: activations x{layers} (layers) and x{head} (embeddings, "
                     f"head, loss), compute x{compile_speedup(setup.gpu)} faster (measured on "
                     f"{measured}: dsx.calibration)")
    elif setup.compile:
        notes.append("compiled at ZeRO-3: counted as eager (compile was measured at ZeRO-1/2 only; ZeRO-3 gathers "
                     "parameters in hooks around every module)")
    if setup.liger:
        notes.append(f"Liger's kernels: compute x{LIGER_SPEEDUP} faster (measured eager on llama-1b: dsx.calibration)")
    if setup.fp8:
        how = "compiled" if setup.compile else "eager"
        notes.append(f"float8 ({setup.fp8}): compute x{FP8_SPEEDUP[how]} ({how}, measured tensorwise on llama-1b: "
                     "dsx.calibration); memory as bf16 (torchao keeps the bf16 weights and saves bf16 inputs: the "
                     "measured peaks matched)")
    return notes
