"""Notes on memory: an out-of-memory row says when the GPU was not full but fragmented (torch's own message has the
figures), and a run of one step that its peak lacks the optimizer's states."""

from __future__ import annotations

import json

from conftest import ROOT
from dsx.run import RunRequest
from dsx.run.gather import fragmentation_note, one_step_note


def _liger_llama3b_oom() -> str:
    """The error of a real row: llama-3b with Liger at ZeRO-1 on one H100 (bench/kernels/h100/llama3b.jsonl)."""
    rows = [json.loads(line) for line in (ROOT / "bench/kernels/h100/llama3b.jsonl").read_text().splitlines()]
    return next(row["error"] for row in rows if row["status"] == "oom")


def test_an_oom_with_more_reserved_but_unallocated_than_it_asked_for_names_fragmentation():
    assert fragmentation_note(_liger_llama3b_oom()) == (
        "out of memory with 17.93 GiB reserved by torch's caching allocator but unallocated, more than the 11.97 GiB "
        "it failed to allocate: fragmentation, not a full GPU; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in "
        "dsx's environment (the ranks inherit it) may fit this configuration")


def test_an_oom_on_a_full_gpu_gets_no_such_note():
    full = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 1.10 GiB "
            "is free. Of the allocated memory 76.20 GiB is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch "
            "but unallocated.")
    assert fragmentation_note(full) is None
    assert fragmentation_note("rank 0: RuntimeError: something else") is None


def test_a_run_of_one_step_says_its_memory_peak_lacks_the_optimizer_states():
    adam = {"optimizer": {"type": "AdamW"}}
    note = one_step_note(RunRequest(model="gpt2-tiny", steps=1, warmup=0), adam)
    assert note == ("only one step ran: the optimizer makes its states (Adam: 8 bytes a parameter of the rank's "
                    "partition) in its first step, after that step's forward and backward, so memory.max is below "
                    "what every later step holds (--warmup 1 measures it)")
    assert one_step_note(RunRequest(model="gpt2-tiny", steps=1, warmup=1), adam) is None
    assert one_step_note(RunRequest(model="gpt2-tiny", steps=1, warmup=0), {}) is None
