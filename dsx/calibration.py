"""The estimator's calibration: the constants of each GPU kind as literal numbers, and the rows they came from.

dsx ships these numbers: `dsx estimate`, the sweep's pruning and `dsx report --vs-estimate` read no file to know
them, so an installed dsx and a source checkout give the same answers. The code that derives them from the
committed result rows lives in the repository, not in dsx: bench/estimator/calibrate.py (run it to print them).
tests/test_calibration.py recomputes them from the rows named here and checks they equal the literals below: a
re-calibration that is not copied in fails.

Every constant that is not DeepSpeed's layout is calibrated on the named rows; every other row is judged, never
used to set a constant (dsx.calibration_roles.calibration_role says which a row is).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dsx.units import MIB


@dataclass(frozen=True)
class GpuKind:
    """A GPU and host kind with its calibration (bench/estimator/calibrate.py computes these from CALIBRATION_ROWS)."""

    key: str
    name: str
    total_bytes: int
    """Memory torch sees (torch.cuda.get_device_properties().total_memory), measured."""
    context_bytes: int
    """NVML used minus torch's peak reserved: CUDA context, cuBLAS/NCCL workspaces."""
    fragmentation: float
    """Peak reserved / peak allocated of torch's caching allocator (median)."""
    achieved_fraction: float
    """FLOP/s of the matrix products (all model FLOPs but attention's two activation-by-activation products, which
    dsx.estimate.states.attention_seconds prices from dsx.sparse.predict's kernel model) over the dense peak: the
    slope of step time in micro-batch less attention's share of it."""
    fixed_s_per_param: float
    """Step time that does not grow with the micro-batch (optimizer step, clipping, bucket copies), per parameter;
    without DeepSpeed's per-tensor overflow check, priced apart (OVERFLOW_CHECK_S_PER_TENSOR), and without
    step_s_per_tensor."""
    cpu_step_s_per_param: dict[int, float]
    """CPU offload: seconds per parameter of DeepSpeedCPUAdam's step and the host<->GPU copies, by ZeRO stage."""
    zero3_s_per_module_pass: float
    """The host's time for ZeRO-3's hooks per module per forward or backward pass (one GPU: its bookkeeping, no network;
    three passes under checkpointing, whose recompute runs the hooks again); a pass shows only what exceeds its
    compute (dsx.estimate.predict.exposed_hooks). Per module, not per parameter: DeepSpeed hooks every submodule, with
    or without parameters of its own, and fetches and releases module by module, so gpt2-xl's 632 modules cost more
    than llama-7b's 423 with four-times-larger weights (per parameter it predicted llama-7b's 6.7B 2.8 s a step of
    hooks that its rows do not show; per parameter tensor it priced a Llama layer's 13 modules as its 9 tensors:
    bench/tools/h200_zero3_ckpt, bench/estimator/terms.md)."""
    host_process_bytes: dict[int, int]
    """RSS of one rank without offload (torch, CUDA, transformers, DeepSpeed), by ZeRO stage (ZeRO-3 builds the
    model under zero.Init)."""
    host_bytes_per_param: dict[int, float]
    """Host bytes per parameter added by optimizer CPU offload (AdamW, bf16), by ZeRO stage."""
    source: str
    achieved_hidden: int = 0
    """The hidden size achieved_fraction was measured at (the calibration model's)."""
    width_half_hidden: int = 0
    """The achieved fraction grows with the hidden size h as h / (h + width_half_hidden) (wider matrix products
    keep the tensor cores busier; the per-token elementwise work shrinks against them): fitted on the WIDTH_RUN_IDS
    rows. 0: no width dependence."""
    widest_hidden: int = 0
    """The widest hidden size the width curve was fitted on: wider models get its factor (not extrapolated)."""
    host_loop_ns: float = 0.0
    """The Python speed (dsx.host.python_loop_ns) of a host on which zero3_s_per_module_pass holds: ZeRO-3's hooks
    run in Python, so a row measured on a host of h ns prices them x (1 + ZERO3_HOST_SENSITIVITY x (h / host_loop_ns -
    1)) (the H200's: the median host of dsx.calibration_ladders.H200_ZERO3_LADDERS). 0: not measured for this kind,
    the hooks unscaled."""
    step_s_per_tensor: float = 0.0
    """Step time besides fixed_s_per_param and the overflow check, per parameter tensor of a rank's partition: the
    host's share of the step's fixed work, where machines of one kind differ (dsx.calibration_ladders). 0: the kind's
    fixed work priced per parameter alone (the H100's, from one micro-batch ladder)."""
    micro_batch_s_per_param: float = 0.0
    """Step time every micro-batch pays besides its compute, per parameter of the model (dsx.calibration_ladders:
    the grad-accum slope less the micro-batch's samples, at two micro-batches of one model on one machine; ZeRO 0, 1
    and 2 paid the same). 0: not measured for this kind (the H100's), its calibration's intercept holding it."""
    compile_speedup: float = 0.0
    """Achieved FLOP/s of the compiled model over the eager one on this kind, from its own same-command pairs
    (H200_COMPILE_PAIRS); 0: COMPILE_SPEEDUP, the H100's one pair."""
    link_busbw: float = 0.0
    """NCCL's bus bandwidth between two GPUs of the host, bytes/s (nccl-tests' busbw of a bf16 all-reduce of
    LINK_PROBE_MIB; bench/estimator/link_probe.py): what ZeRO-0/1/2's collectives run at (dsx.estimate.predict.
    collective_seconds). 0: not measured, the collectives unpriced."""
    allocator_headroom_bytes: int = 0
    """Free memory an allocation still failed with near the boundary (the caching allocator cannot place a large
    block in fragmented space): the largest shortfall among HEADROOM_FILE's out-of-memory trials predicted to fit."""


