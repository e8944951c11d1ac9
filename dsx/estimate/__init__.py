"""Predict peak GPU memory, host memory and speed of a `dsx run` before it runs: `dsx estimate`, sweep pruning.

Per rank, in bytes; N = parameters, W = data-parallel ranks, P = bytes of a working-precision parameter (2 for
bf16/fp16, 4 for fp32), S = fp32 master copy (4, none at ZeRO-0 fp32) + optimizer state (AdamW/Adam/LAMB 8,
Lion/Adagrad/SGD-momentum/Muon 4) per parameter.

GPU, two moments; the peak is the larger:
- forward/backward (the start of the backward pass): the states resident then + activations (`dsx.activations`:
  what autograd keeps, measured on the meta device) + the loss backward's two logits-sized gradients.
    ZeRO-0   P·N + S·N (+ 4·N bf16: DeepSpeed's BF16_Optimizer keeps fp32 gradient accumulators)
    ZeRO-1/2 P·N + S·N/W                      (gradients do not exist yet at the start of the backward pass)
    ZeRO-3   (P + S + P)·N/W + bucket + P·G   (its gradient partitions are allocated up front; G: parameters
             gathered at once = the largest module + stage3_prefetch_bucket_size, capped by max_live_parameters)
    offload  P·N (ZeRO-1/2), P·N/W + bucket (ZeRO-3), bucket only with the parameters offloaded too
- optimizer step: ZeRO-1/2 P·N + gradients (P·N at ZeRO-1, P·N/W at ZeRO-2) + P·N/W staging + (S + 4)·N/W
  (the fp32 gradient copy); ZeRO-3 (P + S + P + 4)·N/W + bucket; ZeRO-0 its resident states + gradients.
  bucket = reduce_bucket_size gradients in P bytes (ZeRO-3 allocates it at initialisation).
  With gradient accumulation > 1 the gradients of ZeRO-1/2 live through the forward passes too.

Fits: peak allocated + CUDA context + allocator headroom <= the GPU's memory. The headroom is what the caching
allocator could not use when a multi-GiB block (the fp32 logits) had to be placed near the boundary
(dsx.calibration.HEADROOM_FILE).

Host, per rank (CPU offload): the process itself (calibrated) + HOST_BYTES_PER_PARAM·f·N/W (+ P·N/W with the
parameters offloaded); NVMe offload puts S·f·N/W on the drive instead. The ranks of one host share its RAM.

Partial optimizer offload (ZeRO-3 `offload_optimizer.ratio` r < 1): DeepSpeed cuts the parameters into sub-groups
of `sub_group_size` (1e9) elements, in parameter order, and keeps the first int((1 - r) x sub-groups) of them on the
GPU, the rest on the CPU; f is the offloaded sub-groups' share of the parameters (1 for full offload, which is
r = 1). The GPU sub-groups keep their fp32 master, optimizer state and fp32 gradients on the GPU: (S + 4)·(1-f)·N/W
more GPU bytes, f of the host bytes, f of the CPU optimizer step.

Compiled (`--compile`, DeepSpeed's engine.compile()) at ZeRO 0-2: the layers' saved activations, and the
embeddings/head/loss part with the loss gradients, each x its factor (dsx.calibration.compile_memory_factors: Llama's
own, GPT-2's for every other family), the compute the GPU kind's compile_speedup x faster (dsx.calibration: the
H200's eager/compiled pairs of GPT-2 and llama-1b; COMPILE_SPEEDUP, one gpt2-xl pair, on the H100); at ZeRO-3, not
measured, as eager.

Speed, per optimizer step of G = grad-accum micro-batches: model FLOPs of the G micro-batches (dsx.flops) x (1 +
recomputed forward with checkpointing) over the GPU's dense peak times an achieved fraction, + ZeRO-3's
per-parameter gather cost (every micro-batch's passes), + once per step: the per-parameter fixed work and the CPU
optimizer step (x f with partial offload). Accumulating G micro-batches spreads the once-per-step part over G times
the tokens: with offload, tokens/s rises with G. Communication between GPUs is not modelled (assumed overlapped):
multi-GPU speed is an upper bound.

Fits: every resource fits (dsx.fit): the GPU as above, the host's RAM (the per-rank host bytes x the ranks on the
host, against Setup.host_memory) and the NVMe path's free space (Setup.nvme_free); a capacity that is None is not
checked. The estimate names the resource that binds.

Every constant that is not DeepSpeed's layout is calibrated on named rows of the repository's bench/ results and
ships inside dsx as literal numbers (dsx.calibration: GPUS, the rows each came from); this package reads no file.
`dsx report --vs-estimate` judges the other rows. Activations are never fitted: they come from the model's code.
"""

from dsx.calibration import GPUS
from dsx.estimate.host import host_bytes
from dsx.estimate.predict import Estimate, estimate, gpu_needed, max_micro_batch, step_time
from dsx.estimate.rows import gpu_kind_of, setup_of_row
from dsx.estimate.states import (OPTIMIZER_STATE_BYTES, EstimateError, Setup, activation_bytes,
                                 compiled_counted, compute_flops, model_states, offloaded_fraction,
                                 optimizer_state_bytes, partial_offload_states, zero3_gathered_params)

__all__ = ["GPUS", "OPTIMIZER_STATE_BYTES", "Estimate", "EstimateError", "Setup", "activation_bytes",
           "compiled_counted", "compute_flops", "estimate", "gpu_kind_of", "gpu_needed", "host_bytes",
           "max_micro_batch", "model_states", "offloaded_fraction", "optimizer_state_bytes", "partial_offload_states",
           "setup_of_row", "step_time", "zero3_gathered_params"]
