"""Pipeline stages without a launch: the layers dsx cuts a transformers model into compute what the model computes,
DeepSpeed's partition predicted exactly, the refusals (one line, exit 2, nothing written), the request resolution
(flags, preset, config file), the estimate, the sweep axis. The real 2-rank runs are in test_pipeline_cpu.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dsx.cli import cli
from dsx.models import build_model, resolve_model, synthetic_batch
from dsx.pipeline import (bubble_fraction, layer_names, layer_params, partition, partition_balanced,
                          partition_uniform, stage_layouts)

NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
MODELS = [
    pytest.param("gpt2-tiny", NO_DROPOUT, id="gpt2-tied"),
    pytest.param("llama-tiny", {}, id="llama-untied"),
    pytest.param("llama-tiny", {"tie_word_embeddings": True}, id="llama-tied"),
]


# ------------------------------------------------------------------------------------------------ the layers


def run_layers(model, family: str, input_ids):
    """The pipeline's layers run one after the other in this process, as DeepSpeed runs them across stages."""
    from dsx.rank.pipeline import layer_specs

    built: dict = {}
    x = input_ids
    for spec in layer_specs(model, family):
        if hasattr(spec, "key"):  # TiedLayerSpec: one module per key, its forward_fn at the head
            module = built.setdefault(spec.key, spec.build())
            x = spec.forward_fn(module, x) if spec.forward_fn else module(x)
        else:
            x = spec.build()(x)
    return x


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("name, overrides", MODELS)
def test_the_pipeline_layers_compute_the_models_logits_and_loss(name, overrides, attn):
    import torch

    from dsx.rank.pipeline import CausalLMLoss

    resolved = resolve_model(name, overrides)
    torch.manual_seed(0)
    model = build_model(resolved, attn=attn).train()
    batch = synthetic_batch(resolved, 3)
    expected = model(**batch)
    logits = run_layers(model, resolved.family, batch["input_ids"])
    assert torch.equal(logits, expected.logits)
    loss = CausalLMLoss(model.loss_function, resolved.vocab_size)(logits, batch["labels"])
    assert torch.equal(loss, expected.loss)


def test_stage_inputs_compute_the_mask_once_per_micro_batch_and_sdpa_runs_causally():
    """With sdpa and no padding transformers' mask is None (the attention runs with is_causal); the blocks of a stage
    share one mask / RoPE computation while the same position ids come through."""
    import torch

    from dsx.rank.pipeline import StageInputs

    resolved = resolve_model("llama-tiny")
    model = build_model(resolved)
    inputs = StageInputs(model.config, model.model.rotary_emb)
    hidden, positions = torch.zeros(2, 8, 64), torch.arange(8).unsqueeze(0)
    assert inputs.mask(hidden, positions) is None
    first = inputs.rope(hidden, positions)
    assert inputs.rope(hidden, positions) is first
    assert inputs.rope(hidden, positions.clone()) is not first


@pytest.mark.parametrize("name, overrides", MODELS)
def test_layer_names_and_counts_are_the_pipeline_modules(name, overrides):
    """What dsx predicts without torch (names for type:REGEX, parameters for the 'parameters' partition) is what
    DeepSpeed sees when it builds the specs."""
    from dsx.rank.pipeline import layer_specs

    resolved = resolve_model(name, overrides)
    specs = layer_specs(build_model(resolved), resolved.family)
    assert layer_names(resolved) == [spec.typename.__name__ for spec in specs]
    assert layer_params(resolved) == [sum(p.numel() for p in spec.build().parameters()) for spec in specs]


@pytest.mark.parametrize("weights, parts", [
    ([5, 1, 1, 1, 1, 5], 2), ([64000, 8192] + [49984] * 2 + [128, 64000], 2), ([3] * 50, 4), ([1, 0, 0, 1, 1], 3),
    ([10, 1], 2), ([7, 7, 7], 3), ([1, 2, 3, 4, 5, 6, 7, 8, 9], 4),
])
def test_the_partition_is_deepspeeds(weights, parts):
    from deepspeed.runtime.utils import partition_balanced as ds_balanced
    from deepspeed.runtime.utils import partition_uniform as ds_uniform

    assert partition_balanced(weights, parts) == [int(x) for x in ds_balanced(weights, parts)]
    assert partition_uniform(len(weights), parts) == [int(x) for x in ds_uniform(len(weights), parts)]


