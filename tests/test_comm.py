"""Communication in every row (dsx.comm, dsx.rank.comms): the logger in the ranks' config only, what "bytes" means,
DeepSpeed's volume per ZeRO stage predicted, the ranks' counts gathered into the row, the report's table.
The real runs that check measured against predicted are tests/test_comm_cpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsx.comm import LOGGER_BLOCK, ParamFacts, comm_of, param_facts, predict, rank_config, volume_bytes
from dsx.comm.predict import zero3_fetches_per_micro_batch
from dsx.models import resolve_model
from dsx.rank.protocol import CollectiveCount, CommLog, RankReport
from dsx.results import CommPredicted, read_rows

ROOT = Path(__file__).resolve().parent.parent
CONFIG = {"train_batch_size": 2, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}


@pytest.fixture(scope="module")
def tiny() -> ParamFacts:
    """gpt2-tiny: 172,288 parameters, every one under 1e5 elements, the embedding tied to the head."""
    return param_facts(resolve_model("gpt2-tiny"))


def zero(stage: int, precision: str = "bf16", **keys) -> dict:
    return {precision: {"enabled": True}, "zero_optimization": {"stage": stage, **keys}}


# ------------------------------------------------------------------------------------ the ranks' config (logger)


def test_the_ranks_config_adds_the_comms_logger_and_leaves_the_users_config_as_it_was():
    ranks, notes = rank_config(CONFIG)
    assert ranks == {**CONFIG, "comms_logger": LOGGER_BLOCK} and "comms_logger" not in CONFIG and notes == []
    assert LOGGER_BLOCK == {"enabled": True, "prof_all": True, "verbose": False, "debug": False}


def test_a_verbose_comms_logger_of_the_user_is_quieted_for_the_ranks_and_keeps_its_prof_ops():
    ranks, notes = rank_config({**CONFIG, "comms_logger": {"enabled": True, "verbose": True, "prof_ops": ["x"]}})
    assert ranks["comms_logger"] == {**LOGGER_BLOCK, "prof_ops": ["x"]}
    assert notes == ["comms_logger.verbose is turned off for the ranks (one line per collective would flood the "
                     "output); the row's comm field holds the counts"]


def test_no_comm_log_leaves_any_comms_logger_out_of_the_ranks_config():
    assert rank_config(CONFIG, comm_log=False) == (CONFIG, [])
    ranks, notes = rank_config({**CONFIG, "comms_logger": {"enabled": True}}, comm_log=False)
    assert ranks == CONFIG and notes == ["--no-comm-log: the config's comms_logger block is left out of the ranks' "
                                         "config"]


def test_no_config_dsx_config_emits_turns_the_comms_logger_on():
    for path in sorted((ROOT / "ds_configs").rglob("*.json")):
        assert "comms_logger" not in json.loads(path.read_text()), path.name


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsx", *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow  # seconds of estimates / subprocesses: out of the fast tier
def test_a_dry_run_prints_the_ranks_config_with_the_logger_and_without_it_under_no_comm_log():
    on = run_cli("run", "--model", "gpt2-tiny", "--zero", "2", "--dry-run")
    off = run_cli("run", "--model", "gpt2-tiny", "--zero", "2", "--dry-run", "--no-comm-log")
    assert on.returncode == off.returncode == 0, on.stderr + off.stderr
    assert '"comms_logger": {' in on.stdout and "comms_logger" not in off.stdout


# ------------------------------------------------------------------------------------------- what bytes means


@pytest.mark.parametrize("name, factor", [("all_reduce", 2), ("all_gather_into_tensor", 4), ("all_gather", 4),
                                          ("reduce_scatter_tensor", 1), ("all_to_all_single", 1), ("broadcast", 1),
                                          ("send", 1)])
def test_bytes_are_the_zero_papers_volume_of_the_logged_input_size(name, factor):
    assert volume_bytes(name, 1000, world_size=4) == 1000 * factor


def test_an_all_gather_counts_the_ranks_of_the_group_it_gathered_over_when_the_rank_counted_them():
    """hpZ's secondary partition: a rank's 1000-byte shard gathered over a group of 2 in a world of 4."""
    assert volume_bytes("all_gather_into_tensor", 1000, world_size=4, gathered_bytes=2000) == 2000


# ----------------------------------------------------------------------------------------------- the prediction


def test_the_tiny_model_has_its_embedding_tied_and_every_parameter_under_the_persistence_threshold(tiny):
    assert tiny.total == 172_288 and max(tiny.numels) < 100_000 and sorted(tiny.uses)[-1] == 2


def test_zero_1_all_reduces_the_gradients_and_all_gathers_the_partitions_3n_where_the_paper_says_2n(tiny):
    n = tiny.total
    p = predict(zero(1), tiny, world_size=2, grad_accum=4)
    assert p.parts == {"gradients": 2 * n * 2, "parameters (all-gather after the step)": n * 2}
    assert (p.bytes_per_step, p.paper_bytes_per_step) == (6 * n, 4 * n)


def test_zero_2_reduces_the_gradients_after_every_micro_batch(tiny):
    n = tiny.total
    assert predict(zero(2), tiny, 2, grad_accum=2).bytes_per_step == 2 * (2 * n * 2) + n * 2


def test_zero_2_without_the_multi_rank_bucket_all_reduce_reduces_each_slice_to_its_owner(tiny):
    n = tiny.total
    config = zero(2, use_multi_rank_bucket_allreduce=False)
    assert predict(config, tiny, 2).parts["gradients"] == n * 2


def test_zero_0_all_reduces_the_gradients_once_per_step(tiny):
    assert predict(zero(0, "fp16"), tiny, 2, grad_accum=3).bytes_per_step == 2 * tiny.total * 2


def test_fp32_and_communication_data_type_set_the_element_bytes(tiny):
    n = tiny.total
    assert predict(zero(1, "fp32"), tiny, 2).bytes_per_step == 2 * n * 4 + n * 4
    upcast = {**zero(1), "communication_data_type": "fp32"}
    assert predict(upcast, tiny, 2).bytes_per_step == 2 * n * 4 + n * 2


def autocast(stage: int, **block) -> dict:
    return {"torch_autocast": {"enabled": True, "dtype": "bfloat16", **block}, "zero_optimization": {"stage": stage}}


def split_by_owner(tiny: ParamFacts, *names: str) -> tuple[int, int]:
    """(elements a module of one of these classes owns, the rest) of gpt2-tiny."""
    owned = sum(x for x, owners in zip(tiny.numels, tiny.owners) if any(o.endswith(n) for o in owners for n in names))
    return owned, tiny.total - owned


def test_facts_name_each_parameters_owners_gpt2s_conv1d_its_head_tying_the_embedding_to_a_linear(tiny):
    owners = set(tiny.owners)
    assert ("transformers.pytorch_utils.Conv1D",) in owners
    assert ("torch.nn.modules.sparse.Embedding", "torch.nn.modules.linear.Linear") in owners
    assert split_by_owner(tiny, ".Linear") == (64_000, tiny.total - 64_000)


def test_under_autocast_zero_1_reduces_linear_gradients_in_bf16_the_rest_in_fp32_and_gathers_fp32(tiny):
    # DeepSpeed 0.19.8: the comm dtype of parameters torch.nn.Linear owns; GPT-2's Conv1D is not one of its classes
    linear, rest = split_by_owner(tiny, ".Linear")
    p = predict(autocast(1), tiny, 2)
    assert p.parts == {"gradients": 2 * (2 * linear + 4 * rest),
                       "parameters (all-gather after the step)": 4 * tiny.total}


def test_under_autocast_the_prediction_says_which_class_keeps_most_gradients_in_fp32(tiny):
    assert predict(autocast(2), tiny, 2).notes == [
        "torch_autocast: 37% of the parameters' gradients go in 16 bits (a module of lower_precision_safe_modules "
        "owns them), the rest in fp32 (58% of all are transformers.pytorch_utils.Conv1D's: naming that class in "
        "torch_autocast.lower_precision_safe_modules sends their gradients in 16 bits)"]
    assert predict(autocast(2), tiny, 1).notes == [
        "one rank: DeepSpeed still reduces the gradients, on a group of one, and skips its all-gathers"]


def test_under_autocast_communication_data_type_is_not_read_at_zero_1_to_3(tiny):
    upcast = {**autocast(2), "communication_data_type": "fp32"}
    assert predict(upcast, tiny, 2).parts == predict(autocast(2), tiny, 2).parts


def test_under_autocast_zero_0_all_reduces_in_fp32_or_the_communication_data_type(tiny):
    n = tiny.total
    assert predict(autocast(0), tiny, 2).parts == {"gradients": 2 * n * 4}
    assert predict({**autocast(0), "communication_data_type": "bf16"}, tiny, 2).parts == {"gradients": 2 * n * 2}


def test_under_autocast_the_configs_lower_precision_safe_modules_decide_which_gradients_go_in_bf16(tiny):
    both = autocast(2, lower_precision_safe_modules=["torch.nn.Linear", "transformers.pytorch_utils.Conv1D"])
    linear_and_conv, rest = split_by_owner(tiny, ".Linear", ".Conv1D")
    assert predict(both, tiny, 2).parts["gradients"] == 2 * (2 * linear_and_conv + 4 * rest)
    assert predict(autocast(2, lower_precision_safe_modules=[]), tiny, 2).parts["gradients"] == 2 * tiny.total * 4


def test_under_autocast_zero_3_gathers_partitioned_parameters_in_their_comm_dtype_persistent_ones_in_fp32(tiny):
    linear, rest = split_by_owner(tiny, ".Linear")
    partitioned = {**autocast(3), "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    once_each = predict(partitioned, tiny, 2)  # the reuse distance (1e9) keeps every parameter through the backward
    assert once_each.parts["parameters (forward and backward gathers)"] == 2 * linear + 4 * rest
    assert predict(autocast(3), tiny, 2).parts["parameters (persistent, after the step)"] == 4 * tiny.total


def test_zero_3_keeps_small_parameters_whole_and_all_gathers_them_once_after_the_step(tiny):
    n = tiny.total
    p = predict(zero(3), tiny, 2, grad_accum=2)
    assert p.parts == {"parameters (forward and backward gathers)": 0, "parameters (persistent, after the step)": n * 2,
                       "gradients": 2 * n * 2}
    assert p.paper_bytes_per_step == 3 * n * 2


def test_zero_3_within_the_reuse_distance_gathers_each_parameter_once_per_micro_batch(tiny):
    p = predict(zero(3, stage3_param_persistence_threshold=0), tiny, 2)
    assert p.parts["parameters (forward and backward gathers)"] == tiny.total * 2


def test_zero_3_without_reuse_gathers_every_use_forward_and_backward_the_tied_embedding_twice_each(tiny):
    uses = sum(x * u for x, u in zip(tiny.numels, tiny.uses))
    p = predict(zero(3, stage3_param_persistence_threshold=0, stage3_max_reuse_distance=0,
                     stage3_prefetch_bucket_size=0), tiny, 2)
    assert uses == tiny.total + 64_000 and p.parts["parameters (forward and backward gathers)"] == 2 * uses * 2


def test_zero_plus_plus_quantisation_shrinks_the_zero_3_volume(tiny):
    plain = predict(zero(3, stage3_param_persistence_threshold=0), tiny, 16, ranks_per_node=8)
    qwz = predict(zero(3, stage3_param_persistence_threshold=0, zero_quantized_weights=True), tiny, 16,
                  ranks_per_node=8)
    qgz = predict(zero(3, stage3_param_persistence_threshold=0, zero_quantized_gradients=True), tiny, 16,
                  ranks_per_node=8)
    two_d = sum(x for x, d in zip(tiny.numels, tiny.ndims) if d >= 2)
    assert qwz.parts["parameters (forward and backward gathers)"] == plain.parts[
        "parameters (forward and backward gathers)"] / 2
    assert qgz.parts["gradients"] == two_d * 0.5 * (1 + 1 / 8) + (tiny.total - two_d) * 2
    assert qgz.bytes_per_step < plain.bytes_per_step
    hpz = predict(zero(3, zero_hpz_partition_size=4), tiny, 8)
    assert any(note.startswith("hpZ: backward gathers within groups of 4 ranks") for note in hpz.notes)


@pytest.mark.parametrize("world, per_node", [(8, 8), (8, None), (2, 2)])
def test_on_one_node_qgz_sends_what_zero_3_sends_without_it(tiny, world, per_node):
    # DeepSpeed 0.18/0.19 stage3.py: the int4 all-to-alls only when world size // devices per node > 1
    plain = predict(zero(3), tiny, world, ranks_per_node=per_node)
    qgz = predict(zero(3, zero_quantized_gradients=True), tiny, world, ranks_per_node=per_node)
    assert qgz.parts == plain.parts
    assert "qgZ: on one node DeepSpeed reduce-scatters the gradients as without it" in qgz.notes[-1]


def test_a_1_bit_optimizer_compresses_to_a_quarter_byte_per_parameter(tiny):
    config = {**zero(0, "fp16"), "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 2}}}
    p = predict(config, tiny, 2)
    assert (p.bytes_per_step, p.compressed_bytes_per_step) == (2 * tiny.total * 2, tiny.total / 4)


def test_a_1_bit_optimizer_on_one_rank_compresses_to_nothing(tiny):
    config = {**zero(0, "fp16"), "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 2}}}
    p = predict(config, tiny, 1)
    assert (p.bytes_per_step, p.compressed_bytes_per_step) == (2 * tiny.total * 2, 0.0)
    assert p.notes[-1].startswith("1-bit on one rank: the compressed steps have no peer")


# -------------------------------------------------------------------------------------- the ranks' counts -> row


def report(rank: int, steps: list[dict[str, tuple[int, int]]], compressed=None) -> RankReport:
    return RankReport(rank=rank, comm=CommLog(
        steps=[{k: CollectiveCount(calls=c, logged_bytes=b) for k, (c, b) in s.items()} for s in steps],
        compressed=compressed))


def test_the_row_has_each_collectives_mean_per_step_from_rank_0_and_the_max_over_ranks():
    ranks = [report(0, [{"all_reduce": (3, 300), "all_gather_into_tensor": (1, 100)}] * 2),
             report(1, [{"all_reduce": (3, 300), "all_gather_into_tensor": (1, 100)},
                        {"all_reduce": (5, 500), "all_gather_into_tensor": (1, 100)}])]
    predicted = CommPredicted(bytes_per_step=800.0, paper_bytes_per_step=600.0)
    comm = comm_of(ranks, world_size=2, params=100, predicted=predicted)
    assert comm.steps == 2 and comm.predicted == predicted and comm.phases is None
    assert comm.collectives["all_reduce"].model_dump() == {"calls_per_step": 3, "logged_bytes_per_step": 300,
                                                           "bytes_per_step": 600}
    assert comm.collectives["all_gather_into_tensor"].bytes_per_step == 200
    assert comm.collectives_max["all_reduce"].model_dump() == {"calls_per_step": 4, "logged_bytes_per_step": 400,
                                                               "bytes_per_step": 800}
    assert (comm.bytes_per_step, comm.bytes_per_step_max, comm.bytes_per_param) == (800, 1000, 8)


def test_a_1_bit_row_splits_the_warm_up_and_the_compressed_steps():
    steps = [{"all_reduce": (1, 400)}, {"all_reduce": (1, 400)}, {"all_to_all_single": (1, 25)}]
    comm = comm_of([report(0, steps, compressed=[False, False, True])], 1, 100, step_times=[0.3, 0.1, 0.2])
    assert comm.phases["warmup"].model_dump() == {"steps": [0, 1], "bytes_per_step": 800, "step_time_s_median": 0.2}
    assert comm.phases["compressed"].model_dump() == {"steps": [2], "bytes_per_step": 25, "step_time_s_median": 0.2}


def test_ranks_that_counted_nothing_give_the_reason_or_no_comm_at_all():
    off = RankReport(rank=0, comm=CommLog(note="DeepSpeed's comms logger was off (dsx run --no-comm-log)"))
    assert comm_of([off], 1, 10).notes == ["DeepSpeed's comms logger was off (dsx run --no-comm-log)"]
    assert comm_of([RankReport(rank=0), None], 2, 10) is None


# ------------------------------------------------------------------------------------ the rank side, for real


class _Engine:
    enable_backward_allreduce = False


@pytest.mark.deepspeed
def test_a_1bit_run_counts_only_what_its_timed_steps_sent_under_each_ops_name(single_process_group):
    import deepspeed.comm as dist
    import deepspeed.comm.comm as ds_comm
    import torch

    from dsx.rank.comms import CommCounter, totals

    was = ds_comm.comms_logger.enabled
    dist.configure(enabled=True, prof_all=True, verbose=False)
    try:
        counter = CommCounter(_Engine(), {"optimizer": {"type": "OneBitAdam"}}, warmup=2)
        for step in range(2):  # the warm-up steps: forgotten
            counter.before(step)
            dist.all_reduce(torch.ones(10))
            counter.after(step)
        counter.before(2)
        dist.all_reduce(torch.ones(10))
        dist.all_reduce(torch.ones(6, dtype=torch.bfloat16))
        dist.broadcast(torch.ones(4), 0)
        dist.all_gather_into_tensor(torch.empty(8), torch.ones(8))  # over the group of one: 32 bytes gathered
        counter.after(2)
        counter.before(3)
        counter.after(3)
        on_in_timed_steps = ds_comm.comms_logger.enabled
    finally:
        dist.configure(enabled=was)
    log = counter.log()
    assert log.steps == [{"all_reduce": CollectiveCount(calls=2, logged_bytes=40 + 12),
                          "broadcast": CollectiveCount(calls=1, logged_bytes=16),
                          "all_gather_into_tensor": CollectiveCount(calls=1, logged_bytes=32, gathered_bytes=32)}, {}]
    assert log.compressed == [True, True] and log.note is None
    assert log.counted == "timed" and on_in_timed_steps
    assert totals({"all_reduce | [Caller Func: f]": {8: [2, [], [], []]}, "all_reduce": {4: [1, [], [], []]}}) == {
        "all_reduce": (3, 20)}


@pytest.mark.deepspeed
@pytest.mark.parametrize("warmup, counted, steps", [(3, "warm-up", [2, 3]), (1, "timed", [2, 3, 4])])
def test_the_counter_counts_the_warm_up_steps_after_the_first_and_turns_the_logger_off_for_the_timed_ones(
        single_process_group, warmup, counted, steps):
    import deepspeed.comm as dist
    import deepspeed.comm.comm as ds_comm
    import torch

    from dsx.rank.comms import CommCounter

    was = ds_comm.comms_logger.enabled
    dist.configure(enabled=True, prof_all=True, verbose=False)
    logger_on = []
    try:
        counter = CommCounter(_Engine(), {}, warmup=warmup)
        for step in range(warmup + 3):
            counter.before(step)
            logger_on.append(ds_comm.comms_logger.enabled)
            dist.all_reduce(torch.ones(step + 1))  # step i logs 4 x (i + 1) bytes: which steps counted shows
            counter.after(step)
    finally:
        dist.configure(enabled=was)
    log = counter.log()
    assert log.counted == counted and log.compressed is None
    assert [s["all_reduce"].logged_bytes // 4 for s in log.steps] == steps
    assert logger_on == [True] * warmup + [counted == "timed"] * 3


# -------------------------------------------------------------------------------------------- estimate, report


@pytest.mark.slow  # seconds of estimates / subprocesses: out of the fast tier
def test_dsx_estimate_prints_the_predicted_volume(tiny):
    out = run_cli("estimate", "--model", "gpt2-tiny", "--zero", "1", "--gpus", "2", "--json")
    assert out.returncode == 0, out.stderr
    comm = json.loads(out.stdout)["comm"]
    assert comm["bytes_per_step"] == 6 * tiny.total and comm["paper_bytes_per_step"] == 4 * tiny.total
    text = run_cli("estimate", "--model", "gpt2-tiny", "--zero", "1", "--gpus", "2").stdout
    assert "communication per optimizer step and rank: 1009.5 KiB (6.00 bytes/param; the ZeRO paper's figure: " \
           "673.0 KiB, 4.00 bytes/param)" in text


def test_the_report_has_a_communication_table_only_for_rows_that_counted():
    from dsx.report import comm_table

    row = {"device": "cpu", "gpu_name": None, "world_size": 2, "model": {"preset": "gpt2-tiny", "overrides": {}},
           "micro_batch": 4, "grad_accum": 1,
           "sweep": {"label": "z2 bf16"}, "versions": {"deepspeed": "0.18.9"},
           "comm": {"bytes_per_step": 3072.0, "bytes_per_step_max": 3072.0, "bytes_per_param": 6.0,
                    "collectives": {"all_reduce": {"calls_per_step": 3.0}, "all_gather_into_tensor": {
                        "calls_per_step": 1.0}},
                    "predicted": {"bytes_per_step": 3072.0, "paper_bytes_per_step": 2048.0}}}
    table = comm_table([row, {**row, "comm": None}])
    assert table.rows == [["2 x CPU", "gpt2-tiny", "z2 bf16", "4 x 1", "1", "0.18.9", "3.0 KiB", "3.0 KiB", "6.00",
                           "3.0 KiB", "1.000", "2.0 KiB", "AG×1 AR×3", "-", "-"]]
    assert comm_table([{**row, "comm": None}]) is None


def test_on_one_rank_only_the_gradient_reduction_is_left(tiny):
    n = tiny.total
    for stage, gradients in ((1, 2 * n * 2), (2, 2 * n * 2), (3, n * 2)):
        p = predict(zero(stage), tiny, world_size=1)
        assert p.bytes_per_step == gradients, stage
        assert p.notes == ["one rank: DeepSpeed still reduces the gradients, on a group of one, and skips its "
                           "all-gathers"]


@pytest.mark.deepspeed
def test_deepspeed_turns_the_logger_on_for_a_block_that_says_enabled_false():
    """Pins what the linter warns about (comms-logger-on) (DeepSpeed 0.19.8 here; 0.18.9 reads the same code)."""
    import deepspeed.comm as dist
    import deepspeed.comm.comm as ds_comm
    from deepspeed.comm.config import DeepSpeedCommsConfig

    class Config:
        comms_config = DeepSpeedCommsConfig({"comms_logger": {"enabled": False}})

    was = ds_comm.comms_logger.enabled
    try:
        dist.configure(enabled=False)
        dist.configure(deepspeed_config=Config())
        assert ds_comm.comms_logger.enabled is True
    finally:
        dist.configure(enabled=was)


def test_qwz_on_cpu_ranks_is_refused_before_anything_starts(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--zero", "3", "--ds-set",
                          "zero_optimization.zero_quantized_weights=true", "--results", str(tmp_path / "runs.jsonl")],
                         capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        "Error: zero_optimization.zero_quantized_weights (ZeRO++ qwZ) cannot run on CPU ranks: DeepSpeed's weight "
        "quantizer has no CPU kernel (its ranks fail with 'This op had not been implemented on CPU backend'); run it "
        "on GPUs")
    assert not (tmp_path / "runs.jsonl").exists()


def test_dsx_runs_comm_line_judges_a_1_bit_run_by_its_warm_up_steps_and_shows_each_phase():
    from dsx.results import parse_row, read_rows
    from dsx.run.summary import comm_line

    onebit_adam = parse_row(read_rows(Path(__file__).parent.parent / "bench/onebit/h100/runs.jsonl")[2])
    assert comm_line(onebit_adam) == (
        "  comm        207.7 MiB/step (1.75 bytes/param), predicted 474.8 MiB (x1.00 over the warm-up steps), ZeRO "
        "paper 474.8 MiB; warmup steps 474.8 MiB/step, 53.4 ms/step; compressed steps 2 B/step, 55.5 ms/step "
        "(predicted 29.7 MiB)")


# ------------------------------------------------------------------------------ ZeRO-3's fetches (their count)

FETCH_FACTS = ParamFacts(numels=(200_000, 300_000, 50), uses=(2, 1, 1), ndims=(2, 2, 1))
"""A tied 200k-element embedding, one 300k-element matrix, a 50-element bias (persistent under the 1e5 default)."""


def test_zero3_fetches_each_use_of_a_partitioned_parameter_once_when_the_reuse_distance_keeps_it():
    assert zero3_fetches_per_micro_batch(zero(3), FETCH_FACTS) == 3.0


def test_zero3_fetches_again_in_the_backward_what_the_reuse_distance_released():
    # 700k partitioned uses a pass; without prefetching a reuse distance of 700k keeps the forward's last 350k
    config = zero(3, stage3_max_reuse_distance=700_000, stage3_prefetch_bucket_size=0)
    assert zero3_fetches_per_micro_batch(config, FETCH_FACTS) == 4.5


def test_zero3_prefetching_keeps_up_to_max_live_parameters_through_the_backward():
    # the prefetcher holds what it gathered (up to 350k elements here) as it scans into the backward and marks it
    config = zero(3, stage3_max_reuse_distance=0, stage3_max_live_parameters=350_000)
    assert zero3_fetches_per_micro_batch(config, FETCH_FACTS) == 4.5
    assert zero3_fetches_per_micro_batch(zero(3, stage3_max_reuse_distance=0), FETCH_FACTS) == 3.0  # 1e9 live


def test_zero3_does_not_fetch_what_the_persistence_threshold_keeps_whole():
    config = zero(3, stage3_param_persistence_threshold=250_000)
    assert zero3_fetches_per_micro_batch(config, FETCH_FACTS) == 1.0


def test_gpt2_xl_zero3_gathers_are_predicted_within_3_percent_of_the_2_h200_count():
    """bench/multigpu logger-z3: 9.12 GB of all-gathers a step and rank (micro-batch 8 x 2) with DeepSpeed's
    defaults; the backward re-gathers 39% of the forward's elements (the reuse distance alone would say 69%)."""
    row = list(read_rows(ROOT / "bench/multigpu/rows/logger-z3.jsonl"))[0]  # the logger-on run
    measured = row["comm"]["collectives"]["all_gather_into_tensor"]["bytes_per_step"]
    resolved = resolve_model("gpt2-xl", {}, seq_len=1024, vocab_pad=64)
    predicted = predict(row["ds_config"], param_facts(resolved), 2, 2)
    gathers = sum(v for k, v in predicted.parts.items() if k.startswith("parameters"))
    assert measured == 9_121_747_200 and gathers == pytest.approx(measured, rel=0.03)


