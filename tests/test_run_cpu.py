"""`dsx run` for real on CPU ranks through DeepSpeed's launcher (gloo), and its refusals and failures.

Each launched run costs ~20-40 s on 2 cores (runner + launch.py + rank imports, deepspeed.initialize, teardown),
so every run checks everything about its row at once. Runs go through the CLI (`python -m dsx run`) in a
subprocess, like a user's. All rows of this module go into ONE results file, so the failure tests also check that
the rows before them are untouched.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from dsx.comm import LOGGER_BLOCK
from dsx.host import cpu_count, cpu_model
from dsx.results import SCHEMA_VERSION, config_hash, parse_row, read_rows

ROOT = Path(__file__).resolve().parent.parent
STEPS, WARMUP = 3, 1


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs") / "runs.jsonl"


def shm_buffers() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*")}


def dsx_run(results: Path, *args: str, timeout: float = 400) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run `dsx run ARGS --results RESULTS`; (the process, the rows it appended). Checks that the run left no
    DeepSpeed shared-memory buffer behind (DeepSpeed's CPU ranks never unlink theirs; dsx removes them)."""
    buffers = shm_buffers()
    before = len(read_rows(results))
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    out = subprocess.run([sys.executable, "-m", "dsx", "run", *args, "--results", str(results)],
                         cwd=results.parent, env=env, capture_output=True, text=True, timeout=timeout)
    assert shm_buffers() <= buffers, "the run left its /dev/shm allreduce buffers behind"
    return out, read_rows(results)[before:]