def test_a_stage_holding_both_ends_of_a_tied_embedding_holds_it_once():
    resolved = resolve_model("gpt2-tiny")
    whole, = stage_layouts(resolved, 1, "parameters")
    from dsx.models import count_params

    assert whole.params == count_params(resolved) and whole.blocks == 2 and whole.first and whole.last
    halves = stage_layouts(resolved, 2, "parameters")
    assert [s.layers for s in halves] == [("TokenEmbeddingPipe", "GPT2PositionsPipe", "GPT2BlockPipe"),
                                          ("GPT2BlockPipe", "FinalNormPipe", "TokenEmbeddingPipe")]
    assert sum(s.params for s in halves) == count_params(resolved) + 64_000  # the tied table on both ends


def test_type_partition_balances_the_matching_layers():
    names = layer_names(resolve_model("gpt2-tiny", {"n_layer": 4}))
    assert partition("type:Block", names, [0] * len(names), 2) == [0, 4, 8]
    assert partition("uniform", names, [0] * len(names), 2) == [0, 4, 8]


def test_the_ideal_bubble():
    assert bubble_fraction(1, 8) == 0
    assert bubble_fraction(2, 1) == 0.5
    assert bubble_fraction(4, 13) == 3 / 16


# ------------------------------------------------------------------------------------------------ refusals


def run_cli(tmp_path, *args: str):
    results = tmp_path / "runs.jsonl"
    result = CliRunner().invoke(cli, ["run", *args, "--results", str(results)])
    assert not results.exists() and not (tmp_path / "runs").exists(), "a refused run wrote something"
    return result


ZERO_REASON = '("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"); use --zero 0 or 1'


@pytest.mark.parametrize("args, message", [
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-stages", "3"],
     "--pipeline-stages 3 does not divide the 2 rank(s) (--gpus): the world is stages x data-parallel replicas"),
    (["--model", "gpt2-tiny", "--gpus", "4", "--pipeline-stages", "4"],
     "--pipeline-stages 4 is more than gpt2-tiny's 2 decoder layers: every stage needs at least one"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-stages", "2", "--zero", "2"],
     f"--pipeline-stages 2 with ZeRO stage 2: DeepSpeed refuses it {ZERO_REASON}"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-stages", "2", "--zero", "3"],
     f"--pipeline-stages 2 with ZeRO stage 3: DeepSpeed refuses it {ZERO_REASON}"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--preset", "pipeline", "--zero", "2"],
     f"--preset pipeline (2 pipeline stages) with ZeRO stage 2: DeepSpeed refuses it {ZERO_REASON}"),
    (["--model", "gpt2-tiny", "--preset", "pipeline"],
     "--preset pipeline (2 pipeline stages) does not divide the 1 rank(s) (--gpus): the world is stages x "
     "data-parallel replicas"),
    (["--model", "bert-tiny", "--gpus", "2", "--pipeline-stages", "2"],
     "--pipeline-stages: bert-tiny is a masked LM: dsx pipelines causal LMs (GPT-2, Llama families); its "
     "embeddings' token types and bidirectional attention mask have no pipeline layout in dsx"),
    (["--model", "albert-tiny", "--gpus", "2", "--pipeline-stages", "2"],
     "--pipeline-stages: albert-tiny is a masked LM whose layers all share one set of weights (one layer group): "
     "split over stages they would have to be tied across every stage; dsx pipelines causal LMs (GPT-2, Llama "
     "families)"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-stages", "2", "--pipeline-partition", "profile"],
     "--pipeline-partition profile: DeepSpeed 0.19 raises NotImplementedError for it; use "
     "parameters|uniform|type:REGEX"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-stages", "2", "--pipeline-partition", "best"],
     "--pipeline-partition 'best': use parameters|uniform|type:REGEX"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-stages", "2", "--pipeline-partition", "type:Attention"],
     "--pipeline-partition type:Attention matches 0 of gpt2-tiny's layers (TokenEmbeddingPipe, GPT2PositionsPipe, "
     "GPT2BlockPipe, FinalNormPipe): it must match at least one per stage (2)"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-partition", "uniform"],
     "--pipeline-partition needs --pipeline-stages N"),
    (["--model", "gpt2-tiny", "--gpus", "2", "--pipeline-stages", "2", "--compile"],
     "--compile with --pipeline-stages: not supported by dsx yet (DeepSpeed compiles each pipeline layer on its own, "
     "and dsx's layers share per-stage state torch.compile would guard on); drop --compile"),
], ids=["stages-not-dividing-ranks", "stages-over-layers", "zero2", "zero3", "preset-with-zero2", "preset-one-rank",
        "bert", "albert", "partition-profile", "partition-unknown", "partition-type-no-match",
        "partition-without-stages", "compile"])
