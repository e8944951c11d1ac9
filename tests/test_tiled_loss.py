"""--loss tiled: the same loss and gradients as transformers' own head + loss, without the whole logits."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dsx.models import build_model, resolve_model  # noqa: E402
from dsx.rank.tiled_loss import (checkpointed_tiles_loss, default_tile_tokens, shifted_labels,  # noqa: E402
                                 tiled_head_loss, wrap)


def _model_and_batch(name: str, seed: int = 0):
    torch.manual_seed(seed)
    resolved = resolve_model(name, {}, seq_len=32)
    model = build_model(resolved, attn="eager").float()
    model.eval()  # no dropout: the two passes must see the same activations
    ids = torch.randint(0, resolved.vocab_size, (2, 32))
    labels = ids.clone()
    labels[0, :5] = -100  # labels transformers ignores count in neither loss
    return model, ids, labels


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
@pytest.mark.parametrize("zero3_path", [False, True])
def test_the_tiled_loss_has_transformers_loss_and_gradients_under_a_scaled_backward(name, zero3_path):
    """The backward pass gets 1/4, as engine.backward gives it at grad-accum 4; tiles of 7 tokens (not a divisor)."""
    model, ids, labels = _model_and_batch(name)
    plain = model(input_ids=ids, labels=labels).loss
    (plain / 4).backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)
    tiled = wrap(model, tile_tokens=7, zero3=zero3_path)(input_ids=ids, labels=labels).loss
    (tiled / 4).backward()
    got = _grads(model)
    assert tiled.item() == pytest.approx(plain.item(), rel=1e-6)
    assert got.keys() == expected.keys()
    for name_, grad in expected.items():
        torch.testing.assert_close(got[name_], grad, rtol=1e-4, atol=1e-7, msg=name_)


def test_deepspeeds_tiled_fused_logits_loss_gives_the_head_an_unscaled_gradient():
    """Why dsx has its own: DeepSpeed 0.19.8's TiledFusedLogitsLoss fills the head's .grad in the forward pass with an
    incoming gradient of 1, so a loss scaled by 1/2 (engine.backward at grad-accum 2) leaves it twice too large."""
    ulysses = pytest.importorskip("deepspeed.runtime.sequence_parallel.ulysses_sp")
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(2, 8, 16, requires_grad=True)
    labels = torch.randint(0, 50, (2, 8))
    (torch.nn.functional.cross_entropy(head(hidden).view(-1, 50), labels.view(-1)) / 2).backward()
    expected = head.weight.grad.clone()
    head.weight.grad = None

    def loss_fn(module, x, y):
        return torch.nn.functional.cross_entropy(module(x).float(), y.view(-1))
    (ulysses.TiledFusedLogitsLoss.apply(loss_fn, head, hidden, labels, None, 4, [head.weight], "mean") / 2).backward()
    assert (head.weight.grad.norm() / expected.norm()).item() == pytest.approx(2.0, rel=1e-4)
    head.weight.grad = None
    (tiled_head_loss(hidden.detach().reshape(-1, 16), head.weight, labels.reshape(-1), 4) / 2).backward()
    torch.testing.assert_close(head.weight.grad, expected, rtol=1e-5, atol=1e-7)


def test_the_fused_loss_runs_outside_the_compiled_graph(monkeypatch):
    """--loss fused with --compile: the rest of the model is traced, Liger's loss is called eagerly (traced, its loss
    was wrong on an H200). A stand-in for Liger's class (not installed here) records whether it runs traced."""
    import sys
    import types

    seen = {}

    class StandInLoss:  # Liger's signature: (weight, hidden, labels) -> mean over labels that are not -100
        def __init__(self, ignore_index, reduction):
            self.ignore_index = ignore_index

        def __call__(self, weight, hidden, labels):
            seen["loss traced"] = torch.compiler.is_compiling()
            return torch.nn.functional.cross_entropy(hidden @ weight.t(), labels, ignore_index=self.ignore_index)

    monkeypatch.setitem(sys.modules, "liger_kernel.transformers",
                        types.SimpleNamespace(LigerFusedLinearCrossEntropyLoss=StandInLoss))
    model, ids, labels = _model_and_batch("llama-tiny")
    plain = model(input_ids=ids, labels=labels).loss
    fused = wrap(model, tile_tokens=None, zero3=False, fused=True)
    model.model.norm.register_forward_hook(lambda *_: seen.update({"model traced": torch.compiler.is_compiling()}))
    loss = torch.compile(fused, backend="eager")(input_ids=ids, labels=labels).loss
    assert seen == {"model traced": True, "loss traced": False}
    assert loss.item() == pytest.approx(plain.item(), rel=1e-5)


def test_labels_are_shifted_as_transformers_shifts_them():
    assert shifted_labels(torch.tensor([[5, 6, 7]])).tolist() == [[6, 7, -100]]


