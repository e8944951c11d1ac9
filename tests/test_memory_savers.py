"""--act-ckpt-offload and --tiled-mlp: the same loss and gradients with less on the GPU, refused where they cannot
apply (dsx.rank.memory_savers, dsx.run.memory_savers)."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner

from dsx.cli import cli
from dsx.rank.memory_savers import enable_checkpointing, mlp_slices

torch = pytest.importorskip("torch")


def _model(seq_len: int = 128):
    from dsx.models import build_model, resolve_model

    torch.manual_seed(0)
    resolved = resolve_model("llama-tiny", {}, seq_len=seq_len)
    model = build_model(resolved, attn="sdpa").float()
    model.train()  # llama-tiny has no dropout: the recomputed passes see the same activations
    ids = torch.randint(0, resolved.vocab_size, (2, seq_len))
    return model, ids


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("offload, tiled", [(True, False), (False, True), (True, True)])
def test_the_savers_keep_the_loss_and_every_gradient(offload, tiled):
    from dsx.rank.memory_savers import offload_checkpointed_inputs, tile_mlps

    plain, ids = _model()
    expected_loss, expected = _loss_and_grads(plain, ids)
    model = copy.deepcopy(plain)
    enable_checkpointing(model)
    host_copies: list = []
    if offload:
        assert offload_checkpointed_inputs(model, host_copies) == model.config.num_hidden_layers
    if tiled:
        assert tile_mlps(model, "llama") == model.config.num_hidden_layers
    loss, grads = _loss_and_grads(model, ids)
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    for name, grad in expected.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-6)
    # one host copy per layer call, each its own storage (on a GPU: pinned host memory)
    assert len(host_copies) == (model.config.num_hidden_layers if offload else 0)
    assert len({p.untyped_storage().data_ptr() for pieces in host_copies for p in pieces}) == len(host_copies)


def test_the_recompute_reads_the_host_copies_not_a_kept_device_input():
    from dsx.rank.memory_savers import offload_checkpointed_inputs

    model, ids = _model()
    enable_checkpointing(model)
    host_copies: list = []
    offload_checkpointed_inputs(model, host_copies)
    _, expected = _loss_and_grads(model, ids)
    host_copies.clear()
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    for pieces in host_copies:  # only the backward pass reads them: spoil them between the passes
        for piece in pieces:
            piece.zero_()
    loss.backward()
    assert not torch.allclose(model.model.embed_tokens.weight.grad, expected["model.embed_tokens.weight"])


def test_the_mlp_is_sliced_as_deepspeeds_example_slices_it():
    assert mlp_slices(128, 64) == 2 and mlp_slices(131072, 4096) == 32 and mlp_slices(100, 4096) == 1


def test_tiled_mlp_covers_llama_mlps_only():
    from dsx.rank.memory_savers import tile_mlps

    with pytest.raises(ValueError, match="--tiled-mlp covers Llama-family MLPs, not gpt2"):
        tile_mlps(torch.nn.Linear(2, 2), "gpt2")


def _dry_run(*args: str):
    return CliRunner().invoke(cli, ["run", "--model", "llama-tiny", "--dry-run", *args])


def test_offloading_checkpointed_inputs_needs_checkpointing():
    result = _dry_run("--act-ckpt-offload")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == ("Error: --act-ckpt-offload keeps the inputs activation "
                                                      "checkpointing saves in host memory: add --act-ckpt")


def test_tiled_mlp_is_refused_for_gpt2():
    result = CliRunner().invoke(cli, ["run", "--model", "gpt2-tiny", "--tiled-mlp", "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: --tiled-mlp covers Llama-family MLPs (no dropout: each slice is recomputed in the backward pass); "
        "gpt2-tiny is a gpt2 model")


def test_the_savers_reach_the_plan_and_the_command_that_repeats_the_run():
    from dsx.run import RunRequest, resolve_trial
    from dsx.run.command_line import run_command

    request = RunRequest(model="llama-tiny", seq_len=128, act_ckpt=True, act_ckpt_offload=True, tiled_mlp=True)
    trial = resolve_trial(request)
    assert "--act-ckpt-offload: each checkpointed layer's input (128 x 64 values a sample)" in " ".join(trial.notes)
    assert "--tiled-mlp: each MLP in 2 slice(s) of tokens" in " ".join(trial.notes)
    argv = run_command(request)
    assert "--act-ckpt-offload" in argv and "--tiled-mlp" in argv
    assert "--tiled-mlp" not in run_command(RunRequest(model="llama-tiny"))


def test_a_sweep_without_checkpointing_refuses_the_offload():
    result = CliRunner().invoke(cli, ["sweep", "--model", "llama-tiny", "--zero", "2", "--act-ckpt", "off",
                                      "--act-ckpt-offload", "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == ("Error: --act-ckpt-offload keeps the inputs activation "
                                                      "checkpointing saves in host memory: add on to --act-ckpt")


def _setup(seq_len: int = 32768, **savers):
    from dsx.estimate import GPUS, Setup
    from dsx.run import RunRequest, resolve_trial

    trial = resolve_trial(RunRequest(model="llama-1b", seq_len=seq_len, overrides={"max_position_embeddings": seq_len},
                                     config_flags={"zero": 2, "micro_batch": 1}, act_ckpt=True, loss="tiled",
                                     **savers))
    return Setup(resolved=trial.resolved, ds_config=trial.ds_config, world_size=1, micro_batch=1, act_ckpt=True,
                 gpu=GPUS["h100-80gb"], loss_tile_tokens=trial.loss_tile_tokens, **savers)


def _parts(**savers):
    from dsx.estimate.states import activation_bytes

    return activation_bytes(_setup(**savers), "bf16", 1)


def _saved():
    from dsx.activations import saved_bytes
    from dsx.models import resolve_model

    return saved_bytes(resolve_model("llama-1b", {"max_position_embeddings": 32768}, seq_len=32768))


def test_the_estimate_moves_the_checkpointed_inputs_to_the_host():
    from dsx.estimate.host import host_bytes

    saved = _saved()
    inputs = saved.layer_calls * saved.layer_input_per_sample
    plain, offloaded = _parts(), _parts(act_ckpt_offload=True)
    assert plain["checkpointed layer inputs"] == inputs and "checkpointed inputs in flight" not in plain
    assert offloaded["checkpointed inputs in flight"] == 2 * saved.layer_input_per_sample
    assert "checkpointed layer inputs" not in offloaded
    on_host = host_bytes(_setup(act_ckpt_offload=True), 10**9, 1, 0.0)[0] - host_bytes(_setup(), 10**9, 1, 0.0)[0]
    assert on_host == inputs


def test_the_estimate_keeps_one_mlp_slice_of_the_recomputed_layer():
    saved = _saved()
    assert saved.mlp_per_sample > 10 * saved.layer_input_per_sample  # gate, up, their product: 4 x 8192 wide
    kept = saved.layer_input_per_sample + saved.mlp_per_sample // mlp_slices(32768, 2048)
    assert _parts()["recomputed layer"] - _parts(tiled_mlp=True)["recomputed layer"] == saved.mlp_per_sample - kept


def test_gpt2_has_no_mlp_the_tiled_mlp_covers():
    from dsx.activations import saved_bytes
    from dsx.models import resolve_model

    assert saved_bytes(resolve_model("gpt2-tiny")).mlp_per_sample == 0


def test_longest_answers_with_the_savers_for_llama():
    result = CliRunner().invoke(cli, ["estimate", "--model", "llama-1b", "--longest", "--gpu-kind", "h100-80gb",
                                      "--host-memory", "125GiB", "--json"])
    assert result.exit_code == 0, result.output
    import json

    answers = json.loads(result.output[result.output.index("["):])
    assert [(a["loss"], a["savers"]) for a in answers] == [("plain", False), ("tiled", False), ("tiled", True)]
    assert answers[2]["longest"] > answers[1]["longest"] > answers[0]["longest"]
    assert answers[2]["command"].endswith("--act-ckpt --loss tiled --act-ckpt-offload --tiled-mlp")


def test_the_largest_micro_batch_leaves_room_on_the_host_for_the_offloaded_inputs():
    from dataclasses import replace

    from dsx.estimate import max_micro_batch
    from dsx.estimate.host import host_bytes
    from dsx.estimate.states import checkpointed_input_bytes

    setup = _setup(act_ckpt_offload=True)
    assert max_micro_batch(setup) > 2  # the GPU alone: its checkpointed inputs are on the host
    at_one = host_bytes(setup, 10**9, 1, 0.0)[0]  # the parameters do not reach the host without optimizer offload
    room_for_one_more = at_one + checkpointed_input_bytes(setup, 1)
    assert max_micro_batch(replace(setup, host_memory=room_for_one_more)) == 2
    assert max_micro_batch(replace(setup, host_memory=room_for_one_more - 1)) == 1


def test_a_host_copy_is_held_in_power_of_two_pieces():
    from dsx.rank.memory_savers import SMALLEST_PIECE, host_pieces, pinned_bytes

    assert host_pieces(3 * 2**29) == [2**30, 2**29]  # 1.5 GiB: 1 GiB + 512 MiB
    assert host_pieces(2**30 + 3 * 2**20) == [2**30, 3 * 2**20]  # below SMALLEST_PIECE: the rest in one piece
    assert pinned_bytes(2**30 + 3 * 2**20) == 2**30 + 4 * 2**20  # only that piece is rounded up
    assert pinned_bytes(3 * 2**29) == 3 * 2**29 and pinned_bytes(SMALLEST_PIECE) == SMALLEST_PIECE
    size = 1_591_296 * 2048 * 2  # llama-1b's layer input at 1,591,296 tokens: 6.07 GiB in 8 pieces, not 8 GiB
    assert sum(host_pieces(size)) == size and pinned_bytes(size) - size < SMALLEST_PIECE


def test_the_host_holds_the_pinned_inputs_with_at_most_one_rounded_piece_each():
    from dsx.estimate.host import host_bytes

    def on_host(seq_len: int) -> int:
        return host_bytes(_setup(seq_len, act_ckpt_offload=True), 10**9, 1, 0.0)[0] - \
            host_bytes(_setup(seq_len), 10**9, 1, 0.0)[0]

    assert on_host(32768) == 16 * 32768 * 2048 * 2  # 128 MiB a layer: one piece, a power of two
    assert on_host(24576) == 16 * 64 * 2**20 + 16 * 32 * 2**20  # 96 MiB: 64 + 32, each a power of two
    assert on_host(20480) == 16 * (64 + 16) * 2**20  # 80 MiB: 64 + 16


def test_the_layer_input_goes_to_the_host_in_pieces_and_comes_back_whole():
    from dsx.rank import memory_savers
    from dsx.rank.memory_savers import offload_checkpointed_inputs

    model, ids = _model(seq_len=100)
    expected_loss, expected = _loss_and_grads(model, ids)
    enable_checkpointing(model)
    host_copies: list = []
    offload_checkpointed_inputs(model, host_copies)
    smallest = memory_savers.SMALLEST_PIECE
    try:
        memory_savers.SMALLEST_PIECE = 4096  # a layer input of 2 x 100 x 64 fp32 values: 32 + 16 KiB + the last 2
        loss, grads = _loss_and_grads(model, ids)
    finally:
        memory_savers.SMALLEST_PIECE = smallest
    assert [[p.numel() * 4 for p in pieces] for pieces in host_copies] == \
        [[32768, 16384, 2048]] * model.config.num_hidden_layers
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    for name, grad in expected.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-6)


def test_checkpointing_is_enabled_without_transformers_deprecation_warning():
    """transformers 5.24 renamed gradient_checkpointing_enable (an alias until v6, with a FutureWarning)."""
    import warnings

    model, _ = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        enable_checkpointing(model)
    assert all(getattr(layer, "gradient_checkpointing", False) for layer in model.model.layers)
