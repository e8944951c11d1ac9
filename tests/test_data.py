"""What a run trains on (dsx.data): the learnable default, the same batches whatever the split, the user's tokens
and every way a --data can be refused."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from dsx.data import DataError
from dsx.data.batches import Batches, sample_indices, window_dataset
from dsx.data.files import inspect
from dsx.data.spec import DataSpec, data_env, parse_data, spec_from_env
from dsx.data.synthetic import ALPHABET, ENTROPY_RATE, MarkovSource
from dsx.models import resolve_model

GPT2 = resolve_model("gpt2-tiny")  # vocab 1000, seq 64


def global_batch_of(step: int, micro: int, accum: int, replicas: int, spec=DataSpec(), resolved=GPT2) -> torch.Tensor:
    """Every sample of one step as the replicas' Batches make them, sorted by content (the order is the split's)."""
    rows = [b["input_ids"] for d in range(replicas)
            for b in Batches(spec, resolved, micro, accum, d, replicas).step(step)]
    stacked = torch.cat(rows)
    return stacked[np.lexsort(stacked.numpy().T[::-1])]


# ------------------------------------------------------------------------------------------------ the synthetic source

def test_a_synthetic_sample_depends_only_on_its_seed_and_index():
    source = MarkovSource(1000, 1234)
    late_first = [source.sample(i, 64) for i in (7, 3)]
    assert torch.equal(late_first[0], MarkovSource(1000, 1234).sample(7, 64))
    assert torch.equal(late_first[1], source.sample(3, 64))
    assert not torch.equal(source.sample(3, 64), MarkovSource(1000, 99).sample(3, 64))


def test_the_markov_source_uses_64_ids_of_the_vocabulary_and_four_successors_each():
    source = MarkovSource(50257, 1234)
    samples = [source.sample(i, 512).tolist() for i in range(20)]
    ids = {i for sample in samples for i in sample}
    assert len(ids) == ALPHABET and max(ids) < 50257
    successors: dict[int, set[int]] = {}
    for sample in samples:
        for a, b in zip(sample[:-1], sample[1:]):
            successors.setdefault(a, set()).add(b)
    assert {len(s) for s in successors.values()} == {4}
    assert ENTROPY_RATE == pytest.approx(1.1369, abs=1e-4) and ENTROPY_RATE < math.log(ALPHABET)


# ------------------------------------------------------------------------------------------------ the same batches

@pytest.mark.parametrize("micro, accum, replicas", [(8, 1, 1), (2, 4, 1), (2, 2, 2), (1, 1, 8), (4, 1, 2)])
def test_a_step_trains_the_same_samples_whatever_the_split(micro, accum, replicas):
    for step in (0, 3):
        assert torch.equal(global_batch_of(step, micro, accum, replicas), global_batch_of(step, 8, 1, 1))


def test_each_replica_takes_a_disjoint_shard_of_the_step():
    shards = [set(i for j in range(2) for i in sample_indices(5, d, j, 3, 2, 4)) for d in range(4)]
    assert all(not (a & b) for i, a in enumerate(shards) for b in shards[i + 1:])
    assert set().union(*shards) == set(range(5 * 24, 6 * 24))


def test_masked_lm_batches_mask_the_same_positions_whatever_the_split():
    bert = resolve_model("bert-tiny")
    one = [b for b in Batches(DataSpec(), bert, 4, 1, 0, 1).step(2)][0]
    two = [b for d in range(2) for b in Batches(DataSpec(), bert, 1, 2, d, 2).step(2)]
    assert torch.equal(one["labels"], torch.cat([b["labels"] for b in two]))
    assert torch.equal(one["input_ids"], torch.cat([b["input_ids"] for b in two]))
    assert int((one["labels"] != -100).sum(dim=1).min()) == round(0.15 * bert.seq_len)


def test_random_data_is_uniform_over_the_vocabulary():
    ids = global_batch_of(0, 8, 1, 1, DataSpec(source="random"))
    assert len(ids.unique()) > 300  # 512 draws of 1000 ids: ~400 distinct


# ------------------------------------------------------------------------------------------------ --data PATH

def write_tokens(path, ids, dtype) -> str:
    np.asarray(ids, dtype=dtype).tofile(path)
    return str(path)


def test_a_uint16_token_file_is_read_as_windows_in_order(tmp_path):
    path = write_tokens(tmp_path / "train.bin", np.arange(64 * 10) % 1000, np.uint16)
    spec, notes = inspect(parse_data(path), 1000, 64, 8, 8)
    assert (spec.source, spec.dtype, spec.tokens, notes) == ("tokens", "uint16", 640, [])
    batch = Batches(spec, GPT2, 2, 1, 1, 2).step(1)[0]["input_ids"]  # step 1 is samples 4-7; replica 1 takes 6, 7
    assert torch.equal(batch[0], torch.arange(6 * 64, 7 * 64))


def test_a_run_longer_than_the_file_starts_it_again_and_says_so(tmp_path):
    path = write_tokens(tmp_path / "t.bin", np.arange(64 * 3), np.uint16)
    spec, notes = inspect(parse_data(path), 1000, 64, 2, 10)
    assert notes == [f"--data {path}: the run reads 10 windows of 64 tokens and the data holds 3: it starts again "
                     "from the first after window 3"]
    assert torch.equal(Batches(spec, GPT2, 1, 1, 0, 1).step(3)[0]["input_ids"][0], torch.arange(64))


def test_a_vocabulary_past_16_bits_reads_uint32_by_default(tmp_path):
    llama = resolve_model("llama-tiny", {"vocab_size": 128256})
    path = write_tokens(tmp_path / "t.bin", [128000, 5] * 64, np.uint32)
    spec, _ = inspect(parse_data(path), llama.token_vocab_size, 64, 1, 1)
    assert spec.dtype == "uint32"


@pytest.mark.parametrize("case, message", [
    ("missing", "--data {path}: no such file or directory (a token file, a datasets folder, or one of synthetic, "
                "random)"),
    ("past-vocab", "--data {path}: token id 1,000 at position 70 is outside the model's vocabulary of 1,000"),
    ("too-few", "--data {path}: 100 tokens make 1 window(s) of 64; one global batch needs 2 (micro-batch x "
                "grad-accum x data-parallel replicas)"),
    ("uint32-as-uint16", "--data {path}: every second uint16 is 0, as when uint32 ids are read as uint16; pass "
                         "--data-dtype uint32"),
    ("odd-size", "--data {path}: 1,281 bytes is not a whole number of uint16 ids; is it uint32? (--data-dtype "
                 "uint32)"),
    ("uint16-as-uint32", "--data {path}: token id 327,681 at position 0 is outside the model's vocabulary of 1,000; "
                         "if the file holds uint16 ids, pass --data-dtype uint16"),
    ("empty", "--data {path}: the file is empty"),
    ("fifo", "--data {path}: is a FIFO, not a token file"),
])
def test_bad_token_data_is_refused_in_one_line(tmp_path, case, message):
    path = tmp_path / "t.bin"
    dtype = None
    if case == "past-vocab":
        write_tokens(path, [1] * 70 + [1000] + [1] * 100, np.uint16)
    elif case == "too-few":
        write_tokens(path, [1] * 100, np.uint16)
    elif case == "uint32-as-uint16":
        write_tokens(path, [5] * 200, np.uint32)
    elif case == "odd-size":
        path.write_bytes(b"\x01" * 1281)
    elif case == "uint16-as-uint32":
        write_tokens(path, [1, 5] * 256, np.uint16)
        dtype = "uint32"
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "fifo":
        os.mkfifo(path)
    with pytest.raises(DataError) as caught:
        inspect(parse_data(str(path), dtype), 1000, 64, 2, 4)
    assert str(caught.value) == message.format(path=path)


def test_a_dataset_saved_to_disk_is_its_input_ids_end_to_end(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [list(range(i, i + 50)) for i in range(0, 1000, 50)]
    datasets.Dataset.from_dict({"input_ids": rows, "text": ["x"] * 20}).save_to_disk(str(tmp_path / "ds"))
    spec, _ = inspect(parse_data(str(tmp_path / "ds")), 1000, 64, 4, 8)
    assert (spec.source, spec.tokens) == ("dataset", 1000)
    batch = Batches(spec, GPT2, 4, 1, 0, 1).step(1)[0]["input_ids"]  # samples 4..7: across the rows' boundaries
    assert torch.equal(batch.flatten(), torch.arange(4 * 64, 8 * 64))


@pytest.mark.parametrize("layout, message", [
    ("dict", "--data {path}: a DatasetDict (train); give one split's folder, e.g. --data {path}/train"),
    ("no-ids", "--data {path}: no input_ids column (columns: text); tokenize it first"),
    ("plain-folder", "--data {path}: a folder that is not a datasets dataset (no dataset_info.json: save it with "
                     "Dataset.save_to_disk), nor a token file"),
])
def test_a_folder_that_is_not_one_tokenized_split_is_refused(tmp_path, layout, message):
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "ds"
    if layout == "dict":
        datasets.DatasetDict({"train": datasets.Dataset.from_dict({"input_ids": [[1, 2]]})}).save_to_disk(str(path))
    elif layout == "no-ids":
        datasets.Dataset.from_dict({"text": ["a", "b"]}).save_to_disk(str(path))
    else:
        path.mkdir()
    with pytest.raises(DataError) as caught:
        inspect(parse_data(str(path)), 1000, 64, 1, 1)
    assert str(caught.value) == message.format(path=path)


def test_a_launched_script_gets_the_data_back_from_its_environment(tmp_path):
    path = write_tokens(tmp_path / "t.bin", np.arange(640) % 1000, np.uint16)
    spec, _ = inspect(parse_data(path, "uint16"), None, None)
    again = spec_from_env(data_env(spec))
    assert (again.source, again.path, again.dtype) == ("tokens", path, "uint16")
    windows = window_dataset(again, 1000, 64, 10)
    assert len(windows) == 10 and torch.equal(windows[2]["input_ids"], torch.arange(128, 192))


def test_run_refuses_bad_data_before_launching_anything(tmp_path):
    (tmp_path / "t.bin").write_bytes(np.full(50, 3, dtype=np.uint16).tobytes())
    out = subprocess.run([sys.executable, "-m", "dsx", "run", "--model", "gpt2-tiny", "--data", "t.bin", "--dry-run"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (f"Error: --data {tmp_path / 't.bin'}: 50 tokens make 0 window(s) "
                                                   "of 64; one global batch needs 1 (micro-batch x grad-accum x "
                                                   "data-parallel replicas)")


def test_launch_hands_a_checked_token_file_to_the_script_in_its_environment(tmp_path):
    path = write_tokens(tmp_path / "t.bin", np.arange(640) % 1000, np.uint16)
    config = tmp_path / "ds.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}')
    out = subprocess.run([sys.executable, "-m", "dsx", "launch", "--dry-run", "--config", str(config), "--data", path,
                          "--", "python", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert {f"  DSX_DATA={path}", "  DSX_DATA_DTYPE=uint16", "  DSX_DATA_SEED=1234"} <= set(out.stdout.splitlines())
    bad = subprocess.run([sys.executable, "-m", "dsx", "launch", "--config", str(config), "--data", "missing.bin",
                          "--", "python", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and not (tmp_path / "results").exists()
    assert bad.stderr.strip().splitlines()[-1] == ("Error: --data missing.bin: no such file or directory (a token "
                                                   "file, a datasets folder, or one of synthetic, random)")
