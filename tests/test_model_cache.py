"""What dsx derives from a model built on the meta device (parameter counts, the FLOP split, the comm facts, the
saved activations) and `dsx estimate`'s resolution of the model are kept in dsx's disk cache, so a later `dsx
estimate` of the same model builds nothing and imports neither torch nor transformers; a cache that is missing,
unreadable or made by other versions is never believed, and never fails a command."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from dsx import activations, flops, models
from dsx.models import resolve_model

comm_predict = importlib.import_module("dsx.comm.predict")  # dsx.comm.predict is also the name of a function

GPT2_TINY_PARAMS = 172_288


MEMOS = (models._COUNTS, models._META_CACHE, flops._STATS, comm_predict._FACTS, activations._CACHE)
"""The in-process memos in front of the disk cache."""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty dsx cache and empty in-process memos (the first call in a test measures); the memos are given back
    afterwards, warm, for the tests that follow."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kept = [dict(memo) for memo in MEMOS]
    forget_this_process()
    yield tmp_path / "dsx" / "models"
    for memo, before in zip(MEMOS, kept):
        memo.clear()
        memo.update(before)


def forget_this_process() -> None:
    """Clear the in-process memos, as a new command starts with them empty."""
    for memo in MEMOS:
        memo.clear()


def no_model_may_be_built(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a model was built although its figures are cached")

    monkeypatch.setattr(models, "from_config", refuse)


def figures(resolved) -> tuple:
    return (models.count_params(resolved), models.largest_module_params(resolved), flops.param_stats(resolved),
            comm_predict.param_facts(resolved), activations.saved_bytes(resolved, "sdpa", "bf16"))


def test_a_later_command_reads_every_figure_from_the_cache_without_building_the_model(cache, monkeypatch):
    resolved = resolve_model("gpt2-tiny")
    measured = figures(resolved)
    forget_this_process()
    no_model_may_be_built(monkeypatch)
    assert figures(resolved) == measured
    assert measured[0] == GPT2_TINY_PARAMS
    assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["counts", "param", "param", "saved"]


@pytest.mark.parametrize("junk", ["{not json", '{"params": "many", "total": 1}', "null"],
                         ids=["unreadable", "other-fields", "null"])
def test_a_cache_file_that_is_not_the_figure_is_measured_again(cache, junk):
    resolved = resolve_model("gpt2-tiny")
    measured = figures(resolved)
    for path in cache.iterdir():
        path.write_text(junk)
    forget_this_process()
    assert figures(resolved) == measured


def test_other_overrides_are_another_model_not_a_cache_hit(cache):
    assert models.count_params(resolve_model("gpt2-tiny")) == GPT2_TINY_PARAMS
    assert models.count_params(resolve_model("gpt2-tiny", {"n_layer": 1})) < GPT2_TINY_PARAMS


def test_a_preset_whose_shape_changed_under_its_name_is_counted_again(cache, monkeypatch):
    assert models.count_params(resolve_model("gpt2-tiny")) == GPT2_TINY_PARAMS
    forget_this_process()
    tiny = models.MODELS["gpt2-tiny"]
    shallower = models.dataclasses.replace(tiny, config={**tiny.config, "n_layer": 1})
    monkeypatch.setitem(models.MODELS, "gpt2-tiny", shallower)
    assert models.count_params(resolve_model("gpt2-tiny")) < GPT2_TINY_PARAMS


def test_another_transformers_version_is_another_cache_file(cache, monkeypatch):
    from importlib import metadata

    from dsx.cache import derived_path

    here = derived_path("counts", "key", [])
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0.1" if name == "transformers" else real(name))
    assert derived_path("counts", "key", []) != here


READ_BY_DSX = ("num_hidden_layers", "hidden_size", "num_attention_heads", "head_dim", "vocab_size", "intermediate_size",
               "n_inner", "embedding_size", "max_position_embeddings", "n_positions", "tie_word_embeddings",
               "num_hidden_groups", "inner_group_num", "n_layer", "n_embd")
"""Config names dsx's modules read (dsx.models.ResolvedModel, dsx.flops, dsx.pipeline, dsx.sparse.planning)."""


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_a_cached_resolution_reads_as_the_real_config(cache, name):
    real = resolve_model(name)
    models.resolve_model_cached(name)
    snapshot = models.resolve_model_cached(name)
    assert isinstance(snapshot.hf_config, models.ConfigSnapshot)
    assert snapshot.describe() == real.describe()
    as_json = json.loads(json.dumps(real.hf_config.to_dict(), default=str))  # what the cache keys are made of
    assert snapshot.hf_config.to_dict() == as_json
    absent = object()
    for key in READ_BY_DSX:
        assert getattr(snapshot.hf_config, key, absent) == getattr(real.hf_config, key, absent), key


def test_a_model_built_from_a_cached_resolution_is_the_real_one(cache):
    models.resolve_model_cached("gpt2-tiny", {"n_layer": 1})
    snapshot = models.resolve_model_cached("gpt2-tiny", {"n_layer": 1})
    forget_this_process()
    assert models.count_params(snapshot) == models.count_params(resolve_model("gpt2-tiny", {"n_layer": 1}))
    assert type(models.config_of(snapshot)).__name__ == "GPT2Config"


def test_a_request_that_fails_fails_as_before_and_is_not_cached(cache):
    with pytest.raises(models.ModelError, match="n_layerz"):
        models.resolve_model_cached("gpt2-tiny", {"n_layerz": 1})
    with pytest.raises(models.ModelError, match="unknown model 'gpt2-tinyy'"):
        models.resolve_model_cached("gpt2-tinyy")
    assert not cache.exists() or not list(cache.glob("resolved-*"))


LIGHT = """
import sys
from dsx.cli import cli
try:
    cli.main(args={args!r}, prog_name="dsx", standalone_mode=True)
except SystemExit:
    pass
print("HEAVY:" + ",".join(sorted(m for m in ("torch", "transformers", "deepspeed") if m in sys.modules)))
"""


@pytest.mark.slow  # three subprocesses of a few seconds
def test_dsx_estimate_prints_the_same_estimate_from_the_cache_without_torch(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    args = ["estimate", "--model", "gpt2", "--zero", "3", "--micro-batch", "4"]
    argv = [sys.executable, "-c", LIGHT.format(args=args)]
    first = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    second = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert first.stdout.splitlines()[-1] == "HEAVY:torch,transformers", first.stderr
    assert second.stdout.splitlines()[-1] == "HEAVY:", second.stderr
    assert second.stdout.replace("HEAVY:", "") == first.stdout.replace("HEAVY:torch,transformers", "")
    assert "GPU memory fits: yes" in first.stdout
    assert len(list((tmp_path / "dsx" / "models").glob("*.json"))) == 5