def test_ulysses_reduces_gradients_in_fp32_and_adds_its_all_to_alls():
    """The 4 x H100 Ulysses row (llama-1b, 65,536 tokens, ZeRO-2, bf16, comms logger on): DeepSpeed's engine
    reduces gradients in seq_parallel_communication_data_type (fp32 unless set), so 4 bytes a parameter all-reduced
    twice, bf16 parameters gathered after the step, and the all-to-alls; the rest (32 small all-gathers of the
    losses, 16.8 MB) is not predicted."""
    from dsx.comm.predict import ulysses_all_to_all_bytes
    from dsx.results import read_rows

    row = [r for r in read_rows(ROOT / "bench/multigpu/rows/long4.jsonl")
           if r["status"] == "ok" and r["world_size"] == 4 and r["comm"]["bytes_per_step"]][0]
    resolved = resolve_model("llama-1b", row["model"]["overrides"], seq_len=row["model"]["seq_len"])
    a2a = ulysses_all_to_all_bytes(resolved, 1, 1, 4, 2, True)
    predicted = predict(row["ds_config"], param_facts(resolved), 4, 1, all_to_all_bytes=a2a)
    n = param_facts(resolved).total
    assert predicted.parts == {"gradients": 2 * 4 * n, "parameters (all-gather after the step)": 2 * n,
                               "Ulysses all-to-alls": 8_053_063_680}
    assert predicted.bytes_per_step == pytest.approx(row["comm"]["bytes_per_step"], rel=1e-3)
    assert predict({**row["ds_config"], "seq_parallel_communication_data_type": "bf16"}, param_facts(resolved),
                   4).parts["gradients"] == 2 * 2 * n


