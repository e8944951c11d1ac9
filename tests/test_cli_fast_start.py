"""`dsx --help`, `dsx config`, `dsx validate`, `dsx schema` and the other commands' --help must never import torch
or deepspeed."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

PROBE = """
import sys
from dsx.cli import cli
try:
    cli.main(args={args!r}, prog_name="dsx", standalone_mode=True)
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "deepspeed", "transformers") if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


@pytest.mark.parametrize("args", [
    ["--help"],
    ["config", "--preset", "zero3-offload"],
    ["validate", "ds_configs/zero3-offload.json"],
    ["validate", "--json", "tests/fixtures/configs/hf_trainer_zero3_auto.json", "--hf"],
    ["schema"],
    ["run", "--help"],
    ["sweep", "--help"],
    ["report", "--help"],
    ["launch", "--help"],
])
def test_light_commands_do_not_import_torch_or_deepspeed(args):
    out = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:", out.stderr


@pytest.mark.slow  # seconds of estimates / subprocesses: out of the fast tier
def test_dsx_models_counts_once_then_prints_the_same_table_from_the_cache_without_torch(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    probe = [sys.executable, "-c", PROBE.format(args=["models"])]
    first = subprocess.run(probe, cwd=ROOT, capture_output=True, text=True, env=env)
    second = subprocess.run(probe, cwd=ROOT, capture_output=True, text=True, env=env)
    assert first.stdout.splitlines()[-1] == "HEAVY:torch,transformers", first.stderr
    assert second.stdout.splitlines()[-1] == "HEAVY:", second.stderr
    assert second.stdout == first.stdout.replace("HEAVY:torch,transformers", "HEAVY:")
    assert "gpt2-xl" in second.stdout and "1,557,611,200" in second.stdout
    assert [p.parent.name for p in tmp_path.glob("dsx/models/presets-*.json")] == ["models"]


@pytest.mark.slow  # seconds of estimates / subprocesses: out of the fast tier
def test_dsx_models_with_a_changed_preset_is_counted_again_not_read_from_the_cache(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-m", "dsx", "models"], cwd=ROOT, capture_output=True, env=env, check=True)
    changed = ("from dsx import models; models.MODELS['gpt2'] = models.dataclasses.replace(models.MODELS['gpt2'], "
               "config={**models.MODELS['gpt2'].config, 'n_layer': 1})\n" + PROBE.format(args=["models"]))
    out = subprocess.run([sys.executable, "-c", changed], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.stdout.splitlines()[-1] == "HEAVY:torch,transformers", out.stderr
    assert out.stdout.splitlines()[1].split()[:4] == ["gpt2", "gpt2", "causal-lm", "1"]
