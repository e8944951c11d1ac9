"""The estimator's calibration ships inside dsx (dsx/calibration.py: literal numbers, the rows they came from named);
the code that derives them is bench/estimator/calibrate.py. A dsx installed from its wheel, with no checkout
around it, answers as the checkout does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, load_bench_script
from dsx.calibration import (ACT_OFFLOAD_FILE, CALIBRATION_FILE, CALIBRATION_FILES, CALIBRATION_RUN_IDS, HEADROOM_FILE,
                             HEADROOM_RUN_IDS, ULYSSES_FILE)
from dsx.calibration_roles import calibration_role
from dsx.results import read_rows


def bench_calibrate():
    return load_bench_script("bench/estimator/calibrate.py")


def test_the_shipped_run_ids_name_the_rows_the_constants_come_from():
    chosen = bench_calibrate().calibration_rows(list(read_rows(ROOT / CALIBRATION_FILE)))
    assert {role: row["run_id"] for role, row in chosen.items()} == CALIBRATION_RUN_IDS


def test_the_shipped_headroom_run_ids_are_every_trial_of_the_headroom_file():
    assert {row["run_id"] for row in read_rows(ROOT / HEADROOM_FILE)} == HEADROOM_RUN_IDS


def test_the_calibration_script_recomputes_exactly_what_dsx_ships(capsys):
    assert bench_calibrate().main([]) == 0
    assert "# equal to dsx.calibration.GPUS['h100-80gb']" in capsys.readouterr().out


def test_the_calibration_script_recomputes_the_h200s_constants_from_its_own_rows(capsys):
    assert bench_calibrate().main(["--kind", "h200-141gb"]) == 0
    out = capsys.readouterr().out
    assert "the allocator headroom and the width curve are the H100's" in out
    assert "# equal to dsx.calibration.GPUS['h200-141gb']" in out


def test_a_calibration_missing_its_rows_names_the_roles_it_lacks():
    from dsx.calibration import DROPOUT_RUN_IDS
    from dsx.estimate import EstimateError

    with pytest.raises(EstimateError, match=r"^dropout calibration rows missing: none$"):  # the row without dropout
        bench_calibrate().calibrate_dropout([{"run_id": DROPOUT_RUN_IDS["dropout"]}])


def test_the_h200s_step_ladders_price_three_models_fixed_step_work_alike_per_parameter():
    """llama-1b (1.24B parameters in 146 tensors), llama-3b (3.21B in 254) and gpt2-xl (1.56B in 580): once the
    overflow check is taken out, what their steps pay once is one price per parameter within 15% (the median machine's
    ladders), where a price per tensor would differ 5x between llama-3b and gpt2-xl."""
    from dsx.calibration import GPUS

    per_param = bench_calibrate().step_per_param()
    assert sorted(per_param) == ["gpt2-xl", "llama-1b", "llama-3b"]
    assert max(per_param.values()) / min(per_param.values()) < 1.15
    assert bench_calibrate().calibrate_step() == GPUS["h200-141gb"].fixed_s_per_param == 1.79e-11


def test_the_h200s_per_tensor_step_work_is_what_its_calibration_machines_paid_besides_the_ladders():
    """gpt2-xl's checkpointed pair on the 2026-11-29 machines: an intercept of 174 ms less the check (61 ms), the
    ladders' per-parameter work (28 ms) and its one micro-batch's own cost (16 ms), over its 580 tensors."""
    from dsx.calibration import GPUS, H100

    assert GPUS["h200-141gb"].step_s_per_tensor == 1.17e-04
    assert H100.step_s_per_tensor == 0  # one micro-batch ladder: its fixed work per parameter alone


def test_the_h200s_micro_batches_pay_a_price_per_parameter_besides_their_samples():
    """Grad-accum ladders at two micro-batches of one model on one machine: llama-1b 12.0 ms a micro-batch, llama-3b
    26.4 and 41.2 ms (two machines), gpt2-xl 19.8 and 70.5 (its small micro-batches wait on the host); the median over
    the models' medians, per parameter, is what every micro-batch of ZeRO 0-2 pays (the H100 has no such ladders)."""
    from dsx.calibration import GPUS, H100

    costs = bench_calibrate().micro_batch_costs()
    assert {model: [round(cost * 1e3, 1) for _, cost in found] for model, found in costs.items()} == {
        "llama-3b": [26.4, 41.2], "llama-1b": [12.0], "gpt2-xl": [19.8, 70.5]}
    assert [round(sample * 1e3, 1) for sample, _ in costs["llama-1b"]] == [37.5]  # a sample at 2,048 tokens
    assert bench_calibrate().calibrate_micro_batch() == GPUS["h200-141gb"].micro_batch_s_per_param == 1.05e-11
    assert H100.micro_batch_s_per_param == 0


