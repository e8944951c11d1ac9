"""Model presets: shapes, parameter counts, overrides and their errors, synthetic batches, attention choices."""

import json
import re
import os
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from dsx.cli import cli
from dsx.models import (FAMILIES, MODELS, ModelError, assume_unpacked_batches, attn_available, build_model,
                        count_params, parse_overrides, resolve_model, synthetic_batch)

TINY = ["gpt2-tiny", "bert-tiny", "albert-tiny", "llama-tiny"]

# Parameter counts as transformers' num_parameters() gives them (tied embedding / LM head once). Published
# figures: GPT-2 124M/355M/774M/1.5B, BERTForMaskedLM base 109,514,298 / large 335,174,458 (no pooler, MLM head
# with its own bias), Llama-3.2-1B 1,235,814,400, Llama-3.2-3B 3,212,749,824, Llama-2-7B 6,738,415,616, Llama-3-8B
# 8,030,261,248.
EXPECTED_PARAMS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "bert-base": 109_514_298,
    "bert-large": 335_174_458,
    "albert-base": 11_221_680,  # albert-base-v2's 11,683,584 less the pooler (590,592) plus the MLM head (128,688)
    "llama-1b": 1_235_814_400,
    "llama-3b": 3_212_749_824,
    "llama-7b": 6_738_415_616,
    "llama-8b": 8_030_261_248,
}


def test_registry_has_every_required_preset():
    assert set(MODELS) == set(EXPECTED_PARAMS) | set(TINY)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_preset_resolves_with_a_source_and_consistent_family(name):
    preset = MODELS[name]
    resolved = resolve_model(name)
    assert preset.family in FAMILIES and preset.task == FAMILIES[preset.family].task
    assert len(preset.source) > 20
    assert resolved.seq_len == preset.seq_len <= resolved.max_positions
    assert resolved.hidden_size % resolved.num_heads == 0
    assert type(resolved.hf_config).__name__ == FAMILIES[preset.family].config_class


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_parameter_counts_on_the_meta_device(name):
    assert count_params(resolve_model(name)) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", TINY)
def test_meta_count_equals_the_real_models_num_parameters(name):
    resolved = resolve_model(name)
    assert count_params(resolved) == build_model(resolved).num_parameters()


def test_gpt2_tied_embedding_counts_once():
    resolved = resolve_model("gpt2")
    model = build_model(resolve_model("gpt2-tiny"))
    assert model.lm_head.weight is model.transformer.wte.weight
    untied = resolve_model("gpt2", {"tie_word_embeddings": False})
    assert count_params(untied) - count_params(resolved) == 50257 * 768


def test_vocab_pad_rounds_up_and_token_ids_stay_below_the_real_vocab():
    resolved = resolve_model("gpt2", vocab_pad=64)
    assert (resolved.vocab_size, resolved.token_vocab_size) == (50304, 50257)
    assert count_params(resolved) == 124_439_808 + 47 * 768
    assert resolve_model("gpt2", vocab_pad=1).vocab_size == 50257


def test_seed_001_megatron_gpt2_sizes_are_reproduced():
    # Seed 001 (Megatron-LM GPT-2 on a DGX-2) reports "model size" 354871296 for 24 layers / hidden 1024 and
    # 1212103680 for 40 layers / hidden 1536: GPT-2 with the vocab padded to 50304.
    assert count_params(resolve_model("gpt2-medium", vocab_pad=64)) == 354_871_296
    assert count_params(resolve_model("gpt2-medium", {"n_layer": 40, "n_embd": 1536}, vocab_pad=64)) == 1_212_103_680
    assert count_params(resolve_model("gpt2-medium", {"n_layer": 54, "n_embd": 1920, "n_head": 20},
                                      vocab_pad=64)) == 2_488_688_640


def test_albert_base_has_the_seed_000_shape():
    c = resolve_model("albert-base").hf_config
    assert (c.vocab_size, c.max_position_embeddings, c.num_hidden_layers, c.hidden_size, c.intermediate_size,
            c.embedding_size, c.num_attention_heads) == (30000, 512, 12, 768, 3072, 128, 12)


def test_overrides_apply_and_aliases_resolve_to_the_config_spelling():
    resolved = resolve_model("gpt2", {"hidden_size": 512, "n_head": 8, "n_layer": 8})
    assert resolved.overrides == {"n_embd": 512, "n_head": 8, "n_layer": 8}
    assert (resolved.hidden_size, resolved.num_heads, resolved.num_layers) == (512, 8, 8)
    assert resolve_model("llama-tiny", {"hidden_size": 128}).head_dim == 32  # head_dim follows hidden_size


def test_resolving_twice_gives_the_same_model():
    a = resolve_model("gpt2-tiny", {"n_layer": 3}, seq_len=32, vocab_pad=64)
    b = resolve_model(a.name, a.overrides, a.seq_len, a.vocab_pad)
    assert a.describe() == b.describe() and a.hf_config.to_dict() == b.hf_config.to_dict()