def assert_no_traceback(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr


# ------------------------------------------------------------------------------------------------ successful runs

# (model, ranks, extra flags): ZeRO 0-3 at 1 and 2 ranks, CPU offload at ZeRO-2 and -3, a BERT, grad accumulation.
RUNS = [
    pytest.param("gpt2-tiny", 1, ["--zero", "0", "--flop-check"], id="gpt2-1rank-zero0-flopcheck"),
    pytest.param("gpt2-tiny", 2, ["--zero", "1"], id="gpt2-2ranks-zero1"),
    pytest.param("gpt2-tiny", 2, ["--zero", "2", "--grad-accum", "2"], id="gpt2-2ranks-zero2-accum2"),
    pytest.param("gpt2-tiny", 2, ["--zero", "3", "--micro-batch", "2"], id="gpt2-2ranks-zero3"),
    pytest.param("gpt2-tiny", 1, ["--zero", "2", "--offload", "cpu"], id="gpt2-1rank-zero2-offload"),
    pytest.param("gpt2-tiny", 2, ["--zero", "3", "--offload", "cpu", "--offload-params", "cpu"],
                 id="gpt2-2ranks-zero3-offload"),
    pytest.param("bert-tiny", 1, ["--zero", "2", "--micro-batch", "2", "--act-ckpt"], id="bert-1rank-zero2-actckpt"),
]


@pytest.mark.slow
@pytest.mark.deepspeed
@pytest.mark.parametrize("model, ranks, flags", RUNS)
def test_a_cpu_run_appends_one_complete_plausible_row(results, model, ranks, flags):
    args = ["--model", model, "--gpus", str(ranks), "--steps", str(STEPS), "--warmup", str(WARMUP), *flags]
    out, rows = dsx_run(results, *args)
    assert out.returncode == 0, out.stdout + out.stderr
    assert_no_traceback(out)
    assert len(rows) == 1
    row = parse_row(rows[0])  # validates every field's type
    assert out.stdout.startswith(f"OK  {model}") and row.run_id in out.stdout

    # identity and provenance
    assert row.schema_version == SCHEMA_VERSION and len(row.run_id) == 32
    assert datetime.fromisoformat(row.time).utcoffset().total_seconds() == 0
    assert row.status == "ok" and row.error is None
    assert (row.device, row.gpu_name, row.gpu_count, row.world_size) == ("cpu", None, 0, ranks)
    assert all([row.versions.torch, row.versions.deepspeed, row.versions.transformers, row.versions.dsx])
    assert (row.host_cpu.model, row.host_cpu.cpus) == (cpu_model(), cpu_count()) and row.host_cpu.model
    probes = row.host_cpu.python_loop_probes  # ns per loop iteration: before the launch, every 2 s, after it
    assert len(probes) >= 3 and all(1 < ns < 10_000 for ns in probes)  # a CPU run of a tiny model: 10-30 s
    assert row.host_cpu.python_loop_ns == round(statistics.median(probes), 2)
    assert row.command == ["dsx", "run", *args, "--results", str(results)]

    # the config the ranks got
    zero = row.ds_config["zero_optimization"]
    assert zero["stage"] == int(flags[flags.index("--zero") + 1])
    assert (zero.get("offload_optimizer") or {}).get("device", "none") == (
        "cpu" if "--offload" in flags else "none")
    assert (zero.get("offload_param") or {}).get("device", "none") == (
        "cpu" if "--offload-params" in flags else "none")
    assert row.ds_config_hash == config_hash(row.ds_config) and row.ds_config_source == "flags"
    run_dir = Path(row.run_dir)
    ranks_config = json.loads((run_dir / "ds_config.json").read_text())  # the row's, plus DeepSpeed's comms logger
    assert ranks_config.pop("comms_logger") == LOGGER_BLOCK and ranks_config == row.ds_config
    micro = int(flags[flags.index("--micro-batch") + 1]) if "--micro-batch" in flags else 1
    accum = int(flags[flags.index("--grad-accum") + 1]) if "--grad-accum" in flags else 1
    assert (row.micro_batch, row.grad_accum) == (micro, accum)
    assert row.ds_config["train_batch_size"] == micro * accum * ranks

    # the model
    from dsx.models import count_params, resolve_model

    resolved = resolve_model(model)
    assert (row.model.preset, row.model.seq_len, row.model.params) == (model, resolved.seq_len,
                                                                      count_params(resolved))
    assert row.toggles.act_ckpt == ("--act-ckpt" in flags) and row.toggles.attn == "sdpa"

    # per-rank results: every rank ran every step, and all ranks saw the same loss (same batches, same weights)
    assert [r.rank for r in row.ranks] == list(range(ranks))
    assert {(r.status, r.phase) for r in row.ranks} == {("ok", "done")}
    for r in row.ranks:
        assert len(r.step_time_s) == STEPS and all(math.isfinite(t) and t > 0 for t in r.step_time_s)
        assert len(r.loss) == STEPS and all(math.isfinite(v) for v in r.loss)
        assert r.loss == pytest.approx(row.ranks[0].loss, rel=1e-6)
    assert all(abs(v - math.log(1000)) < 1.0 for v in row.ranks[0].loss)  # random init, vocab 1000: ~ln(1000)

    # figures
    f = row.figures
    assert f.step_time_s.all == [max(r.step_time_s[i] for r in row.ranks) for i in range(STEPS)]
    assert f.step_time_s.median == statistics.median(f.step_time_s.all)
    assert 0 < f.step_time_s.min <= f.step_time_s.median <= f.step_time_s.max
    assert f.step_time_s.spread == (f.step_time_s.max - f.step_time_s.min) / f.step_time_s.median
    tokens = micro * accum * ranks * resolved.seq_len
    assert f.tokens_per_s == pytest.approx(tokens / f.step_time_s.median, rel=1e-9)
    assert f.samples_per_s == pytest.approx(micro * accum * ranks / f.step_time_s.median, rel=1e-9)
    assert f.flops_per_token > 6 * row.model.params * 0.9
    assert f.model_tflops_per_s == pytest.approx(f.flops_per_token * f.tokens_per_s / ranks / 1e12, rel=1e-9)
    assert (f.peak_tflops, f.mfu) == (None, None)  # CPU: no peak, no MFU - never a guess
    if "--flop-check" in flags:
        assert f.flop_counter_flops_per_step > 0 and f.analytic_flops_per_step > 0
        assert f.analytic_flops_per_step == pytest.approx(f.flops_per_token * micro * accum * resolved.seq_len)
        assert 1.0 <= f.analytic_flops_per_step / f.flop_counter_flops_per_step < 1.05
        assert row.overhead.flop_check_s > 0
    else:
        assert f.flop_counter_flops_per_step is None

    # memory: per rank and the max; what CPU ranks cannot measure is null with the reason
    m = row.memory
    assert [x.rank for x in m.per_rank] == list(range(ranks))
    for x in m.per_rank:
        assert x.host_rss_peak > 50 * 2**20
        assert m.max.host_rss_peak >= x.host_rss_peak
        assert (x.peak_allocated, x.peak_reserved, x.nvml_used, x.pinned_host) == (None, None, None, None)
        assert set(x.unavailable) == {"peak_allocated", "peak_reserved", "nvml_used", "pinned_host"}
    assert m.max.host_rss_peak == max(x.host_rss_peak for x in m.per_rank)
    assert "VmHWM" in m.methods["host_rss_peak"]

    # wall time around the run
    o = row.overhead
    for name in ("dsx_startup_s", "prepare_s", "launch_to_rank_start_s", "rank_import_s", "dist_init_s",
                 "model_build_s", "ds_initialize_s", "warmup_s", "timed_s", "teardown_s", "total_s", "added_s"):
        assert getattr(o, name) is not None and 0 < getattr(o, name) <= o.total_s, name
    # the rank-side parts are the slowest rank's spans between its phases
    slowest = {key: max(r.timings_s[key] for r in row.ranks) for key in row.ranks[0].timings_s}
    assert (o.rank_import_s, o.dist_init_s, o.ds_initialize_s) == pytest.approx(
        (slowest["imported_s"], slowest["distributed_s"], slowest["initialized_s"]), rel=1e-9)
    if "--flop-check" in flags:  # rank 0's model_built_s includes the flop check, model_build_s leaves it out
        assert o.model_build_s < slowest["model_built_s"]
    else:
        assert o.model_build_s == pytest.approx(slowest["model_built_s"], rel=1e-9)
    # dsx's own parts follow one another inside total_s: startup, prepare, launch ... last rank's end, teardown
    one_after_another = o.dsx_startup_s + o.prepare_s + o.launch_to_rank_start_s + o.teardown_s
    if ranks == 1:  # and so do the one rank's phases in between
        one_after_another += (o.rank_import_s + o.dist_init_s + (o.flop_check_s or 0.0) + o.model_build_s
                              + o.ds_initialize_s + o.warmup_s + o.timed_s)
    assert one_after_another <= o.total_s
    assert o.timed_s == pytest.approx(max(sum(r.step_time_s) for r in row.ranks))
    assert o.total_s == pytest.approx(o.added_s + o.warmup_s + o.timed_s)
    assert o.total_s > o.prepare_s + o.launch_to_rank_start_s + o.rank_import_s + o.ds_initialize_s

    # the run folder keeps what the ranks wrote
    assert sorted(p.name for p in run_dir.glob("rank-*.json")) == [f"rank-{r}.json" for r in range(ranks)]
    assert "deepspeed.launcher.launch" in (run_dir / "launcher.log").read_text()
    if zero["stage"] == 3:
        assert any("deepspeed.zero.Init" in n for n in row.notes)


# ------------------------------------------------------------------------------------------------ failures


def _earlier_rows(results: Path) -> bytes:
    """The file's bytes before a failing run; adds a row first when this test runs alone."""
    if not read_rows(results):
        from tests.test_results import make_row  # a synthetic earlier row

        from dsx.results import append_row

        append_row(results, make_row())
    return results.read_bytes()


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_config_deepspeed_rejects_at_initialize_is_an_error_row(results):
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().is_fp16_supported():  # CPUs with AVX512-FP16 / AMX: fp16 runs, nothing to provoke
        pytest.skip("DeepSpeed's CPU accelerator supports fp16 on this CPU: fp16 is not rejected at initialize here")
    before = _earlier_rows(results)
    # lint-clean, but this CPU has no fp16 support: deepspeed.initialize raises
    out, rows = dsx_run(results, "--model", "gpt2-tiny", "--zero", "1", "--precision", "fp16", "--steps", "2",
                        "--warmup", "0")
    assert out.returncode == 1
    assert_no_traceback(out)
    assert results.read_bytes().startswith(before)
    row = parse_row(rows[-1]) if len(rows) == 1 else pytest.fail(f"expected one row, got {len(rows)}")
    assert row.status == "error" and row.error.startswith("rank 0: ValueError: ") and "fp16" in row.error
    assert out.stderr.strip().splitlines()[-1] == f"dsx run: error: {row.error}"
    assert row.ranks[0].phase == "model_built" and row.figures.step_time_s is None
    assert row.memory.per_rank[0].host_rss_peak > 0  # measured at the failure too
    traceback = json.loads((Path(row.run_dir) / "rank-0.json").read_text())["traceback"]
    assert traceback.startswith("Traceback") and "deepspeed.initialize" in traceback


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_rank_failing_mid_run_is_named_as_the_cause(results):
    before = _earlier_rows(results)
    out, rows = dsx_run(results, "--model", "gpt2-tiny", "--gpus", "2", "--zero", "2", "--steps", "3",
                        "--warmup", "1", "--inject-failure", "error:1@1")
    assert out.returncode == 1
    assert_no_traceback(out)
    assert results.read_bytes().startswith(before) and len(rows) == 1
    row = parse_row(rows[0])
    assert row.status == "error"
    assert row.error.startswith("rank 1: InjectedFailure: injected failure at timed step 1 on rank 1")
    assert row.ranks[1].status == "error" and row.ranks[1].phase == "warmup_done"
    assert len(row.ranks[1].step_time_s) == 1  # step 0 ran before the failure
    assert row.ranks[0].status in ("error", "running")  # lost its peer, or was stopped by the launcher


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_rank_that_dies_without_a_result_and_a_hang_are_reported(results):
    before = _earlier_rows(results)
    out, rows = dsx_run(results, "--model", "gpt2-tiny", "--gpus", "2", "--zero", "0", "--steps", "2",
                        "--warmup", "0", "--inject-failure", "exit@1")
    assert out.returncode == 1
    assert_no_traceback(out)
    row = parse_row(rows[0])
    assert row.status == "error"
    assert "rank 1 stopped during 'initialized' without a result" in row.error
    assert row.ranks[1].status == "running" and row.ranks[1].phase == "initialized"

    out, rows = dsx_run(results, "--model", "gpt2-tiny", "--steps", "2", "--warmup", "0", "--inject-failure",
                        "hang:0", "--timeout", "15")  # hangs in the first timed step
    assert out.returncode == 1
    assert_no_traceback(out)
    assert results.read_bytes().startswith(before)
    row = parse_row(rows[0])
    assert row.status == "timeout" and row.error.startswith("timed out after 15 s and was killed (rank 0: ")
    assert row.memory.max.host_rss_peak > 0  # measured as the timed steps began, before the rank hung
    pid = json.loads((Path(row.run_dir) / "rank-0.json").read_text())["pid"]
    with pytest.raises(ProcessLookupError):  # the hung rank was killed with its process group
        os.kill(pid, 0)


# ------------------------------------------------------------------------------------------------ refusals


def refused(tmp_path, **changes) -> str:
    from dsx.run import RunRefused, RunRequest, prepare

    request = RunRequest(**{"model": "gpt2-tiny", "results": str(tmp_path / "runs.jsonl"), **changes})
    with pytest.raises(RunRefused) as info:
        prepare(request)
    assert not (tmp_path / "runs.jsonl").exists()
    return str(info.value)


def test_a_run_refused_when_its_launch_is_built_leaves_no_run_folder(tmp_path, monkeypatch):
    """The launch is built (and a hostfile's nodes checked over ssh) after the trial is resolved; the run's folder
    is written only after that, so a refusal there leaves no results/runs/<id>/ without a row (issue 21)."""
    from dsx.launcher import LaunchError

    stage = importlib.import_module("dsx.run.prepare")  # the module: dsx.run.prepare is also the function's name

    def refuse(**_):
        raise LaunchError("no launch today")

    monkeypatch.setattr(stage, "build_launch", refuse)
    assert refused(tmp_path) == "no launch today"
    assert list(tmp_path.iterdir()) == []


def test_a_config_file_with_auto_is_refused(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
                                "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}))
    message = refused(tmp_path, config_path=str(path))
    assert message.startswith(f'{path}: "auto" at train_micro_batch_size_per_gpu, optimizer.params.lr: only the '
                              "transformers Trainer / accelerate fill")


@pytest.mark.parametrize("word, message", [
    ("cpu", "'cpu' (DeepSpeed's CPU activation checkpointing) is for dsx config, for models that call "
            "deepspeed.checkpointing; dsx's transformers models checkpoint with gradient_checkpointing_enable: use on"),
    ("maybe", "'maybe' is not on/off"),
])
def test_run_act_ckpt_takes_only_the_words_it_can_do(tmp_path, word, message):
    from click.testing import CliRunner

    from dsx.cli import cli

    result = CliRunner().invoke(cli, ["run", "--model", "gpt2-tiny", "--act-ckpt", word, "--dry-run",
                                      "--results", str(tmp_path / "runs.jsonl")])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == f"Error: Invalid value for '--act-ckpt': {message}"


def test_a_config_file_nested_10000_levels_deep_is_refused_in_one_line(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"a": ' * 10_000 + "1" + "}" * 10_000)
    assert refused(tmp_path, config_path=str(path)) == (f"{path}: nested more than 100 levels deep; a DeepSpeed "
                                                        "config is a few levels deep")


def test_a_config_file_with_lint_errors_for_the_real_world_size_is_refused(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1,
                                "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
                                "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}))
    message = refused(tmp_path, config_path=str(path), gpus=2)
    assert message.startswith("the DeepSpeed config has errors for DeepSpeed")
    assert "at world size 2" in message and "[batch-arithmetic]" in message


def test_config_flags_with_a_config_file_an_unknown_model_and_a_bad_injection_are_refused(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text("{}")
    assert "--config takes the DeepSpeed config as it is: drop --zero" in refused(
        tmp_path, config_path=str(path), config_flags={"zero": 3})
    assert "unknown model 'gpt3-tiny'" in refused(tmp_path, model="gpt3-tiny")
    assert "--attn flash is unavailable here" in refused(tmp_path, attn="flash")
    assert "unknown injected failure" in refused(tmp_path, inject_failure="explode")


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_sigterm_stops_dsx_run_and_every_rank_it_started(tmp_path):
    """A scheduler's or `timeout`'s SIGTERM must not leave the ranks training on the machine once dsx is gone."""
    import psutil

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DSX_DEBUG")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
    proc = subprocess.Popen([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--zero", "1", "--steps",
                             "1000", "--results", str(tmp_path / "r.jsonl")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ranks() -> list[psutil.Process]:
        return [p for p in psutil.Process(proc.pid).children(recursive=True)
                if "train_rank" in " ".join(p.cmdline())]

    deadline = time.time() + 240
    while not ranks() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert ranks(), "no rank started"
    started = ranks() + psutil.Process(proc.pid).children()  # the ranks and DeepSpeed's runner
    proc.terminate()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "dsx run: interrupted; every rank was stopped" in stderr and "Traceback" not in stderr
    assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
