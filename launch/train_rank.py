"""One rank of `dsx run`, started by DeepSpeed's launcher: `train_rank.py --plan-json PLAN`.

The plan (written by dsx/run.py) names the model preset, overrides, sequence length, batch sizes, steps, toggles,
the DeepSpeed config file and the output folder. This script:

1. imports torch / deepspeed / transformers, calls deepspeed.init_distributed() (NCCL on GPUs; on the CPU
   accelerator gloo, or oneCCL when installed);
2. builds the model from its transformers config with random weights - at ZeRO-3 under deepspeed.zero.Init, the
   way transformers does it itself (no_init_weights + zero.Init, then initialize_weights_zero3);
3. deepspeed.initialize (optimizer and scheduler from the config; JIT ops load or build here), optionally
   engine.compile();
4. runs `warmup` then `steps` optimizer steps on synthetic batches. A step is grad_accum micro-batches of
   forward + engine.backward + engine.step. The clock (time.perf_counter) is read after a device
   synchronisation (torch.cuda.synchronize) on both sides of each step; batches are made before the clock starts.
   Every rank draws the same batches (one seed), so the loss of a step must be equal on every rank;
5. writes rank-<rank>.json into the output folder (atomically: temp file + rename) at each phase, and a final
   one with status ok, or oom / error with the message and the traceback (in the file, not on the terminal),
   then exits 0 / 1.

Memory figures (bytes), each with the method that produced it and a reason when it is null:
peak_allocated / peak_reserved  torch.cuda.max_memory_allocated / max_memory_reserved over the whole process;
nvml_used                      NVML device memory used (whole GPU), max over samples taken after each step;
host_rss_peak                  VmHWM of /proc/self/status (peak resident set), else getrusage ru_maxrss;
pinned_host                    torch.cuda.host_memory_stats() peak of the CUDA pinned-host allocator, which every
                               tensor.pin_memory() of DeepSpeed's offload goes through.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
import traceback
from pathlib import Path

PHASES = ("started", "imported", "distributed", "model_built", "initialized", "warmup_done", "timed_done", "done")


def _process_start() -> float:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:
        return time.time()


class Report:
    """The rank's JSON file, rewritten atomically at each phase so a killed rank still says how far it got."""

    def __init__(self, out_dir: Path, rank: int, local_rank: int, world_size: int):
        self.path = out_dir / f"rank-{rank}.json"
        self.data: dict = {
            "rank": rank, "local_rank": local_rank, "world_size": world_size, "host": socket.gethostname(),
            "node_rank": int(os.environ["CROSS_RANK"]) if os.environ.get("CROSS_RANK") else None,
            "pid": os.getpid(), "status": "running", "phase": "started", "error": None, "traceback": None,
            "device": None, "gpu_name": None, "gpu_capability": None, "versions": {},
            "times": {"process_start": _process_start(), "started": time.time()},
            "step_time_s": [], "warmup_step_time_s": [], "loss": [], "warmup_loss": [],
            "memory": {}, "memory_methods": {}, "memory_unavailable": {}, "flop_check": None, "notes": [],
            "params_seen": None,
        }

    def phase(self, name: str) -> None:
        self.data["phase"] = name
        self.data["times"][name] = time.time()
        self.write()

    def write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, allow_nan=True))
        os.replace(tmp, self.path)


class InjectedFailure(RuntimeError):
    """A failure asked for with --inject-failure (tests of dsx's failure handling)."""


def parse_injection(text: str | None) -> dict | None:
    """'KIND[:STEP][@RANK]' with KIND error|oom|exit|hang; no STEP = right after deepspeed.initialize."""
    if not text:
        return None
    spec, _, rank = text.partition("@")
    kind, _, step = spec.partition(":")
    if kind not in ("error", "oom", "exit", "hang"):
        raise ValueError(f"unknown injected failure {text!r}")
    return {"kind": kind, "step": int(step) if step else None, "rank": int(rank) if rank else None}


def maybe_inject(injection: dict | None, rank: int, step: int | None) -> None:
    if not injection or injection["step"] != step or injection["rank"] not in (None, rank):
        return
    kind = injection["kind"]
    where = "after deepspeed.initialize" if step is None else f"at timed step {step}"
    if kind == "error":
        raise InjectedFailure(f"injected failure {where} on rank {rank}")
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"injected out-of-memory {where} on rank {rank}")
    if kind == "exit":
        os._exit(17)  # dies without writing its result, like a rank killed by the OOM killer
    if kind == "hang":
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


# --------------------------------------------------------------------------------------------------- memory


def host_rss_peak() -> tuple[int | None, str]:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024, "VmHWM of /proc/self/status (peak resident set size)"
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if sys.platform == "darwin" else 1024), "resource.getrusage(RUSAGE_SELF).ru_maxrss"