def test_the_step_ladders_rows_are_their_calibration_rows():
    from dsx.calibration_ladders import H200_MICRO_BATCH_LADDERS, H200_STEP_LADDERS

    for machine in "bcd":  # these three machines' commands ran nothing else
        path = f"bench/estimator/h200_ladder_{machine}/ladder.jsonl"
        assert Counter(map(calibration_role, read_rows(ROOT / path))) == {"step calibration": 6}
    assert len({run_id for _, *ids in H200_STEP_LADDERS for run_id in ids}) == 28
    assert len({run_id for _, *ids in H200_MICRO_BATCH_LADDERS for run_id in ids}) == 20
    # beside the ladders, machine b's ZeRO-0 and -2 pairs and machine a's gpt2-xl at micro-batch 2 are judged; its
    # ZeRO-3 pair is one of H200_ZERO3_LADDERS
    assert Counter(map(calibration_role, read_rows(ROOT / "bench/estimator/h200_mb_ga_ladder_b/ladder.jsonl"))) == \
        {"step calibration": 6, "judged": 4}


def test_a_step_ladder_of_two_models_is_refused(monkeypatch):
    from dsx.estimate import EstimateError

    script = bench_calibrate()
    path = "bench/estimator/h200_ladder_b/ladder.jsonl"
    llama3b_one, gpt2xl_four = "70a753e798bc4168a05a247d88a11bc9", "477625506e6c4759b4c37b640ed7dd6e"
    monkeypatch.setattr(script, "H200_STEP_LADDERS", ((path, llama3b_one, gpt2xl_four),))
    with pytest.raises(EstimateError, match=rf"^{path}: {llama3b_one}, {gpt2xl_four} are not one model at grad-accum 1 "
                                            r"and 4$"):
        script.step_ladders()


def test_a_micro_batch_ladder_at_one_micro_batch_is_refused(monkeypatch):
    from dsx.calibration_ladders import H200_MICRO_BATCH_LADDERS
    from dsx.estimate import EstimateError

    script = bench_calibrate()
    path, one, four, _, _ = H200_MICRO_BATCH_LADDERS[1]  # llama-1b at micro-batch 2, given twice
    monkeypatch.setattr(script, "H200_MICRO_BATCH_LADDERS", ((path, one, four, one, four),))
    with pytest.raises(EstimateError, match=rf"^{path}: {one}, {four}, {one}, {four} are not one model at two "
                                            r"micro-batches, grad-accum 1 and 4$"):
        script.micro_batch_costs()


def test_zero3s_hooks_price_per_module_and_pass_is_what_each_zero3_ladder_implies():
    """What the hooks showed beyond a micro-batch's compute, as the hooks' time a pass, per module: llama-1b's at
    micro-batch 8 (hidden behind 307 ms of compute but 15-34 ms) implies as much as at 2."""
    prices = bench_calibrate().zero3_hook_prices()
    assert [(model, round(price * 1e6, 1), round(loop_ns, 1)) for model, price, loop_ns in prices] == [
        ("llama-1b", 423.2, 45.0), ("llama-1b", 600.6, 43.0), ("gpt2-xl", 311.7, 45.8), ("llama-3b", 453.4, 45.6),
        ("llama-1b", 531.0, 49.1), ("gpt2-xl", 460.8, 46.0), ("llama-1b", 629.0, 46.4)]


def test_the_h200s_hooks_price_and_host_speed_are_the_zero3_ladders_medians():
    from dsx.calibration import GPUS

    h200 = GPUS["h200-141gb"]
    assert bench_calibrate().calibrate_zero3_hooks() == (h200.zero3_s_per_module_pass, h200.host_loop_ns) == (
        4.6e-4, 45.8)
    assert GPUS["h100-80gb"].host_loop_ns == 0  # not measured: the H100's hooks are not scaled


