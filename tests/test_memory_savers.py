"""--act-ckpt-offload and --tiled-mlp: the same loss and gradients with less on the GPU, refused where they cannot
apply (dsx.rank.memory_savers, dsx.run.memory_savers)."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner

from dsx.cli import cli
from dsx.rank.memory_savers import mlp_slices

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
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
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
    assert len({c.untyped_storage().data_ptr() for c in host_copies}) == len(host_copies)


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
