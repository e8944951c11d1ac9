"""`dsx --help`, `dsx config`, `dsx validate`, `dsx schema` and the other commands' --help must never import torch
or deepspeed."""

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