# ------------------------------------------------------------------- ZeRO-3's gathers replayed (dsx.comm.zero3)

# three modules of 100 elements each, run in order, then backward in reverse; nothing persistent
THREE = ((0,), (1,), (2,), (2,), (1,), (0,))


def test_without_reuse_distance_or_prefetch_every_parameter_is_gathered_at_each_use():
    from dsx.comm.zero3 import simulate_gathers

    # DeepSpeed stops looking ahead once the elements it passed reach the distance: at 0, at once
    assert simulate_gathers(THREE, (100, 100, 100), [False] * 3, 0, 10**9, 0) == (2, 2, 2)


def test_a_parameter_used_again_within_the_reuse_distance_stays_gathered():
    from dsx.comm.zero3 import simulate_gathers

    # the trace after module 2's forward: 2 (its backward) at once; after 1's: 2, 2, then 1 (200 elements before it)
    assert simulate_gathers(THREE, (100, 100, 100), [False] * 3, 200, 10**9, 0) == (2, 2, 1)
    assert simulate_gathers(THREE, (100, 100, 100), [False] * 3, 300, 10**9, 0) == (2, 1, 1)
    assert simulate_gathers(THREE, (100, 100, 100), [False] * 3, 10**9, 10**9, 0) == (1, 1, 1)


