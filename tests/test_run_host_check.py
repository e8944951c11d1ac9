"""`dsx run` refuses, before it launches, GPU ranks predicted to fill the host's RAM (dsx.run.host_check): the
estimate dsx sweep prunes with, on the trial the run resolved. Tested on the trial and the request (this machine has
no GPU, so prepare never reaches the check here)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dsx.cli import cli
from dsx.run import RunRequest, config_flags, resolve_trial
from dsx.run.command_line import run_command
from dsx.run.host_check import host_memory_refusal
from dsx.sweep import SweepSpec, run_request, sweep_configurations
from dsx.units import GIB

H100 = "NVIDIA H100 80GB HBM3"


def _trial(**flags):
    return resolve_trial(RunRequest(model="llama-1b", config_flags=config_flags(dict(micro_batch=1, **flags)), gpus=1,
                                    results="unused/runs.jsonl"))


def test_an_offloaded_run_past_the_hosts_ram_is_refused_with_what_dsx_estimate_predicts_of_it():
    out = CliRunner().invoke(cli, ["estimate", "--model", "llama-1b", "--zero", "3", "--offload", "cpu",
                                   "--micro-batch", "1", "--gpu-kind", "h100-80gb", "--json"])
    assert out.exit_code == 0, out.output
    predicted = json.loads(out.stdout)["host_per_rank"]
    assert host_memory_refusal(_trial(zero=3, offload="cpu"), H100, 16 * GIB) == (
        f"predicted not to fit this machine: host memory needs {predicted / GIB:.2f} GiB (1 rank x "
        f"{predicted / GIB:.2f} GiB), has 16.00 GiB; the kernel would kill the ranks once they fill it (dsx estimate "
        "prices the run; offload less, to NVMe, or run fewer ranks; --no-host-check runs it anyway)")


def test_an_offloaded_run_that_fits_the_hosts_ram_is_not_refused():
    assert host_memory_refusal(_trial(zero=3, offload="cpu"), H100, 64 * GIB) is None


def test_a_gpu_dsx_has_no_calibration_for_is_checked_with_the_h100s_host_figures():
    assert host_memory_refusal(_trial(zero=3, offload="cpu"), "NVIDIA A100-SXM4-80GB", 16 * GIB) == \
        host_memory_refusal(_trial(zero=3, offload="cpu"), H100, 16 * GIB)


def test_a_run_that_keeps_nothing_on_the_host_is_not_checked():
    assert host_memory_refusal(_trial(zero=2), H100, 1 * GIB) is None


def test_no_host_check_reaches_the_request_and_its_reproduce_line():
    request = RunRequest(model="gpt2-tiny", results="r.jsonl", host_check=False)
    assert run_command(request)[-3:] == ["--no-host-check", "--results", "r.jsonl"]
    assert "--no-host-check" not in run_command(RunRequest(model="gpt2-tiny", results="r.jsonl"))


def test_a_sweep_checks_its_trials_host_memory_unless_told_not_to_prune():
    for prune in (True, False):
        spec = SweepSpec(model="gpt2-tiny", zero=[3], offload=["cpu"], prune=prune)
        (configuration,) = sweep_configurations(spec)
        assert run_request(spec, configuration, 1, "fixed").host_check is prune