@pytest.mark.parametrize("args, message", [
    (("gpt3",), "unknown model 'gpt3'; did you mean 'gpt2'?"),
    (("gpt2", {"n_layers": 8}), "unknown GPT2Config key 'n_layers' for gpt2; did you mean 'n_layer'?"),
    (("bert-base", {"num_hidden_layer": 8}),
     "unknown BertConfig key 'num_hidden_layer' for bert-base; did you mean 'num_hidden_layers'?"),
    (("gpt2", {"seq_len": 128}), "'seq_len' is not a config attribute: pass --seq-len"),
    (("gpt2", {"hidden_size": 512, "n_embd": 512}), "'hidden_size' and 'n_embd' both set GPT2Config.n_embd"),
    (("gpt2", {"hidden_size": 100}), "gpt2: hidden size 100 is not a multiple of the 12 attention heads"),
    (("gpt2", {"n_layer": "8"}), "gpt2: GPT2Config rejects the overrides {'n_layer': '8'}"),
    (("llama-1b", {"num_key_value_heads": 5}), "llama-1b: 32 attention heads are not a multiple of "
                                                "num_key_value_heads=5"),
    (("bert-tiny", {"vocab_size": 50}), "bert-tiny: vocab_size 50 has no room for the [MASK] id 103"),
    (("gpt2", {}, 0), "seq_len must be a positive integer, got 0"),
    (("gpt2", {}, None, 0), "vocab_pad must be a positive integer, got 0"),
])
def test_bad_requests_are_refused_with_the_fix(args, message):
    with pytest.raises(ModelError, match=re.escape(message)):
        resolve_model(*args)


def test_a_sequence_longer_than_the_positions_is_refused_not_stretched():
    with pytest.raises(ModelError, match=re.escape(
            "seq_len 2048 is longer than gpt2's n_positions=1024: pass a shorter --seq-len, or --set "
            "n_positions=2048 (adds learned position embeddings, so the parameter count changes)")):
        resolve_model("gpt2", seq_len=2048)
    with pytest.raises(ModelError, match=re.escape("--set max_position_embeddings=8192 (RoPE: no new parameters)")):
        resolve_model("llama-7b", seq_len=8192)
    assert resolve_model("gpt2", {"n_positions": 2048}, seq_len=2048).seq_len == 2048


def test_model_error_is_a_value_error():
    assert issubclass(ModelError, ValueError)


def test_parse_overrides_reads_json_values():
    assert parse_overrides(["n_layer=8", "tie_word_embeddings=false", "activation_function=gelu", "x=0.5"]) == {
        "n_layer": 8, "tie_word_embeddings": False, "activation_function": "gelu", "x": 0.5}
    with pytest.raises(ModelError, match="--set expects KEY=VALUE"):
        parse_overrides(["n_layer"])


def test_causal_batch_is_deterministic_with_labels_equal_to_inputs():
    resolved = resolve_model("gpt2-tiny", vocab_pad=64)
    a = synthetic_batch(resolved, 3, "cpu", torch.Generator().manual_seed(7))
    b = synthetic_batch(resolved, 3, "cpu", torch.Generator().manual_seed(7))
    c = synthetic_batch(resolved, 3, "cpu", torch.Generator().manual_seed(8))
    assert set(a) == {"input_ids", "labels"}
    assert a["input_ids"].shape == (3, 64) and a["input_ids"].dtype == torch.long
    assert torch.equal(a["input_ids"], a["labels"])
    assert torch.equal(a["input_ids"], b["input_ids"]) and not torch.equal(a["input_ids"], c["input_ids"])
    assert int(a["input_ids"].max()) < 1000 and int(a["input_ids"].min()) >= 0  # never a padded vocab row


@pytest.mark.parametrize("name, mask_id", [("bert-tiny", 103), ("albert-tiny", 4)])
def test_masked_batch_masks_15_percent_and_labels_only_those(name, mask_id):
    resolved = resolve_model(name, seq_len=40)
    batch = synthetic_batch(resolved, 4, "cpu", torch.Generator().manual_seed(0))
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    masked = batch["labels"] != -100
    assert masked.sum(dim=1).tolist() == [6] * 4  # round(0.15 * 40) per sequence
    assert (batch["input_ids"][masked] == mask_id).all()
    assert (batch["attention_mask"] == 1).all()
    again = synthetic_batch(resolved, 4, "cpu", torch.Generator().manual_seed(0))
    assert all(torch.equal(batch[k], again[k]) for k in batch)


def test_every_masked_sequence_has_a_label_even_when_short():
    batch = synthetic_batch(resolve_model("bert-tiny", seq_len=3), 2, "cpu", torch.Generator().manual_seed(0))
    assert ((batch["labels"] != -100).sum(dim=1) == 1).all()


@pytest.mark.parametrize("name", TINY)
def test_tiny_models_train_one_step_with_eager_and_sdpa_alike(name):
    resolved = resolve_model(name)
    batch = synthetic_batch(resolved, 2, "cpu", torch.Generator().manual_seed(0))
    losses = []
    for attn in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = build_model(resolved, attn)
        assert model.config._attn_implementation == attn
        model.eval()  # dropout off: the two attention paths draw dropout masks differently
        loss = model(**batch).loss
        loss.backward()
        assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters() if p.requires_grad)
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_build_model_does_not_touch_the_resolved_config():
    resolved = resolve_model("gpt2-tiny")
    before = resolved.hf_config.to_dict()
    build_model(resolved, "eager")
    assert resolved.hf_config.to_dict() == before