def test_a_pipeline_dsx_cannot_run_is_refused_in_one_line_before_anything_starts(tmp_path, args, message):
    result = run_cli(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1] == f"Error: {message}"


def test_a_config_file_with_a_pipeline_block_but_no_stage_count_is_refused(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                "zero_optimization": {"stage": 1}, "pipeline": {"activation_checkpoint_interval": 1}}))
    result = run_cli(tmp_path, "--model", "gpt2-tiny", "--gpus", "2", "--config", str(path))
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == ("Error: the DeepSpeed config has a pipeline block but no stage count: "
                                              "pass --pipeline-stages N (DeepSpeed takes it from the PipelineModule, "
                                              "which dsx builds)")


# ------------------------------------------------------------------------------------------------ requests


def trial(**changes):
    from dsx.run import RunRequest, resolve_trial

    return resolve_trial(RunRequest(**{"model": "gpt2-tiny", "gpus": 2, **changes}))


def test_pipeline_flags_make_a_zero1_config_whose_batch_counts_data_parallel_replicas():
    t = trial(pipeline_stages=2, config_flags={"micro_batch": 2, "grad_accum": 4}, act_ckpt=True)
    assert t.pipeline.model_dump() == {"stages": 2, "partition": "parameters", "activation_checkpoint_interval": 1}
    assert t.ds_config["zero_optimization"]["stage"] == 1  # dsx run's default ZeRO-2 does not run with a pipeline
    assert t.ds_config["train_batch_size"] == 2 * 4 * 1  # 2 ranks = 2 stages x 1 replica
    assert t.ds_config["pipeline"]["activation_checkpoint_interval"] == 1
    assert (t.micro_batch, t.grad_accum, t.world_size) == (2, 4, 2)


def test_the_pipeline_preset_runs_two_stages():
    t = trial(preset="pipeline", gpus=4)
    assert t.pipeline.stages == 2 and t.ds_config["train_batch_size"] == 4 * 8 * 2


def test_a_config_files_pipeline_stages_is_the_stage_count(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                                "zero_optimization": {"stage": 0}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                                "pipeline": {"stages": 2, "activation_checkpoint_interval": 3}}))
    t = trial(model="llama-tiny", config_path=str(path), pipeline_partition="type:DecoderLayer")
    assert t.pipeline.model_dump() == {"stages": 2, "partition": "type:DecoderLayer",
                                       "activation_checkpoint_interval": 3}
    assert "dsx builds the PipelineModule with the config's pipeline.stages (2), a key DeepSpeed itself never reads" \
        in t.notes


def test_the_trial_key_tells_pipelines_apart():
    keys = {trial(pipeline_stages=2).key, trial(pipeline_stages=1).key, trial(config_flags={"zero": 1}).key,
            trial(pipeline_stages=2, pipeline_partition="uniform").key}
    assert len(keys) == 4


# ------------------------------------------------------------------------------------------------ estimate


def setup(stages, micro_batches=16, world=None):
    from dsx.estimate import Setup
    from dsx.generate import ConfigRequest, generate
    from dsx.versions import resolve_target

    world = world or stages or 1
    config = generate(ConfigRequest(zero=1, micro_batch=4, grad_accum=micro_batches, world_size=world,
                                    pipeline_stages=stages), resolve_target(None))
    return Setup(resolved=resolve_model("gpt2-xl"), ds_config=config, world_size=world, micro_batch=4,
                 grad_accum=micro_batches, pipeline_stages=stages)


def test_a_one_stage_pipeline_is_estimated_as_the_plain_model():
    from dsx.estimate import estimate

    plain, piped = estimate(setup(None), search_max=False), estimate(setup(1), search_max=False)
    assert piped.peak_allocated == plain.peak_allocated and piped.breakdown == plain.breakdown
    assert piped.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)
    assert piped.pipeline["bubble_fraction"] == 0 and piped.pipeline["per_stage"][0]["params"] == plain.params