def test_a_tile_holds_512_mib_of_fp32_logits():
    assert default_tile_tokens(32_000) == 4194
    assert default_tile_tokens(50_257) == 2670


def test_checkpointed_tiles_free_each_tiles_logits_after_the_forward():
    """What autograd keeps for the backward pass: no tensor of vocabulary width (the plain head keeps [N, V])."""
    head = torch.nn.Linear(16, 1000, bias=False)
    hidden = torch.randn(64, 16, requires_grad=True)
    labels = torch.randint(0, 1000, (64,))
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(tuple(t.shape)) or t, lambda t: t):
        checkpointed_tiles_loss(head, hidden, labels, 16)
    assert not [shape for shape in kept if shape and shape[-1] == 1000]


def test_a_head_with_a_bias_is_refused():
    model, _, _ = _model_and_batch("gpt2-tiny")
    model.lm_head = torch.nn.Linear(64, 1000, bias=True)
    with pytest.raises(ValueError, match="--loss tiled needs a bias-free linear LM head"):
        wrap(model, tile_tokens=7, zero3=False)


# ------------------------------------------------------------------------------------------------ dsx run / estimate

def _resolve(**fields):
    from dsx.run import RunRequest, resolve_trial

    return resolve_trial(RunRequest(model=fields.pop("model", "gpt2-tiny"), **fields))


@pytest.mark.parametrize("fields, message", [
    (dict(loss="tiled", pipeline_stages=2, gpus=2),
     "--loss tiled does not apply to pipeline stages: the last stage computes the loss of DeepSpeed's PipelineModule "
     "on its whole logits; drop --pipeline-stages or --loss tiled"),
    (dict(loss="tiled", model="bert-tiny"), "--loss tiled computes a causal LM's loss; bert-tiny is a masked-lm model"),
    (dict(loss_tile_tokens=64), "--loss-tile-tokens 64 sizes the tiles of --loss tiled: add --loss tiled"),
    (dict(loss="magic"), "unknown --loss 'magic' (known: plain, tiled, fused)"),
    (dict(loss="fused"), "--loss fused needs a CUDA GPU: Liger's fused linear cross-entropy is a Triton kernel "
                         "(--loss tiled computes the same loss without the whole logits on any device)"),
    (dict(loss="fused", model="bert-tiny"), "--loss fused computes a causal LM's loss; bert-tiny is a masked-lm model"),
])
def test_where_the_tiled_loss_cannot_apply_the_run_is_refused(fields, message):
    from dsx.run import RunRefused

    with pytest.raises(RunRefused) as refused:
        _resolve(**fields)
    assert str(refused.value) == message


def test_a_tiled_trial_says_its_tiles_and_is_another_trial_than_the_plain_one():
    from dsx.run.command_line import run_command

    tiled = _resolve(loss="tiled", loss_tile_tokens=16, config_flags={"micro_batch": 2})
    plain = _resolve(config_flags={"micro_batch": 2})
    assert tiled.loss_tile_tokens == 16 and plain.loss_tile_tokens is None
    assert tiled.key != plain.key
    assert "--loss tiled: the loss of each micro-batch's 128 tokens in 8 tile(s) of up to 16 (62.5 KiB of fp32 " \
           "logits at a time, against 500.0 KiB whole)" in tiled.notes
    assert run_command(tiled.request)[-4:-2] == ["--loss-tile-tokens", "16"]


def test_a_fused_loss_trial_is_another_trial_than_the_plain_one(monkeypatch):
    """A sweep's results file skips the trials it has a row for: a plain row must not stand for a fused trial (on
    this CPU machine the fused loss is refused: its GPU checks are set aside to reach the key)."""
    monkeypatch.setattr("dsx.run.kernels._check_fused_loss", lambda *args: None)
    fused = _resolve(loss="fused", config_flags={"micro_batch": 2})
    plain = _resolve(config_flags={"micro_batch": 2})
    assert fused.key != plain.key


def test_the_estimate_of_a_64k_sequence_drops_the_whole_logits_with_the_tiled_loss():
    """llama-1b at 65,536 tokens: the plain loss's fp32 logits and their gradients do not fit an H100; tiles do."""
    from dsx.estimate import Setup, estimate
    from dsx.models import resolve_model

    resolved = resolve_model("llama-1b", {}, seq_len=65536)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW"}}
    plain = estimate(Setup(resolved=resolved, ds_config=config, world_size=1, micro_batch=1, act_ckpt=True),
                     search_max=False)
    tiled = estimate(Setup(resolved=resolved, ds_config=config, world_size=1, micro_batch=1, act_ckpt=True,
                           loss_tile_tokens=4194), search_max=False)
    logits = 65536 * resolved.vocab_size * 4
    assert plain.breakdown["loss gradients"] == 2 * logits and "loss gradients" not in tiled.breakdown
    assert tiled.breakdown["loss tile"] == 4194 * resolved.vocab_size * (2 + 12)
    assert not plain.fits and tiled.fits