class NvmlSampler:
    """Device memory used on this rank's GPU, from NVML; max over samples."""

    method = "NVML nvmlDeviceGetMemoryInfo(handle).used: the whole GPU (all processes), max over samples after " \
             "each step and at the end (or the failure)"

    def __init__(self, torch, device):
        self.handle = None
        self.peak: int | None = None
        self.reason: str | None = None
        try:
            import pynvml
        except ImportError:
            self.reason = "pynvml (nvidia-ml-py) is not installed"
            return
        try:
            pynvml.nvmlInit()
            props = torch.cuda.get_device_properties(device)
            uuid = getattr(props, "uuid", None)
            if uuid is not None:
                text = str(uuid)
                self.handle = pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
            else:
                bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
                self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
            self.pynvml = pynvml
        except Exception as exc:  # NVML missing in a container, driver mismatch, ...
            self.reason = f"NVML unavailable: {one_line(exc)}"

    def sample(self) -> None:
        if self.handle is None:
            return
        try:
            used = int(self.pynvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        except Exception as exc:
            self.reason = f"NVML query failed: {one_line(exc)}"
            self.handle = None
            return
        self.peak = used if self.peak is None else max(self.peak, used)


def reset_peaks(torch, device, on_cuda: bool, report: Report) -> None:
    """Forget the memory peaks of the flop check, so the figures are the run's own."""
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(device)
        try:
            torch.cuda.reset_peak_host_memory_stats()
        except Exception:
            pass
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM to the current RSS
        report.data["notes"].append("memory peaks were reset after the --flop-check (rank 0)")
    except OSError:
        report.data["notes"].append("host_rss_peak includes the --flop-check models (could not reset VmHWM)")


def collect_memory(torch, device, on_cuda: bool, nvml: NvmlSampler | None, report: Report) -> None:
    mem: dict = {}
    methods: dict = {}
    unavailable: dict = {}
    if on_cuda:
        mem["peak_allocated"] = int(torch.cuda.max_memory_allocated(device))
        mem["peak_reserved"] = int(torch.cuda.max_memory_reserved(device))
        methods["peak_allocated"] = "torch.cuda.max_memory_allocated (whole process)"
        methods["peak_reserved"] = "torch.cuda.max_memory_reserved (whole process)"
        if nvml is not None:
            nvml.sample()
        if nvml is not None and nvml.peak is not None:
            mem["nvml_used"] = nvml.peak
            methods["nvml_used"] = NvmlSampler.method
        else:
            mem["nvml_used"] = None
            unavailable["nvml_used"] = nvml.reason if nvml else "NVML not sampled"
        pinned, how = None, None
        try:
            stats = torch.cuda.host_memory_stats()
            for key in ("allocated_bytes.peak", "allocated_bytes.all.peak"):
                if key in stats:
                    pinned, how = int(stats[key]), f"torch.cuda.host_memory_stats()['{key}']: peak bytes of the " \
                                                    "CUDA pinned-host allocator (every tensor.pin_memory())"
                    break
        except Exception as exc:
            unavailable["pinned_host"] = f"torch.cuda.host_memory_stats failed: {one_line(exc)}"
        mem["pinned_host"] = pinned
        if how:
            methods["pinned_host"] = how
        elif "pinned_host" not in unavailable:
            unavailable["pinned_host"] = "torch.cuda.host_memory_stats() has no allocated_bytes peak in this torch"
    else:
        for key in ("peak_allocated", "peak_reserved"):
            mem[key] = None
            unavailable[key] = "CPU rank: no device allocator (the process's memory is in host_rss_peak)"
        mem["nvml_used"] = None
        unavailable["nvml_used"] = "CPU rank: no GPU"
        mem["pinned_host"] = None
        unavailable["pinned_host"] = ("CPU accelerator: DeepSpeed's pin_memory() is a no-op there, nothing is "
                                      "page-locked")
    rss, how = host_rss_peak()
    mem["host_rss_peak"] = rss
    methods["host_rss_peak"] = how
    report.data["memory"] = mem
    report.data["memory_methods"] = methods
    report.data["memory_unavailable"] = unavailable


def apply_memory_cap(torch, device, on_cuda: bool, cap: int | None, report: Report) -> None:
    """Record what this rank may use (memory.capacity) and enforce --memory-cap.

    CUDA: torch.cuda.set_per_process_memory_fraction - the caching allocator refuses to reserve past the cap and
    raises torch.OutOfMemoryError like a smaller GPU would. CPU ranks: RLIMIT_DATA (the kernel refuses data
    mappings past it, torch's allocator raises "can't allocate memory"); it counts the process's whole data
    segment, imports and thread stacks included, so it is set after the imports and a cap must leave room for
    them."""
    if on_cuda:
        total = int(torch.cuda.get_device_properties(device).total_memory)
        if cap:
            fraction = min(1.0, cap / total)
            torch.cuda.set_per_process_memory_fraction(fraction, device)
            report.data["capacity"] = min(cap, total)
            report.data["capacity_source"] = (f"--memory-cap (torch.cuda.set_per_process_memory_fraction({fraction:.4f}) "
                                              f"of {total} bytes)")
        else:
            report.data["capacity"] = total
            report.data["capacity_source"] = "GPU total memory (torch.cuda.get_device_properties)"
        return
    import resource

    if cap:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
        report.data["capacity"] = cap
        report.data["capacity_source"] = "--memory-cap (RLIMIT_DATA of each CPU rank, set after the imports)"
    else:
        try:
            import psutil

            report.data["capacity"] = int(psutil.virtual_memory().total)
            report.data["capacity_source"] = "host total memory (psutil.virtual_memory), shared by all CPU ranks"
        except Exception:
            pass


# --------------------------------------------------------------------------------------------------- model


def build(plan: dict, resolved, ds_config: dict, report: Report, device):
    """The model, on this rank's GPU (ZeRO 0-2: initialising 1.5B parameters there takes a second, on the CPU
    about 25 s) or partitioned as it is made (ZeRO-3)."""
    from dsx.models import build_model

    stage = int((ds_config.get("zero_optimization") or {}).get("stage", 0) or 0)
    attn = plan["toggles"]["attn"]
    if stage != 3:
        return build_model(resolved, attn=attn, device=device)
    import deepspeed

    # What transformers itself does for from_config under ZeRO-3 (modeling_utils._from_config): skip the normal
    # weight init, partition parameters as modules are created, then initialise each module's weights with its
    # parameters gathered (initialising empty shards breaks e.g. an embedding's padding row).
    try:
        from transformers.initialization import no_init_weights
        from transformers.integrations.deepspeed import initialize_weights_zero3
    except ImportError:
        no_init_weights = initialize_weights_zero3 = None
    if no_init_weights is not None:
        with no_init_weights(), deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = build_model(resolved, attn=attn)
        initialize_weights_zero3(model)
        model.tie_weights()
        report.data["notes"].append("ZeRO-3: model built under deepspeed.zero.Init, weights initialised with "
                                    "transformers' initialize_weights_zero3")
    else:
        with deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = build_model(resolved, attn=attn)
        report.data["notes"].append("ZeRO-3: model built under deepspeed.zero.Init")
    if not any(hasattr(p, "ds_id") for p in model.parameters()):
        raise RuntimeError("ZeRO-3: the model's parameters were not partitioned by deepspeed.zero.Init")
    return model


def flop_check(plan: dict, resolved, device, report: Report) -> None:
    """torch.utils.flop_counter count of a forward+backward on plain copies of the model (rank 0 only, before
    deepspeed.initialize). dsx.flops.flop_counter_flops_per_token counts a 1-layer and a 2-layer build of the
    same width on this rank's device and extrapolates in depth (exact: the layers are identical), so the check
    needs a fraction of the model's memory; models of <= 2 layers are counted whole."""
    from dsx.flops import flop_counter_flops_per_token

    attn = plan["toggles"]["attn"]
    micro = plan["micro_batch"]
    try:
        per_token = float(flop_counter_flops_per_token(resolved, device=device, attn=attn, micro_batch=micro))
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
        report.data["flop_check"] = {"counter_flops_per_token": per_token, "device": str(device), "attn": attn,
                                     "micro_batch": micro}
    except Exception as exc:
        report.data["flop_check"] = {"counter_flops_per_token": None, "error": one_line(exc)}


# --------------------------------------------------------------------------------------------------- main


def run(plan: dict, report: Report, rank: int, local_rank: int, state: dict) -> None:
    """The rank's work; `state` keeps what the failure path needs to still measure memory."""
    import torch
    import transformers

    import deepspeed

    report.data["versions"] = {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
                               "transformers": transformers.__version__}
    report.phase("imported")
    injection = parse_injection(plan.get("inject_failure"))
    on_cuda = plan["device"] == "cuda"
    toggles = plan["toggles"]
    if on_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        state.update(torch=torch, device=device, on_cuda=True)
        report.data["device"] = f"cuda:{local_rank}"
        report.data["gpu_name"] = torch.cuda.get_device_name(device)
        report.data["gpu_capability"] = "%d.%d" % torch.cuda.get_device_capability(device)
        torch.backends.cuda.matmul.allow_tf32 = bool(toggles["tf32"])
        torch.backends.cudnn.allow_tf32 = bool(toggles["tf32"])
    else:
        device = torch.device("cpu")
        state.update(torch=torch, device=device, on_cuda=False)
        report.data["device"] = "cpu"
        if toggles["tf32"]:
            report.data["notes"].append("--tf32 has no effect on CPU ranks")
    deepspeed.init_distributed()
    apply_memory_cap(torch, device, on_cuda, plan.get("memory_cap"), report)
    report.phase("distributed")

    from dsx.models import resolve_model, synthetic_batch

    resolved = resolve_model(plan["model"], plan.get("overrides") or {}, seq_len=plan.get("seq_len"),
                             vocab_pad=plan.get("vocab_pad"))
    ds_config = json.loads(Path(plan["ds_config_path"]).read_text())
    if plan.get("flop_check") and rank == 0:
        started = time.time()
        flop_check(plan, resolved, device, report)
        report.data["flop_check"]["seconds"] = time.time() - started
        report.data["times"]["flop_check_done"] = time.time()
        reset_peaks(torch, device, on_cuda, report)
    torch.manual_seed(int(plan.get("seed", 1234)))  # the same initial weights on every rank
    model = build(plan, resolved, ds_config, report, device)
    if toggles["act_ckpt"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
    report.data["params_seen"] = int(sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()))
    report.phase("model_built")

    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()
                                                                          if p.requires_grad], config=ds_config)
    if toggles["compile"]:
        engine.compile()
    report.phase("initialized")
    maybe_inject(injection, rank, None)

    micro, accum = plan["micro_batch"], plan["grad_accum"]
    seed = int(plan.get("seed", 1234))
    generator = torch.Generator().manual_seed(seed)  # batches are drawn on the CPU, the same on every rank
    # Re-seed the global RNG (dropout masks): building the model used it differently per rank (under ZeRO-3 only
    # rank 0 initialises the weights), and every rank must compute the same loss.
    torch.manual_seed(seed + 1)
    if on_cuda:
        torch.cuda.manual_seed_all(seed + 1)
    nvml = NvmlSampler(torch, device) if on_cuda else None
    state["nvml"] = nvml

    def sync():
        if on_cuda:
            torch.cuda.synchronize(device)

    engine.train()
    warmup, steps = plan["warmup"], plan["steps"]
    for i in range(warmup + steps):
        timed_index = i - warmup
        if timed_index == 0:
            report.phase("warmup_done")
        if timed_index >= 0:
            maybe_inject(injection, rank, timed_index)
        batches = [{k: v.to(device, non_blocking=True) for k, v in
                    synthetic_batch(resolved, micro, device, generator).items()} for _ in range(accum)]
        losses = []
        sync()
        start = time.perf_counter()
        for batch in batches:
            loss = engine(**batch).loss
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())
        sync()
        elapsed = time.perf_counter() - start
        value = float(torch.stack([x.float() for x in losses]).mean().item())
        if timed_index >= 0:
            report.data["step_time_s"].append(elapsed)
            report.data["loss"].append(value)
        else:
            report.data["warmup_step_time_s"].append(elapsed)
            report.data["warmup_loss"].append(value)
        if nvml is not None:
            nvml.sample()
    report.phase("timed_done")
    collect_memory(torch, device, on_cuda, nvml, report)
    if not all(math.isfinite(x) for x in report.data["loss"]):
        report.data["notes"].append("non-finite loss in the timed steps")
    try:
        import deepspeed.comm as dist

        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan-json", required=True)
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # if a launcher adds it
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank or 0))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    plan = json.loads(Path(args.plan_json).read_text())
    out_dir = Path(plan["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report(out_dir, rank, local_rank, world_size)
    report.write()
    code = 0
    state: dict = {}
    try:
        run(plan, report, rank, local_rank, state)
        report.data["status"] = "ok"
        report.data["phase"] = "done"
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a result, never a bare traceback
        report.data["status"] = "oom" if not isinstance(exc, KeyboardInterrupt) and classify(exc) == "oom" \
            else "error"
        report.data["error"] = one_line(exc)
        report.data["traceback"] = traceback.format_exc()
        report.data["times"]["failed"] = time.time()
        code = 1
        if "torch" in state:  # memory at the failure is what an OOM report needs most
            try:
                collect_memory(state["torch"], state["device"], state["on_cuda"], state.get("nvml"), report)
            except Exception as mem_exc:
                report.data["notes"].append(f"memory figures after the failure: {one_line(mem_exc)}")
    report.data["times"]["end"] = time.time()
    report.write()
    return code


if __name__ == "__main__":
    exit_code = main()
    # Everything is written; skip the interpreter's teardown of torch/DeepSpeed (seconds of thread joins and
    # module finalisers) so the launcher sees the exit at once. The process group was destroyed in run().
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