def test_two_stages_halve_the_states_keep_two_micro_batches_in_flight_and_pay_the_bubble():
    from dsx.estimate import estimate

    plain, piped = estimate(setup(None), search_max=False), estimate(setup(2), search_max=False)
    first, last = piped.pipeline["per_stage"]
    assert piped.pipeline["largest_stage"] == 0 and piped.peak_allocated == first["peak_allocated"]
    assert piped.breakdown["optimizer states"] == 12 * first["params"]  # fp32 master + AdamW moments, 1 replica
    assert first["params"] + last["params"] == plain.params + 1600 * 50257  # the tied table on both ends
    # stage 0 holds 2 micro-batches of its half of the layers: as much as the whole model's one micro-batch
    assert piped.breakdown["layer activations"] == pytest.approx(plain.breakdown["layer activations"], rel=0.01)
    assert "loss gradients" not in piped.breakdown  # the head and the loss are the last stage's
    assert piped.pipeline["bubble_fraction"] == 1 / 17
    # 2 GPUs, but 17 half-model micro-batch times instead of 16 whole ones
    assert 1.7 < piped.tokens_per_s / plain.tokens_per_s < 2 * 16 / 17


def test_estimate_cli_prints_the_stages(tmp_path):
    result = CliRunner().invoke(cli, ["estimate", "--model", "gpt2-xl", "--zero", "1", "--micro-batch", "4",
                                      "--grad-accum", "16", "--pipeline-stages", "2", "--gpus", "2"])
    assert result.exit_code == 0, result.output
    assert "pipeline: 2 stage(s) x 1 data-parallel, 16 micro-batch(es) per step (ideal bubble 6%), partition " \
           "parameters" in result.output
    assert "GPU memory per GPU at the peak (forward/backward) of the largest stage:" in result.output


# ------------------------------------------------------------------------------------------------ sweep


def test_pipeline_stages_and_grad_accum_are_sweep_axes():
    from dsx.sweep import SweepSpec, run_request, sweep_configurations

    spec = SweepSpec(model="gpt2-tiny", zero=[1, 2], offload=["none"], gpus=[2], pipeline_stages=[None, 2],
                     grad_accum=[1, 4], micro_batch=[2])
    configurations = sweep_configurations(spec)
    assert [c.label for c in configurations] == [
        "z1 bf16 2gpu ga1", "z1 bf16 2gpu ga4", "z1 bf16 2gpu pp2 ga1", "z1 bf16 2gpu pp2 ga4",
        "z2 bf16 2gpu ga1", "z2 bf16 2gpu ga4", "z2 bf16 2gpu pp2 ga1", "z2 bf16 2gpu pp2 ga4"]
    assert [c.problem(None) for c in configurations if c.zero == 2 and c.pipeline_stages] == [
        "pipeline stages need ZeRO 0 or 1 (DeepSpeed refuses ZeRO-2/3 with a pipeline)"] * 2
    request = run_request(spec, configurations[3], 2, "fixed")
    assert (request.pipeline_stages, request.config_flags["grad_accum"]) == (2, 4)
    assert request.command[request.command.index("--pipeline-stages") + 1] == "2"
    assert configurations[3].as_dict()["pipeline_stages"] == 2 and "pipeline_stages" not in configurations[0].as_dict()


def test_a_sweep_without_pipeline_axes_keeps_its_id():
    from dsx.results import config_hash
    from dsx.sweep import SweepSpec

    spec = SweepSpec(model="gpt2-tiny", zero=[1, 2], offload=["none"])
    keys = ("model", "zero", "offload", "offload_params", "precision", "act_ckpt", "compile", "gpus", "vary",
            "one_at_a_time", "micro_batch", "mb_start", "mb_max", "mb_tolerance", "grad_accum", "steps", "warmup",
            "overrides", "seq_len", "vocab_pad", "nvme_path", "optimizer", "lr", "ds_sets", "attn", "tf32",
            "memory_cap")
    assert spec.sweep_id() == config_hash({k: getattr(spec, k) for k in keys})[:16]
    assert SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"], pipeline_stages=[2]).sweep_id() != \
        SweepSpec(model="gpt2-tiny", zero=[1], offload=["none"]).sweep_id()


@pytest.mark.parametrize("text, message", [
    ("0", "--pipeline-stages: 0 is out of range (at least 1, or none)"),
    ("two", "--pipeline-stages: 'two' is not a whole number or none"),
])
def test_sweep_pipeline_stages_takes_counts_and_none(tmp_path, text, message):
    result = CliRunner().invoke(cli, ["sweep", "--pipeline-stages", text, "--dry-run",
                                      "--results", str(tmp_path / "r.jsonl")])
    assert result.exit_code == 2 and result.output.splitlines()[-1] == f"Error: {message}"