LINK_FILES = ("bench/estimator/link/link1/link.jsonl", "bench/estimator/link/link2/link.jsonl")
"""bench/estimator/link.sh's probes, two commands on 2 x H200 (2026-11-30): NCCL over NVLink ('nvlink') and over TCP
sockets on the loopback ('socket', a slow link as between nodes)."""
LINK_PROBE_MIB = 256
"""The all-reduce size whose bus bandwidth a GPU kind's link_busbw is: DeepSpeed's ZeRO-1/2 gradient bucket holds
min(5e8 elements, the model) (dsx.buckets), 237 MiB for GPT-2 124M in bf16, 954 MiB for larger models; NVLink ran
205-333 GB/s from 16 MiB to 1 GiB."""
NVLINK_BUSBW = 3.00e11
"""The median of LINK_FILES' 'nvlink' all-reduces of LINK_PROBE_MIB (298.8 and 301.3 GB/s; calibrate.py:
calibrate_link): two H200s over NVLink 4 (NV18). The H100 kind uses it too (the same 18 NVLink 4 links on an SXM
board; not measured on H100s)."""


ZERO3_LINK_PAIRS = (  # (folder of bench/estimator/link.sh's output, over sockets, over NVLink): one command each
    ("bench/estimator/link/link2", "c4e3a9c91b8a4726a745793f338ecb2a", "d0199849c341437aa5bdec46b868cd5a"),  # gpt2-xl 8 x 1
    ("bench/estimator/link/link3", "ba16e136c1674b41b5ad9a94c97c742d", "caa8ce1c755645349d8954cecefe74c9"),  # GPT-2 8 x 1
    ("bench/estimator/link/link3", "3ff30f3956d244f39abf965cb8648e73", "674379e3502e455d993d7545f5a7c4df"),  # llama-1b 4 x 1
)
"""ZeRO-3 on 2 x H200 over TCP sockets and over NVLink, one configuration in one command each (2026-11-30)."""
ZERO3_LINK_RUN_IDS = frozenset(run_id for _, *ids in ZERO3_LINK_PAIRS for run_id in ids)
ZERO3_LINK_EXPOSED = 0.704
"""The share of ZeRO-3's extra transfer time over a link slower than NVLink that its step pays: the rest overlaps
the compute (prefetched gathers, overlapped reductions). Per pair, the step's growth over the bytes' extra time at
the two probes' bus bandwidths; the median of ZERO3_LINK_PAIRS' 0.547 (gpt2-xl), 1.014 (GPT-2 124M) and 0.704
(llama-1b) (calibrate.py: calibrate_zero3_link)."""


# --- NVIDIA H100 80GB HBM3 (SXM5, 16 host cores) --------------------------------------------------------------
# Measured 2026-11-23 with torch 2.11.0+cu130, DeepSpeed 0.19.8, transformers 5.17.0, Python 3.12.3, dsx 0.1.0
# (every row records its own versions). Calibrated the same day.

CALIBRATION_FILE = "bench/sweep/h100/gpt2xl.jsonl"
"""The results file (a path in the repository) the H100 constants come from: issue 4's exhaustive gpt2-xl sweep."""

CALIBRATION_ROWS = {
    "ckpt_a": ("z1 bf16 ckpt", 8), "ckpt_b": ("z1 bf16 ckpt", 32), "offload": ("z2 off=cpu bf16", 8),
    "zero3": ("z3 bf16", 8), "zero3_offload": ("z3 off=cpu bf16", 8), "base": ("z1 bf16", 8),
}
"""The rows (sweep label, micro-batch; status ok) of CALIBRATION_FILE that the H100 constants come from, by the role
each plays in the calibration. Every other row is judged, never used to set a constant."""

CALIBRATION_RUN_IDS = {
    "ckpt_a": "a7417345a8f14ec48bf554ab6c137a0a", "ckpt_b": "a6374256d0ee427e92e6e290666707ac",
    "offload": "72d82b71ed5e43608ae0b10df4a358eb", "zero3": "c623a5a269d749428f17f7e9a085a641",
    "zero3_offload": "49a82ba5fd6b47219fea837691adb0f1", "base": "8a28f5e311e742e89a85e67d13f0a769",
}
"""The run_id of each CALIBRATION_ROWS row in CALIBRATION_FILE (measured 2026-11-23 04:16-05:03 UTC)."""

HEADROOM_FILE = "bench/estimator/h100/gpt2xl_pruned.jsonl"
"""The trials the H100 allocator headroom comes from: a sweep that started each search at the predicted largest
micro-batch, so its trials sit on the fit/OOM boundary. Its fit/OOM outcomes are calibration."""

HEADROOM_RUN_IDS = frozenset({
    "8848fcdd7bee46ac9a5d9f1e57fd3961", "81d697fbef9a48ef9d6fc9119bc6b07a", "737c549cc04b42ae938b0a0349501311",
    "bc310e9267704ef5a56a39a6f4704cb2", "21c66cfe59ba46e2804b0a65e15fdd96", "7ae25bb8e19445c7ade01dd578a4db60",
    "95ec2c1bd2b9460a9f8827c7d4e64be2", "acbaf3c5e1be4c928b042df4c58d1d78", "30ebe24b9c164c17a65d13bc37ab50d8",
    "f7fec59ef9b24762b8c84db16aa47714",
})
"""The run_ids of every row of HEADROOM_FILE (measured 2026-11-23 12:49-12:58 UTC)."""

HEADROOM_STEP = 256 * MIB
"""The allocator headroom is the largest shortfall rounded up to this."""

WIDTH_FILES = ("bench/kernels/h100/llama3b.jsonl",)
"""The rows the width curve comes from: dsx's llama-3b preset (hidden 3,072, 3.21B parameters), ZeRO-1, eager,
micro-batch 2, torch's fused AdamW, one H100 (2026-11-27, bench/kernels/README.md part 4: the bases beside Liger).
Until 2026-12-01 it came from llama-7b's shape cut to 8 layers at ZeRO-3 (bench/parity/h100), whose hooks the
estimate now hides behind the compute (exposed_hooks): rows without ZeRO-3 measure the width alone."""

WIDTH_RUN_IDS = ("50e1d193b9b1418f8b8953d66fdb2343", "edc66f69d4cc40f29460c04733ac7a11")
"""The two base runs of that configuration (one command): the width curve's h0 is solved from the median of their
compute terms against gpt2-xl's (bench/estimator/calibrate.py: calibrate_width). Every other Llama row is judged
(bench/estimator/terms.md)."""