def test_a_parameter_the_prefetcher_passed_on_its_way_to_a_later_use_is_not_released():
    from dsx.comm.zero3 import simulate_gathers

    # module 0 prefetches 1 and 2 (a bucket of 200); module 1's prefetch passes 2's and 1's backward uses (marking
    # them) and gathers 0 for its backward; 1 stays to its backward use, 2 (marked for the very next step) does not
    assert simulate_gathers(THREE, (100, 100, 100), [False] * 3, 0, 10**9, 200) == (2, 1, 2)


def test_persistent_parameters_are_never_gathered_in_the_passes():
    from dsx.comm.zero3 import simulate_gathers

    assert simulate_gathers(THREE, (100, 100, 100), [False, True, False], 0, 10**9, 0) == (2, 0, 2)


def test_gpt2s_fetch_trace_runs_the_forward_then_the_backward_and_checkpointing_recomputes_each_layer(tiny):
    """gpt2-tiny: 2 layers of 6 modules with parameters, the embeddings (the tied wte, 64,000 elements, first and
    last: its lm_head use ends the forward and starts the backward), every module DeepSpeed hooks (those without
    parameters fetch nothing)."""
    wte = tiny.numels.index(64_000)
    with_params = [call for call in tiny.trace if call]
    half = len(with_params) // 2
    assert with_params[0] == with_params[half - 1] == with_params[half] == with_params[-1] == (wte,)
    assert with_params[:half] == with_params[half:][::-1]  # the backward: the forward's fetches reversed
    assert sorted({i for call in tiny.trace for i in call}) == list(range(len(tiny.numels)))
    recomputed = [call for call in tiny.trace_checkpointed if call]
    assert len(recomputed) == len(with_params) + 2 * 6  # each layer's forward again inside the backward