def test_attention_choices():
    for attn in ("eager", "sdpa"):
        for family in FAMILIES:
            assert attn_available(attn, family)[0]
    ok, reason = attn_available("flex")
    assert not ok and reason == "unknown attention 'flex': choose one of eager, sdpa, flash"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_flash_needs_cuda_and_says_so():
    ok, reason = attn_available("flash")
    assert not ok and reason == "flash needs a CUDA GPU (none visible); use --attn sdpa"
    with pytest.raises(ModelError, match=re.escape("flash needs a CUDA GPU")):
        build_model(resolve_model("gpt2-tiny"), "flash")


def test_dsx_models_lists_every_preset_with_its_count():
    result = CliRunner().invoke(cli, ["models"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "family", "task", "layers", "hidden", "heads", "seq", "vocab", "params",
                                "GFLOP/token"]
    assert [line.split()[0] for line in lines[1:]] == list(MODELS)
    gpt2 = next(line for line in lines if line.startswith("gpt2 "))
    assert gpt2.split()[:9] == ["gpt2", "gpt2", "causal-lm", "12", "768", "12", "1024", "50,257", "124,439,808"]


def test_dsx_models_applies_overrides_to_a_named_model():
    result = CliRunner().invoke(cli, ["models", "gpt2", "--vocab-pad", "64", "--set", "n_layer=6", "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert (row["vocab_size"], row["layers"], row["overrides"]) == (50304, 6, {"n_layer": 6})
    assert row["params"] == count_params(resolve_model("gpt2", {"n_layer": 6}, vocab_pad=64))


def test_dsx_models_refuses_bad_keys_with_a_usage_error():
    result = CliRunner().invoke(cli, ["models", "gpt2", "--set", "n_layers=6"])
    assert result.exit_code == 2
    assert "unknown GPT2Config key 'n_layers' for gpt2; did you mean 'n_layer'?" in result.output
    result = CliRunner().invoke(cli, ["models", "--set", "n_layer=6"])
    assert result.exit_code == 2 and "apply to named models" in result.output


@pytest.mark.slow  # a fresh interpreter each
@pytest.mark.parametrize("name", ["gpt2-tiny", "bert-tiny"])
def test_a_models_loss_logs_no_loss_type_warning(name):
    # transformers warns once per process: a fresh interpreter, a real forward with labels
    script = ("from dsx.models import build_model, resolve_model, synthetic_batch\n"
              f"r = resolve_model({name!r})\n"
              "print(float(build_model(r)(**synthetic_batch(r, 2)).loss))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) > 0
    assert "loss_type" not in out.stderr


@pytest.mark.slow  # a subprocess that counts a model on the meta device
def test_dsx_estimate_prints_no_loss_type_warning(tmp_path):
    """The message the issue saw on every estimate/sweep/run: dsx estimate builds the model (activations measured on
    the meta device) and runs its loss, in a fresh process with an empty model cache."""
    out = subprocess.run([sys.executable, "-m", "dsx", "estimate", "--model", "gpt2-tiny", "--gpu-kind", "h100-80gb"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    assert "loss_type" not in out.stderr and "fits" in out.stdout


def test_the_packed_sequence_check_is_off_inside_the_block_and_back_after_it(transformers_masks):
    """dsx.comm.zero3 traces a model on the meta device, where the check cannot read its position ids."""
    from dsx.models import packed_sequences_unchecked

    check = transformers_masks.find_packed_sequence_indices
    with packed_sequences_unchecked():
        assert transformers_masks.find_packed_sequence_indices(torch.arange(8).view(1, 8)) is None
    assert transformers_masks.find_packed_sequence_indices is check


@pytest.mark.slow  # compiles a model
@pytest.mark.parametrize("unpacked", [True, False])
def test_a_compiled_model_keeps_sdpas_causal_kernel_on_unpacked_batches(monkeypatch, transformers_masks, unpacked):
    # Compiled, transformers hands SDPA a full [B, 1, S, S] mask (a packed-sequence test it cannot evaluate; on torch
    # < 2.14 any causal mask): 3.5x slower attention at 32k on an H100. After assume_unpacked_batches (a rank's
    # models) SDPA gets no mask and is_causal; same logits.
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording_sdpa(*args, attn_mask=None, is_causal=False, **kwargs):
        calls.append((attn_mask is None, is_causal))
        return sdpa(*args, attn_mask=attn_mask, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    resolved = resolve_model("gpt2-tiny", {"attn_pdrop": 0, "resid_pdrop": 0, "embd_pdrop": 0}, seq_len=64)
    torch.manual_seed(0)
    model = build_model(resolved).eval()
    batch = {"input_ids": synthetic_batch(resolved, 2)["input_ids"]}
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(**batch).logits
        if unpacked:
            assume_unpacked_batches()
        calls.clear()
        got = torch.compile(model)(**batch).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert calls and set(calls) == ({(True, True)} if unpacked else {(False, False)})