H100 = GpuKind(
    key="h100-80gb", name="NVIDIA H100 80GB HBM3", total_bytes=85_017_493_504,
    context_bytes=1_900_871_680, fragmentation=1.139, achieved_fraction=0.3117, fixed_s_per_param=5.00e-11,
    cpu_step_s_per_param={1: 4.791e-10, 2: 4.791e-10, 3: 1.138e-09}, zero3_s_per_module_pass=4.24e-04,
    host_process_bytes={0: 2_255_769_600, 1: 2_255_769_600, 2: 2_255_769_600, 3: 4_575_064_064},
    host_bytes_per_param={1: 21.83, 2: 21.83, 3: 19.99},
    source=f"H100 SXM5 host, 16 host cores, torch 2.11, DeepSpeed 0.19.8, 2026-11-23: the CALIBRATION_ROWS of "
           f"{CALIBRATION_FILE} (bench/estimator/calibrate.py: calibrate) and the out-of-memory trials of "
           f"{HEADROOM_FILE} (calibrate_headroom); the width curve from WIDTH_RUN_IDS of {', '.join(WIDTH_FILES)} "
           f"(calibrate_width, 2026-11-27)",
    allocator_headroom_bytes=2_684_354_560,  # 2.5 GiB, 10 x HEADROOM_STEP
    link_busbw=NVLINK_BUSBW,
    achieved_hidden=1600, width_half_hidden=2608, widest_hidden=3072,  # gpt2-xl's width; WIDTH_RUN_IDS
)
"""The H100 constants: every number but allocator_headroom_bytes and the width curve from CALIBRATION_ROWS, the
headroom from the out-of-memory trials of HEADROOM_FILE, the width curve from WIDTH_RUN_IDS."""

H200_CALIBRATION_FILES = tuple(f"bench/estimator/h200_calibration/run{n}.jsonl" for n in (1, 2, 3))
"""The H200's CALIBRATION_ROWS, run twice (bench/estimator/calibration_sweep.sh, device commands on one H200,
2026-11-29 15:59-16:15 UTC, torch 2.11.0+cu130, DeepSpeed 0.19.8), and the ZeRO-1 pair and row a third time (16:38,
after a warm run): each role's step time is the median of its runs (the slope reproduced within 3%, the intercept
terms moved by up to 40% between the first two commands)."""

H200_CALIBRATION_RUN_IDS = frozenset({
    "2f56b2f362bc4095969794180ade978d", "47cafb0a7dee4745b6415094aaa297ca", "48c18c6587a743eea69ed223c1b268ab",
    "3063e6f7143d4d7486da4200f5c468c8", "54dc733cd8f04881b631187c754d0d73", "d36c5cfab9ea4b98aac8dc3604b18427",
    "d483aeb484d149f0a9292ee3ee97476d", "9706958939f34855b27be32265eef3e7", "f0a941aa6705469a9bf82ab5d4aebef1",
    "d2b0dba74c4a4984a4e9ceeb5d8e7be5", "fc79b1b6f5b44e92b99103b450a576bc", "15e699e8b2ca4a68b7a8565eb369ec61",
    "ac662e01db7544baa68a1e85611def0e", "59e180c047744e4c905ec850c1fc994c", "208a4fe0db844deeab370500c48280d8",
})
"""The run_id of every row of H200_CALIBRATION_FILES (the six roles twice, three of them a third time)."""

HOST_SPEED_RUNS = (  # (file, a ZeRO-3 row's run id, the host's python_loop_ns measured before it)
    ("bench/estimator/h200_host_probe/a/host_probe.jsonl", "8fa99136ffb64001add8838b30ca03c7", 49.39),
    ("bench/estimator/h200_host_probe/b/host_probe.jsonl", "3258e2520b3b47f7a30ce3fb6a706fe2", 82.73),
    ("bench/estimator/h200_host_probe/c/host_probe.jsonl", "29fcd59f2544497b8749a5919468a0f0", 67.64),
)
"""One ZeRO-3 configuration (gpt2-xl, one GPU, eager, micro-batch 8 x 2) on three fresh H200 machines, each after
bench/estimator/host_probe.py (2026-11-29 19:43-19:54 UTC, its probe then the median of 5 runs of 1,000,000 loop
iterations; before rows recorded dsx.host.python_loop_ns themselves): 1,045, 1,672 and 1,408 ms a step where ZeRO-1
took 470, 492 and 488. They set ZERO3_HOST_SENSITIVITY (bench/estimator/calibrate.py: calibrate_host_sensitivity)."""

HOST_SPEED_RUN_IDS = frozenset(run_id for _, run_id, _ in HOST_SPEED_RUNS)
"""Every row of HOST_SPEED_RUNS (calibration_role: 'host speed calibration')."""

ZERO3_HOST_SENSITIVITY = 0.27
"""How much of a host's slower Python (dsx.host.python_loop_ns over GpuKind.host_loop_ns, less 1) ZeRO-3's hooks
pay: the loop probe is a noisy measure of what the hooks run at (one host probed at 85.2 ns ran the HOST_SPEED_RUNS
configuration in 1,028 ms, another at 49.4 ns in 1,045). Per HOST_SPEED_RUNS row, the hooks' time a pass it shows
over the price at the reference host, less 1, over its host's slowness, less 1; the median (calibrate.py:
calibrate_host_sensitivity)."""