def test_every_committed_multi_gpu_zero3_row_gathers_the_bytes_the_replay_predicts():
    """GPT-2 124M, gpt2-xl and llama-1b on 2 H200s, at DeepSpeed's defaults and at others (replay2, replay3, zeropp2),
    with and without checkpointing, and the checkpointed 16.9B llama on 4 (bench/multigpu/rows): to the element but
    for qwZ's scales.
    replay3's two rows were predicted before they ran (bench/multigpu/run.sh); its gpt2-xl row timed out after its
    counted warm-up step. The formula before the replay: gpt2-xl -2.4%, llama-1b +23.2%."""
    rows = [row for path in sorted((ROOT / "bench/multigpu/rows").glob("*.jsonl")) for row in read_rows(path)
            if row["world_size"] > 1 and isinstance(row["ds_config"].get("zero_optimization"), dict)
            and row["ds_config"]["zero_optimization"].get("stage") == 3
            and "all_gather_into_tensor" in ((row.get("comm") or {}).get("collectives") or {})]
    assert len(rows) == 23 and {row["model"]["preset"] for row in rows} == {"gpt2", "gpt2-xl", "llama-1b", "llama-8b"}
    for row in rows:
        model = row["model"]
        facts = param_facts(resolve_model(model["preset"], model["overrides"], seq_len=model["seq_len"],
                                          vocab_pad=model["vocab_pad"]))
        predicted = predict(row["ds_config"], facts, row["world_size"], row["grad_accum"],
                            checkpointed=bool(row["toggles"].get("act_ckpt")))
        gathers = sum(v for k, v in predicted.parts.items() if k.startswith("parameters"))
        measured = row["comm"]["collectives"]["all_gather_into_tensor"]["bytes_per_step"]
        quantized = row["ds_config"]["zero_optimization"].get("zero_quantized_weights")
        assert gathers == pytest.approx(measured, rel=1e-3 if quantized else 1e-9), (row["run_id"], model["preset"])