def test_a_zero3_ladder_of_another_stage_is_refused(monkeypatch):
    from dsx.calibration_ladders import H200_MICRO_BATCH_LADDERS
    from dsx.estimate import EstimateError

    script = bench_calibrate()
    path, one, four, _, _ = H200_MICRO_BATCH_LADDERS[1]  # llama-1b at ZeRO-1
    monkeypatch.setattr(script, "H200_ZERO3_LADDERS", ((path, one, four),))
    with pytest.raises(EstimateError, match=rf"^{path}: {one}, {four} are not ZeRO-3 rows$"):
        script.zero3_hook_prices()


def test_hooks_that_show_nothing_beyond_the_compute_set_no_price():
    from dsx.estimate import EstimateError

    with pytest.raises(EstimateError, match=r"^ZeRO-3's hooks show -1.0 ms beyond the compute: they set no price$"):
        bench_calibrate().pass_hooks(-0.001, 0.3, False)


def test_pass_hooks_inverts_what_the_compute_hides_of_them():
    from dsx.estimate.predict import exposed_hooks

    script = bench_calibrate()
    for hooks, compute, act_ckpt in ((0.1, 0.09, False), (0.1, 0.3, False), (0.5, 0.2, True)):
        exposed = exposed_hooks(hooks, compute, act_ckpt)
        assert script.pass_hooks(exposed, compute, act_ckpt) == pytest.approx(hooks)


def test_the_hooks_pay_what_the_host_probes_give_of_a_slower_hosts_speed():
    from dsx.calibration import ZERO3_HOST_SENSITIVITY

    assert bench_calibrate().calibrate_host_sensitivity() == ZERO3_HOST_SENSITIVITY == 0.27


def test_the_host_speed_rows_are_its_calibration_rows_and_their_zero1_rows_are_judged():
    from dsx.calibration import HOST_SPEED_RUNS

    for path in sorted({path for path, _, _ in HOST_SPEED_RUNS}):
        assert Counter(map(calibration_role, read_rows(ROOT / path))) == {"host speed calibration": 1, "judged": 1}


def test_calibration_roles_come_from_the_shipped_literals():
    assert Counter(map(calibration_role, read_rows(ROOT / HEADROOM_FILE))) == {"fit calibration": 9,
                                                                                "calibration": 1}
    assert Counter(map(calibration_role, read_rows(ROOT / CALIBRATION_FILE)))["calibration"] == 6
    h200 = [row for path in CALIBRATION_FILES["h200-141gb"] for row in read_rows(ROOT / path)]
    assert Counter(map(calibration_role, h200)) == {"calibration": 15}
    assert Counter(map(calibration_role, read_rows(ROOT / ULYSSES_FILE))) == {"ulysses calibration": 2, "judged": 1}
    assert Counter(map(calibration_role, read_rows(ROOT / ACT_OFFLOAD_FILE))) == {"act offload calibration": 2,
                                                                                  "judged": 2}


# `python -m dsx ARGS...` for each command in one process (one torch import): exit code and stdout of each, and
# the files every dsx module was imported from.
DRIVER = r"""
import contextlib, io, json, runpy, sys
results = {}
for argv in json.loads(sys.argv[1]):
    sys.argv = ["dsx", *argv]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_module("dsx", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code
    results[" ".join(argv)] = [code, out.getvalue()]
files = sorted({m.__file__ for name, m in sys.modules.items() if name.split(".")[0] == "dsx"
                and getattr(m, "__file__", None)})
print(json.dumps({"results": results, "files": files}))
"""

COMMANDS = [
    ["estimate", "--model", "gpt2-xl", "--zero", "2", "--micro-batch", "8", "--json"],
    ["estimate", "--model", "gpt2-xl", "--zero", "3", "--offload", "cpu", "--micro-batch", "8", "--json"],
    ["report", str(ROOT / HEADROOM_FILE), "--vs-estimate", "--format", "markdown"],  # the roles of its rows
]