H200 = replace(
    H100, key="h200-141gb", name="NVIDIA H200", total_bytes=150_109_880_320,
    context_bytes=2_036_203_520, fragmentation=1.147, achieved_fraction=0.3448, fixed_s_per_param=1.79e-11,
    cpu_step_s_per_param={1: 5.185e-10, 2: 5.185e-10, 3: 8.892e-10}, zero3_s_per_module_pass=4.60e-04,
    step_s_per_tensor=1.17e-04, micro_batch_s_per_param=1.05e-11,
    host_process_bytes={0: 2_196_611_072, 1: 2_196_611_072, 2: 2_196_611_072, 3: 4_572_559_360},
    host_bytes_per_param={1: 21.85, 2: 21.85, 3: 19.97},
    source="H200 SXM host, 16 host cores, torch 2.11, DeepSpeed 0.19.8, 2026-11-29: the CALIBRATION_ROWS of "
           + " and ".join(H200_CALIBRATION_FILES) + " (bench/estimator/calibrate.py --kind h200-141gb), the step's "
           "fixed work split by the grad-accum ladders of dsx.calibration_ladders; the allocator headroom and the "
           "width curve are the H100's; ZeRO-3's hooks and the host speed from H200_ZERO3_LADDERS "
           "(calibrate_zero3_hooks)",
    host_loop_ns=45.8,
    compile_speedup=1.535,  # H200_COMPILE_PAIRS (bench/estimator/calibrate.py: calibrate_compile_pairs)
)
"""The H200 SXM: the H100 SXM's GH100 compute with 141 GB of HBM3e (dsx.gpus), calibrated on its own rows as the H100
was: its achieved rate is 10% above the H100's (the bandwidth of HBM3e: the per-sample slope of the checkpointed pair
is 38 against 43 ms), and a 30B model that needs ZeRO-3 offload on four H100s fits four H200s without it. The
allocator headroom (out-of-memory trials on the fit boundary) and the width curve (a llama shape against gpt2-xl's)
were measured on the H100 only and are taken as they are (the same allocator, the same chip)."""

GPUS: dict[str, GpuKind] = {H100.key: H100, H200.key: H200}
"""The GPU kinds, by the key `dsx estimate --gpu-kind` and `dsx sweep --gpu-kind` take."""

CALIBRATION_FILES: dict[str, tuple[str, ...]] = {H100.key: (CALIBRATION_FILE,), H200.key: H200_CALIBRATION_FILES}
"""The results files each kind's CALIBRATION_ROWS come from (one per command that ran them)."""


# --- DeepSpeed's overflow check (ZeRO-1/2) ------------------------------------------------------------------------
# Before each optimizer step ZeRO-1/2 checks every gradient tensor of its partition for inf/nan, a few kernels
# launched from the host per tensor (stage_1_and_2.py: has_overflow_partitioned_grads_serial), always with fp16 and
# with bf16 unless bf16.check_grad_overflow is false (DeepSpeed 0.19's default: true). Host work per tensor, not per
# parameter: GPT-2 124M's 148 tensors cost a fifth of its step. fp16 at ZeRO-0 pays it too (its loss scaler checks
# every tensor) and ZeRO-1/2 with the optimizer offloaded checks each gradient as it copies it out; ZeRO-3 checks its
# flat buffer at once and bf16 at ZeRO-0 reads the gradient norm instead (dsx.estimate.states.overflow_check_seconds).

OVERFLOW_CHECK_FILES = ("bench/estimator/host_step/profile.jsonl", "bench/estimator/host_step/profile2.jsonl",
                        "bench/estimator/host_step/profile3.jsonl")
"""bench/tools/step_profile.py's rows of bench/estimator/host_step.sh: GPT-2 124M (micro-batch 32) and gpt2-medium
(16), compiled, ZeRO-1, on one H200 (2026-11-29, three device commands), each with and without the check in one
command. profile3.jsonl also holds ZeRO-3 with and without it: 26.3 and 25.3 ms of step phase, no cost."""

OVERFLOW_CHECK_PAIRS = (
    ("bench/estimator/host_step/profile.jsonl", 2, 3),  # gpt2: lean, then clipping + the check (dsx's defaults)
    ("bench/estimator/host_step/profile2.jsonl", 1, 3),  # gpt2: lean, then the check alone
    ("bench/estimator/host_step/profile2.jsonl", 4, 5),  # gpt2-medium: lean, then dsx's defaults
    ("bench/estimator/host_step/profile3.jsonl", 1, 4),  # gpt2: lean, then the check alone (another machine)
)
"""(file, line without the check, line with it; lines counted from 1) of each pair OVERFLOW_CHECK_S_PER_TENSOR comes
from. Clipping alone did not lengthen the step (73.75 and 73.65 ms, profile2.jsonl lines 1 and 2); the pairs with it
count it in."""

OVERFLOW_CHECK_S_PER_TENSOR = 1.06e-04
"""Seconds a ZeRO-1/2 step spends per gradient tensor of a rank's partition on the overflow check: the median over
OVERFLOW_CHECK_PAIRS of the step time difference over the model's parameter tensors (bench/estimator/calibrate.py:
calibrate_overflow_check). The H100 and H200 hosts ran the same lean step alike (11.0 and 7.2-12.1 ms)."""


# --- bf16-autocast at ZeRO-1/2 ------------------------------------------------------------------------------------
# Under torch_autocast the gradients are fp32 (the weights are) and ZeRO-1/2 moves each through its comm dtype's bucket
# (dsx.comm.predict): on llama-1b at micro-batch 4 a step's copy kernels grew from 31 to 51 ms, a device-to-device
# memcpy of 8 ms among them (bench/mfu/h200_autocast_llama/profile.jsonl, one H200, two pairs), and a micro-batch's
# forward and backward took 29 ms more than bf16's while the step lost its overflow check (-18 ms). Priced per
# parameter and micro-batch: a rank's backward makes every parameter's gradient at ZeRO-1/2 (the same cost on 1 and 2
# GPUs). ZeRO-3 did not show it (llama-1b on 2 H200s: 3.3 ps a parameter, against 26 at ZeRO-2); ZeRO-0 is not
# measured and not priced.