def test_a_model_that_refuses_checkpointing_keeps_its_trace_and_falls_back_to_the_formula_under_it():
    """ALBERT's transformers class raises on activation checkpointing: no checkpointed trace, no failed estimate."""
    from dsx.comm.predict import zero3_fetches_per_micro_batch

    facts = param_facts(resolve_model("albert-base"))
    assert facts.trace and facts.trace_checkpointed == ()
    assert zero3_fetches_per_micro_batch(zero(3), facts, checkpointed=True) > 0


def test_the_cached_param_facts_are_keyed_on_every_dsx_source_that_measures_them(monkeypatch):
    """The checkpointed trace switches checkpointing on through dsx.rank.memory_savers: a change there is a new
    cache file, as a change to the trace itself is."""
    import importlib

    import dsx.cache

    comm_predict = importlib.import_module("dsx.comm.predict")  # the module, not the function dsx.comm exports

    seen = {}

    def derived(kind, inputs, sources, measure, load, dump):
        seen[kind] = {path.relative_to(Path(comm_predict.__file__).parents[1]).as_posix() for path in sources}
        return ParamFacts(numels=(), uses=(), ndims=())

    monkeypatch.setattr(dsx.cache, "derived", derived)
    monkeypatch.setattr(comm_predict, "_FACTS", {})
    param_facts(resolve_model("gpt2-tiny"))
    assert seen["param-facts"] == {"comm/predict.py", "comm/zero3.py", "models.py", "rank/memory_savers.py"}