def _dsx(python: str, cwd, pythonpath: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | ({"PYTHONPATH": pythonpath} if pythonpath else {})
    done = subprocess.run([python, "-c", DRIVER, json.dumps(COMMANDS)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_wheel_installed_into_a_fresh_venv_estimates_as_the_checkout_does(tmp_path):
    # the wheel is built from a copy of what it is made of (pyproject, README, the top-level packages): a build in
    # the checkout would leave build/ there, whose stale files later builds would pack
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in (p for p in ROOT.iterdir() if (p / "__init__.py").is_file()):
        shutil.copytree(package, source / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp_path / "wheels",
                    source], check=True, capture_output=True, timeout=120)
    (wheel,) = (tmp_path / "wheels").glob("dsx-*.whl")
    # A fresh venv: dsx from the wheel, with its console script. Its dependencies (torch, transformers, deepspeed)
    # are this environment's, reached by a plain path in a .pth file (a path line does not run the .pth files
    # there, so this checkout's editable dsx stays out), instead of a second 1 GB install.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir())
    (site / "dependencies.pth").write_text(f"{deps}\n")
    subprocess.run([python, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-deps", "--no-index",
                    "--no-compile", wheel], check=True, capture_output=True, timeout=120)
    elsewhere = tmp_path / "elsewhere"  # no checkout here or above: nothing under bench/ can be read
    elsewhere.mkdir()

    installed = _dsx(str(python), elsewhere)
    checkout = _dsx(sys.executable, elsewhere, pythonpath=str(ROOT))

    assert all(f.startswith(str(site) + os.sep) for f in installed["files"]), installed["files"]
    assert all(f.startswith(str(ROOT) + os.sep) for f in checkout["files"]), checkout["files"]
    assert installed["results"] == checkout["results"]
    assert all(code == 0 for code, _ in installed["results"].values()), installed["results"]
    script = subprocess.run([venv / "bin" / "dsx", *COMMANDS[0]], cwd=elsewhere, capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, timeout=300)
    assert script.returncode == 0, script.stderr
    assert script.stdout == checkout["results"][" ".join(COMMANDS[0])][1]
    assert "| fit calibration |" in installed["results"][" ".join(COMMANDS[2])][1]


def test_each_overflow_check_pair_differs_in_the_check_and_not_in_model_or_stage():
    import json

    from dsx.calibration import OVERFLOW_CHECK_PAIRS

    for path, lean_line, checked_line in OVERFLOW_CHECK_PAIRS:
        lines = (ROOT / path).read_text().splitlines()
        lean, checked = (json.loads(lines[n - 1]) for n in (lean_line, checked_line))
        assert (lean["model"], lean["micro_batch"], lean["device"]) == \
            (checked["model"], checked["micro_batch"], checked["device"])
        assert lean["ds_config"]["zero_optimization"] == checked["ds_config"]["zero_optimization"] == {"stage": 1}
        assert lean["ds_config"]["bf16"]["check_grad_overflow"] is False
        assert checked["ds_config"]["bf16"]["check_grad_overflow"] is True


def test_each_autocast_pair_differs_in_precision_alone_at_zero_1_or_2():
    from dsx.calibration import AUTOCAST_PAIRS
    from dsx.config_facts import precision_of

    for path, bf16_id, autocast_id in AUTOCAST_PAIRS:
        rows = {row["run_id"]: row for row in read_rows(ROOT / path)}
        bf16, autocast = rows[bf16_id], rows[autocast_id]
        assert (precision_of(bf16["ds_config"]), precision_of(autocast["ds_config"])) == ("bf16", "bf16-autocast")
        for same in ("model", "micro_batch", "grad_accum", "world_size", "gpu_name"):
            assert bf16[same] == autocast[same], (path, same)
        assert bf16["ds_config"]["zero_optimization"]["stage"] == autocast["ds_config"]["zero_optimization"][
            "stage"] in (1, 2)
        assert bf16["ds_config"].get("gradient_clipping") == autocast["ds_config"].get("gradient_clipping")
        assert bf16["toggles"].get("compile") == autocast["toggles"].get("compile")


def test_the_bf16_optimizer_pair_splits_the_same_samples_at_zero0_in_one_command():
    from dsx.calibration import BF16_OPTIMIZER_PAIR
    from dsx.config_facts import precision_of

    path, fewer_id, more_id = BF16_OPTIMIZER_PAIR
    rows = {row["run_id"]: row for row in read_rows(ROOT / path)}
    fewer, more = rows[fewer_id], rows[more_id]
    assert (fewer["micro_batch"], fewer["grad_accum"], more["micro_batch"], more["grad_accum"]) == (8, 2, 4, 4)
    for row in (fewer, more):
        assert (precision_of(row["ds_config"]), row["ds_config"]["zero_optimization"]["stage"]) == ("bf16", 0)
    for same in ("model", "world_size", "gpu_name", "toggles", "steps", "warmup"):
        assert fewer[same] == more[same], same
    without_split = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    assert ({k: v for k, v in fewer["ds_config"].items() if k not in without_split}
            == {k: v for k, v in more["ds_config"].items() if k not in without_split})


def test_the_bf16_optimizer_pair_is_its_calibration_and_the_files_other_rows_are_judged():
    assert Counter(map(calibration_role, read_rows(ROOT / "bench/parity/h100/first.jsonl"))) == {
        "bf16 optimizer calibration": 2, "judged": 4}  # its width row sets nothing since 2026-12-01


def test_the_h200s_compile_factor_is_what_its_five_same_command_pairs_give():
    from dsx.calibration import GPUS

    assert bench_calibrate().calibrate_compile_pairs() == GPUS["h200-141gb"].compile_speedup == 1.535
    assert GPUS["h100-80gb"].compile_speedup == 0  # the H100 keeps COMPILE_SPEEDUP, its one gpt2-xl pair


def test_each_h200_compile_pair_differs_in_compile_alone_in_one_command():
    from dsx.calibration import H200_COMPILE_PAIRS

    for path, eager_id, compiled_id in H200_COMPILE_PAIRS:
        rows = {row["run_id"]: row for row in read_rows(ROOT / path)}
        eager, compiled = rows[eager_id], rows[compiled_id]
        assert (eager["toggles"]["compile"], compiled["toggles"]["compile"]) == (False, True)
        assert {**eager["toggles"], "compile": True} == compiled["toggles"]
        for same in ("model", "micro_batch", "grad_accum", "world_size", "gpu_name", "ds_config"):
            assert eager[same] == compiled[same], (path, same)


def test_the_compile_pairs_are_calibration_rows_and_the_unpaired_runs_are_judged():
    width = ROOT / "bench/estimator/h200_compile_width"
    assert Counter(map(calibration_role, read_rows(width / "a/ladder.jsonl"))) == {"compile calibration": 6,
                                                                                    "judged": 1}  # gpt2-xl eager
    assert Counter(map(calibration_role, read_rows(width / "b/ladder.jsonl"))) == {"compile calibration": 4}
    for later in ("c", "d"):  # after the constant was set: out of sample
        assert Counter(map(calibration_role, read_rows(width / f"{later}/ladder.jsonl"))) == {"judged": 3}


def test_compiled_llamas_memory_factors_come_from_a_fused_and_a_plain_row_of_one_command():
    from dsx.calibration import LLAMA_COMPILE_FACTORS, LLAMA_COMPILE_FILE

    rows = list(read_rows(ROOT / LLAMA_COMPILE_FILE))
    assert bench_calibrate().calibrate_llama_compile(rows) == LLAMA_COMPILE_FACTORS == (0.64, 0.705)
    roles = {(row["toggles"]["liger_fused_loss"], round(row["memory"]["max"]["peak_allocated"] / 2**30, 1)):
             calibration_role(row) for row in rows}
    assert roles == {(True, 54.5): "compile calibration", (False, 84.8): "compile calibration",
                     (False, 77.0): "judged"}  # the plain run that peaked lower is judged


def test_a_compiled_llama_is_planned_with_llamas_factors_and_gpt2_with_gpt2s():
    from click.testing import CliRunner

    from dsx.cli import cli

    notes = {}
    for model in ("llama-1b", "gpt2"):
        result = CliRunner().invoke(cli, ["estimate", "--model", model, "--compile", "--zero", "1", "--micro-batch",
                                          "8", "--gpu-kind", "h100-80gb"])
        assert result.exit_code == 0, result.output
        notes[model] = next(line for line in result.output.splitlines() if line.startswith("note: compiled:"))
    assert notes["llama-1b"].startswith("note: compiled: activations x0.64 (layers) and x0.705 (embeddings, head, "
                                        "loss)")
    assert notes["gpt2"].startswith("note: compiled: activations x0.576 (layers) and x0.337 (embeddings, head, loss)")