AUTOCAST_PAIRS = (  # (file, bf16 run, bf16-autocast run): ZeRO-1/2, one command each
    ("bench/mfu/h200_autocast_llama/runs.jsonl",  # llama-1b ZeRO-2 mb 4 x 2, 1 GPU: 363.1 / 411.6 ms
     "1df99b74f9c049e9b8b325a221930a57", "02e147061ffa4fad94aacb40d57df884"),
    ("bench/multigpu/rows/autocast2.jsonl",  # the same on 2 H200s: 360.4 / 417.0 ms
     "79f542cd7f58479886505da37e5b52b0", "b45a9d2669c54f2b89b2f5cd917ed36e"),
    ("bench/mfu/h200_autocast_flag/runs.jsonl",  # gpt2 ZeRO-1 mb 32 compiled: 90.0 / 77.3 ms
     "651eb2117c1a4802840a3dabdd1d24db", "ff9693799720457da4e24d366f9daede"),
    ("bench/mfu/h200_autocast/runs.jsonl",  # the same, another command: 86.9 / 76.5 ms
     "ebf04b46141e473b8cf6980b5ff60f42", "ecd6dd83235648a88fcce5b0091b75c7"),
    ("bench/mfu/h200_autocast/runs.jsonl",  # the same without clipping or the overflow check: 72.1 / 74.3 ms
     "11368c8b65aa45319a9bce1371571da9", "cf1339886b784833a6cfb5a58ecb45a7"),
)
"""The pairs AUTOCAST_S_PER_PARAM comes from, all on H200s. Left out: GPT-2 124M eager on 2 H200s (autocast2, 67.3 /
59.6 ms: a host-bound step, the estimate puts 44 ms of work in it, so GPU work added there is hidden; 0.7 ps a
parameter) and llama-1b at ZeRO-3 (outside the term)."""

AUTOCAST_RUN_IDS = frozenset(run_id for _, *ids in AUTOCAST_PAIRS for run_id in ids)
"""Every row of AUTOCAST_PAIRS (calibration_role: 'autocast calibration')."""

AUTOCAST_S_PER_PARAM = 2.43e-11
"""Seconds bf16-autocast adds to a ZeRO-1/2 step per parameter and micro-batch: the median over AUTOCAST_PAIRS of the
measured step difference less the estimate's (the overflow check autocast drops), over parameters x micro-batches
(bench/estimator/calibrate.py: calibrate_autocast; the pairs gave 17.1 to 42.8 ps)."""


# --- DeepSpeed's BF16_Optimizer (bf16 without ZeRO) ---------------------------------------------------------------
# bf16 at ZeRO-0 trains through DeepSpeed's BF16_Optimizer, which after every micro-batch's backward adds each bf16
# gradient into its fp32 accumulator tensor by tensor (bf16_optimizer.py update_hp_grads: a cast and an add launched
# per tensor, immediate_grad_update being off by default), and at the step takes the norm and clips tensor by tensor.
# (ZeRO-1/2's gradient path is in the calibration rows' own terms: they ran ZeRO-1.) Priced per parameter tensor and
# micro-batch, from one pair that differs only in the split of the same 16 samples; the step's own per-tensor share
# (the norm, the clip) is not separated from it. On the H200 it comes on top of micro_batch_s_per_param: there a
# llama-1b ZeRO-0 ladder's slope matched ZeRO-1's (85.0 and 87.0 ms, dsx.calibration_ladders), and its rows come out
# 5-7% slow with it, but GPT-2 124M's ZeRO-0 rows (bench/estimator/dp2_sync) go from 3-15% to 18-31% fast without it.

BF16_OPTIMIZER_PAIR = ("bench/parity/h100/first.jsonl",  # gpt2-xl, dropout 0, ZeRO-0 bf16, 1 H100, one command
                       "de5083c839a9408d86c6dc163329043d",  # micro-batch 8 x grad-accum 2: 628.6 ms
                       "d0e933bb51fb443cbdb9e914fdd77aa1")  # micro-batch 4 x grad-accum 4: 686.8 ms
"""(file, fewer micro-batches, more micro-batches): the pair BF16_OPTIMIZER_S_PER_TENSOR comes from."""

BF16_OPTIMIZER_RUN_IDS = frozenset(BF16_OPTIMIZER_PAIR[1:])
"""Both rows of BF16_OPTIMIZER_PAIR (calibration_role: 'bf16 optimizer calibration')."""

BF16_OPTIMIZER_S_PER_TENSOR = 5.02e-05
"""Seconds DeepSpeed's BF16_Optimizer adds to a ZeRO-0 bf16 step per parameter tensor and micro-batch: the pair's
measured step difference less the estimate's, over the extra micro-batches x gpt2-xl's 580 tensors
(bench/estimator/calibrate.py: calibrate_bf16_optimizer)."""


# --- ZeRO-3 across GPUs -------------------------------------------------------------------------------------------
# On one rank DeepSpeed skips ZeRO-3's parameter all-gathers; on several, each partitioned parameter is fetched (an
# all-gather launched and waited for by the module hooks) at each use in the forward pass, and again in the backward
# (or the recomputed forward before it) for what neither the reuse distance nor the prefetcher kept
# (dsx.comm.predict.zero3_fetches_per_micro_batch). The time is priced per fetch, not per byte: over NVLink the
# bytes move in a fraction of what the pairs below measured (14 GiB a step at hundreds of GB/s), the waits do not.

ZERO3_FETCH_PAIRS = (  # (file, two ranks, one rank): issue 30's pairs, each in one command on 2 x H200
    ("bench/multigpu/rows/dp2-z3.jsonl",  # gpt2-xl (below), 2026-11-28: 1,494 / 1,020 ms
     "e8d70cb45b1d4440ab9d49a3e7d48645", "e8fbe0042bcd4cb38d8ab5f978953575"),
    ("bench/multigpu/rows/dp2-z3.jsonl",  # 2026-11-29: 1,460 / 1,356 ms
     "e22d6b33b65f4219b81bba3d9abe69d9", "2c99f3d53cab49a6b91c8a34b920222c"),
    ("bench/multigpu/rows/dp2-z3.jsonl",  # 2026-11-29, another machine: 1,322 / 1,121 ms
     "8db2f95e3c9d430292582775c7d21aa5", "fbb9379176a348b3a1c5fc5144678d44"),
    ("bench/multigpu/rows/dp2-llama.jsonl",  # llama-3b (below), 2026-11-29: 3,244 / 3,039 ms
     "ab547ba4985e4a599ecfeed6ce01af52", "8f98c4ca038f41789e677c2e6841bec6"),
)
"""The pairs ZERO3_FETCH_S comes from (2 x H200 over NVLink: the H100 SXM's chip and link, dsx.calibration.H200), no
comms logger. gpt2-xl: eager, micro-batch 8 x grad-accum 2, the lean settings (bench/multigpu/run.sh's tuned_z3);
llama-3b: checkpointing, micro-batch 4 x grad-accum 4 (run.sh's dp2-llama). Per fetch they give 0.95, 0.26, 0.44 and
0.21 ms: gpt2-xl's 2-rank steps agree within 12%, its 1-rank steps differ by a third between commands (one ZeRO-3
GPU's step ran 0.99-1.49 s within one run), so the first pair alone set the constant 2.7x the median. Every other
multi-GPU ZeRO-3 row is judged (bench/multigpu/measured.md)."""

ZERO3_FETCH_RUN_IDS = frozenset(run_id for _, *ids in ZERO3_FETCH_PAIRS for run_id in ids)
"""Every row of ZERO3_FETCH_PAIRS (calibration_role: 'zero3 fetch calibration')."""

ZERO3_FETCH_S = 3.71e-04
"""Seconds a ZeRO-3 rank loses per parameter fetch on several ranks, the median over ZERO3_FETCH_PAIRS of: the
2-rank step less the 1-rank step, less what the estimate's other terms change between them, over the 2-rank step's
fetches (bench/estimator/calibrate.py: calibrate_zero3_fetch)."""


# --- DeepSpeed's comms logger (dsx run's default) -----------------------------------------------------------------
# deepspeed.comm's timed_op synchronises the device after every collective while the logger is on
# (get_accelerator().synchronize(), "to make op blocking for accurate logging"): a collective no longer overlaps the
# compute queued behind it, and the host no longer runs ahead of the GPU. Priced per byte a rank sends and per
# ZeRO-3 fetch (each a collective the forward or backward waits for), from on/off pairs of one configuration in one
# command.

COMM_LOGGER_PAIRS = (  # (file, logger on, logger off)
    ("bench/multigpu/rows/comm2.jsonl",  # gpt2 ZeRO-1: 58.5 / 55.6 ms
     "e3eadb4cc0054d728cfb8f7f8292e440", "3173d21e9f7f4872ab82d342ab80d1da"),
    ("bench/multigpu/rows/comm2.jsonl",  # gpt2 ZeRO-2: 60.2 / 56.8 ms
     "36c1f7bc879941a4995d605828c340fa", "d0ccffb89f514d36b06fe563a04151ac"),
    ("bench/multigpu/rows/comm2.jsonl",  # gpt2 ZeRO-3: 293.6 / 140.4 ms
     "c3ba678aebef4d68856e4fd3c1054b24", "1306d691654a4ae48ae71dc53b29aad7"),
    ("bench/multigpu/rows/logger2.jsonl",  # gpt2 ZeRO-2, another machine: 78.3 / 63.0 ms
     "ead0c7958a2e4e6e957ddad3d3e2d179", "1cb110f37e0d4853a45ca879525b338b"),
    ("bench/multigpu/rows/dp2-z2.jsonl",  # gpt2-xl tuned ZeRO-2: 2,868 / 2,686 ms
     "48bd35be3709464c8140c6cbfec25deb", "84b99fc088934a3496fbacc46ba4d1bc"),
    ("bench/multigpu/rows/logger-z3.jsonl",  # gpt2-xl ZeRO-3 (dp2-z3's): 4,750 / 1,165 ms
     "52f2822bccb64d83bd4665b24a284635", "a2b2e1ce3ddc4f3689fc35a14f37138b"),
)
"""The pairs the logger's constants come from, all on 2 x H200 (issue 30's comm2, logger2, dp2-z2 and logger-z3
parts). gpt2-xl's ZeRO-3 pair was first a judgement: from the other five the logger was priced at 2.96 ms a fetch,
2.03 s of that step; it measured 3.59 s (5.3 ms a fetch). Every other row with the logger on is judged."""

COMM_LOGGER_RUN_IDS = frozenset(run_id for _, *ids in COMM_LOGGER_PAIRS for run_id in ids)
"""Every row of COMM_LOGGER_PAIRS (calibration_role: 'comm logger calibration')."""

COMM_LOGGER_S_PER_BYTE = 4.13e-12
"""Seconds the logger adds per byte a rank sends (dsx.comm.predict's volume): the median over the pairs without
ZeRO-3 of the step difference over the bytes (bench/estimator/calibrate.py: calibrate_comm_logger)."""

COMM_LOGGER_S_PER_FETCH = 4.77e-03
"""Seconds the logger adds per ZeRO-3 parameter fetch besides its bytes: the median over the ZeRO-3 pairs (GPT-2
124M's 3.0 ms, gpt2-xl's 5.3) of the step difference less its bytes' share, over the fetches (bench/estimator/
calibrate.py: calibrate_comm_logger). Per fetch, not per byte: a gpt2-xl fetch gathers 3.4x a GPT-2 one's bytes
and cost the logger 1.8x as much."""


# --- Ulysses' all-to-alls (--sequence-parallel N) ------------------------------------------------------------------
# Each layer hands DeepSpeed's Ulysses attention q, k, v in and the output out through all-to-alls, forward, backward
# and in a checkpointed recompute (dsx.comm.predict.ulysses_all_to_all_bytes: what the comms logger counts, x1.00 on
# CPU ranks and 4 H100s). The step waits for them: priced per byte handed in, at one rate.

ULYSSES_FILE = "bench/multigpu/rows/sparse-sp4.jsonl"
"""issue 32's sparse-attention-under-Ulysses part: llama-1b at 131,072 tokens, bigbird, ZeRO-2, the tiled loss,
checkpointing, no comms logger, Ulysses over 4 H200s and on one H200 (2026-11-28): the one-GPU row's own error (-1% with
the H100's constants, +5% with the H200's own) taken out, what is left of the group's step is the all-to-alls' (bigbird:
attention is a small share)."""

ULYSSES_RUN_IDS = {"group of 4": "f4c52666bc044e4db0d440f7d3b5ae08", "one rank": "e1154e7b9d8c4ec6b1b0d226f9702344"}
"""The pair ULYSSES_BYTES_PER_S comes from (1,119 and 3,397 ms a step). The dense row of the same file, the long4
rows and every other Ulysses row are judged."""

ULYSSES_BYTES_PER_S = 6.37e10
"""Bytes a Ulysses rank hands its all-to-alls per second of step time: the group's step less its other terms (x the
one-rank row's measured / predicted), over the bytes (bench/estimator/calibrate.py: calibrate_ulysses). What ZeRO-2's
reduction over the group adds at the step's end (12.4 GB a step there against the all-to-alls' 16.1 GB) is folded in:
one pair cannot separate the two, so the rate is the all-to-alls' with the ZeRO-2 traffic that comes with them."""

ACT_OFFLOAD_FILE = "bench/long/h200_offload/savers.jsonl"
ACT_OFFLOAD_RUN_IDS = {"checkpointing": "d76dd1d2e2b544299fccf217e2ea7c24",
                       "offloaded inputs": "a774856fa3e045ca9a7f894679a32f90"}
"""The pair ACT_OFFLOAD_BYTES_PER_S comes from: llama-1b at 131,072 tokens on one H200, --loss tiled with
checkpointing, without and with --act-ckpt-offload, in one command (14.38 and 14.63 s a step, 2 timed steps each).
The same file's --tiled-mlp rows and every other offloaded row measured since are judged."""

ACT_OFFLOAD_BYTES_PER_S = 3.46e10
"""Checkpointed-input bytes --act-ckpt-offload moves per second of step time: the pair's step difference over the
inputs it keeps on the host (16 layers x 0.5 GiB a step; bench/estimator/calibrate.py: calibrate_act_offload): the
forward's pinned copy to the host and the recompute's copy back, on the compute stream (not overlapped)."""

FIRST_OFFLOAD_BEFORE = "2026-11-28T23:50:00+00:00"
"""Rows with --act-ckpt-offload measured before this time ran dsx's first offload, whose hidden-state gradients
crossed to the host and back through pageable memory (1.04 GB/s of offloaded bytes: 8.2 s a step for llama-1b at
131,072 tokens; bench/long/h200_savers). Their memory stands and is judged; their step time is not what dsx runs
now (calibration_role 'first offload')."""


# --- torch.compile (DeepSpeed's engine.compile(), `dsx run --compile`) ------------------------------------------
# Inductor fuses what eager autograd keeps apart (GELU's temporaries, LayerNorm outputs, dropout masks, the fp32
# upcast of the logits and the loss' gradients), so a compiled model saves fewer bytes for its backward pass than
# dsx.activations counts for the eager one. Two factors, one for the decoder layers' activations and one for the
# embeddings/head/loss part, solved from two compiled H100 rows of different shape (gpt2-xl: layers dominate; gpt2:
# the 50k-vocab head and loss dominate), given the estimator's own model states and eager activation counts for
# them. Measured with GPT-2 only: applied to every family, it is a guess for Llama's SwiGLU/RMSNorm layers.

COMPILE_FILE = "bench/mfu/h100/runs.jsonl"
"""issue 3's H100 rows: gpt2-xl ZeRO-2 micro-batch 8 eager and compiled (59.3 -> 42.1 GiB peak allocated, the same
command) and gpt2 ZeRO-1 micro-batch 32 compiled."""

COMPILE_RUN_IDS = {
    "layers": "535777384f0b4cd19cf712750d98d81c", "head": "0ffb19ea885442dbac8a47a9cb4124f2",
    "eager": "403763b215d94757afe72b3ce9e5f54f",
}
"""The rows of COMPILE_FILE the compile factors come from: 'layers' (gpt2-xl z2 mb 8 compiled) and 'head' (gpt2
z1 mb 32 compiled) set the two memory factors; 'eager' (gpt2-xl z2 mb 8, not compiled) beside 'layers' sets the
speed factor. The other compiled rows of bench/mfu are judged (bench/estimator/accuracy.py)."""

COMPILE_LAYER_FACTOR = 0.576
"""Compiled / eager bytes saved by the decoder layers (also the recomputed layer under checkpointing; the
checkpointed layer inputs are inputs, not changed by compiling)."""

COMPILE_HEAD_FACTOR = 0.337
"""Compiled / eager bytes of the embeddings, LM head and loss, and of the loss' gradients."""

LLAMA_COMPILE_FILE = "bench/kernels/h200_fused_compile/kernels.jsonl"
"""Compiled llama-1b (seq 2048, micro-batch 16, ZeRO-1, bf16) on one H200 in one command (bench/kernels/README.md,
part 7): the plain loss twice (77.0 and 84.8 GiB peak allocated) and Liger's fused loss (54.5 GiB, no logits)."""

LLAMA_COMPILE_RUN_IDS = {"layers": "285fdad4106f4f4392b861353fbfe535", "head": "7c25c8b66c234591b164eacf6db5e646"}
"""The rows of LLAMA_COMPILE_FILE LLAMA_COMPILE_FACTORS come from: 'layers' (the fused loss: its head parts are
nearly nil, so it sets the layers' factor) and 'head' (the plain loss's higher peak of the two: the compiled step's
peak is not repeatable, 77.0 and 84.8 GiB in one command, and a fit must hold on the run that peaks higher). The
other plain row is judged."""

LLAMA_COMPILE_FACTORS = (0.640, 0.705)
"""(layers, embeddings/head/loss) compiled / eager bytes of Llama-family models, as COMPILE_LAYER_FACTOR and
COMPILE_HEAD_FACTOR are GPT-2's: GPT-2's factors put compiled llama-1b 10-25% under its measured peak (H100 and
H200 rows), its 128k-word head and loss keeping far more of their eager bytes than GPT-2's 50k-word one
(bench/estimator/terms.md, "Compiled memory of Llama models")."""


def compile_memory_factors(family: str) -> tuple[float, float]:
    """(layers, embeddings/head/loss) memory factors of a compiled model of `family`: Llama's own, else GPT-2's (the
    only other family measured compiled)."""
    return LLAMA_COMPILE_FACTORS if family == "llama" else (COMPILE_LAYER_FACTOR, COMPILE_HEAD_FACTOR)


COMPILE_SPEEDUP = 1.247
"""Achieved FLOP/s of the compiled model over the eager one (the step's compute term; the per-parameter optimizer
and ZeRO terms are not compiled): gpt2-xl z2 mb 8, 394 -> 350 ms per step."""

H200_COMPILE_PAIRS = (  # (file, eager run, compiled run): ZeRO-1, torch's fused AdamW, dsx run's defaults otherwise
    ("bench/estimator/h200_compile_width/a/ladder.jsonl",  # gpt2 (hidden 768) mb 16: 83.4 -> 65.6 ms
     "e03c5ec3c91f483abdc0b2e8c7d01af9", "1e8e593d67f4439da30a665b81d0aa21"),
    ("bench/estimator/h200_compile_width/a/ladder.jsonl",  # gpt2-medium (1024) mb 16: 174.8 -> 136.2 ms
     "fd6debd4d2ef4300a00621b79d391eaa", "3c4295a6c548432eb4bc505c84caccb6"),
    ("bench/estimator/h200_compile_width/a/ladder.jsonl",  # gpt2-large (1280) mb 8: 219.2 -> 173.5 ms
     "bda998207d8c45498b06f7d5fde02417", "e2c22f9c386e4a3690b759a07b5964f8"),
    ("bench/estimator/h200_compile_width/b/ladder.jsonl",  # gpt2-xl (1600) mb 8: 376.7 -> 273.7 ms
     "aafea8ddc0d946f5b05ebf08d6840177", "b937cf9279754e60be5cef95cd624b95"),
    ("bench/estimator/h200_compile_width/b/ladder.jsonl",  # llama-1b (2048, seq 2048) mb 4: 201.5 -> 154.1 ms
     "9a807beb810f40d3829120c04bc18abb", "c1cb8c774e2a432cb3852b3f540e2381"),
)
"""The pairs the H200's compile_speedup comes from (bench/estimator/ladder.sh with its `compile` tag, two device
commands on one H200 each, 2026-11-30): compiling saved 21-27% of every step, at every width, where COMPILE_SPEEDUP
(the H100's one gpt2-xl pair) priced 11-14%. Per pair, the factor at which the estimate's eager compute term shrinks
by the measured step difference; the median (1.38-1.85: no trend with the width)."""

def compile_speedup(kind: GpuKind) -> float:
    """The compile factor of `kind`: its own (GpuKind.compile_speedup) where measured, else COMPILE_SPEEDUP."""
    return kind.compile_speedup or COMPILE_SPEEDUP


H200_COMPILE_RUN_IDS = frozenset(run_id for _, eager, compiled in H200_COMPILE_PAIRS for run_id in (eager, compiled))
"""Every row of H200_COMPILE_PAIRS (calibration_role: 'compile calibration')."""


# --- a model without dropout ---------------------------------------------------------------------------------------
# The calibration rows train GPT-2 as published, with dropout (0.1 on embeddings, attention and residuals): its
# masks are drawn, stored and applied in every layer. The same command with every dropout probability set to 0 runs
# faster; Llama's presets have no dropout at all.

DROPOUT_FILES = ("bench/mfu/h100_tuned/runs_part5.jsonl", "bench/mfu/h100_tuned/runs_part6.jsonl")
"""issue 3's tuned H100 rows: gpt2-xl ZeRO-2 compiled, micro-batch 16 x grad-accum 4, with and without dropout."""

DROPOUT_RUN_IDS = {"dropout": "b20a230481ab4bf895f2d41e35a1d636", "none": "8508d49e353b4ae3be1c74123380d5c0"}
"""The pair DROPOUT_FREE_SPEEDUP comes from: the same command but `--set resid_pdrop=0 --set embd_pdrop=0 --set
attn_pdrop=0` (1.698 -> 1.520 s per step). Other dropout-free rows are judged (bench/multigpu/rows/dp4.jsonl)."""

DROPOUT_FREE_SPEEDUP = 1.132
"""Achieved FLOP/s of a dropout-free model over the same model with dropout (the step's compute term)."""


# --- the kernel ladder (issue 33): Liger Kernel, torchao's float8 --------------------------------------------------
# Alternating pairs on one H100 (bench/kernels/README.md): llama-1b, sequence 2048, ZeRO-1, bf16, micro-batch 8,
# torch's fused AdamW, the same batches; each kernel row beside the base row run just before it in the same command.
# The factor is the base's compute term (measured step less the estimate's non-compute terms) over the kernel row's,
# the median of the pairs (bench/estimator/calibrate.py: calibrate_kernels). Measured on one Llama shape only.

KERNEL_FILES = ("bench/kernels/h100/kernels.jsonl", "bench/kernels/h100/pairs.jsonl",
                "bench/kernels/h100/compiled.jsonl", "bench/kernels/h100/compiled2.jsonl")
"""issue 33's H100 rows: eager base / Liger / float8, eager base / Liger pairs, compiled base / float8 pairs."""

KERNEL_PAIRS = {
    "liger": (("f15803cc60e34e14a3d964fcd9a2f451", "ced436c9e1264c12a165ce8cbf11eedc"),
              ("fdf5667eaccf43fb8b70d3dc09ac4d67", "bad00de3c25d4666967d11aad196035e")),
    "fp8 eager": (("2a8f2674207f483e8bb704f19fe85dbb", "ad2ea7d921f64f46b5c29a4110226aa4"),),
    "fp8 compiled": (("b02a644f28314b1a9405681afdad5cbd", "a299aec1e94c4cf79861a8801cf14ad4"),
                     ("fa14d6535c674b609c4dc8a3bb2a1658", "7d2c20833fbb4a0b9d00c8059c2be2a7")),
}
"""(base run_id, kernel run_id) pairs of KERNEL_FILES each factor comes from (measured 2026-11-27 16:45-19:58 UTC)."""

LIGER_SPEEDUP = 1.515
"""Achieved FLOP/s with Liger's RoPE, RMSNorm and SwiGLU kernels and fused loss over the stock ones (eager)."""

FP8_SPEEDUP = {"eager": 0.446, "compiled": 1.103}
"""Achieved FLOP/s with torchao's float8 (tensorwise) linear layers over bf16, eager and compiled: without compile
its casts and scales run as separate kernels (half the speed); compiled they fuse."""
