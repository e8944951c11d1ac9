"""bench/tools/memory_peak.py: the allocation history replayed to its peak, and the blocks alive then named by the
code that allocated them; DSX_MEMORY_HISTORY's switch in the rank."""

from pathlib import Path

from conftest import load_bench_script
from dsx.rank import memory_history
from dsx.rank.protocol import RankReport

memory_peak = load_bench_script("bench/tools/memory_peak.py")

TORCH = {"filename": "/site/torch/nn/functional.py", "name": "linear", "line": 10}
LLAMA = {"filename": "/site/transformers/models/llama/modeling_llama.py", "name": "forward", "line": 42}
STAGE3 = {"filename": "/site/deepspeed/runtime/zero/stage3.py", "name": "_create_fp32_partitions", "line": 7}


def alloc(addr, size, *frames):
    return {"action": "alloc", "addr": addr, "size": size, "frames": list(frames)}


def free(addr, size=0, action="free_completed"):
    return {"action": action, "addr": addr, "size": size}


def test_the_peak_is_the_most_bytes_alive_at_once_and_its_blocks_are_those_alive_then():
    events = [alloc(1, 100, STAGE3), alloc(2, 50, TORCH, LLAMA), free(2), alloc(3, 120, TORCH, LLAMA), free(3),
              alloc(4, 10)]
    peak, at, blocks = memory_peak.peak_blocks(events)
    assert (peak, at, sorted(blocks)) == (220, 3, [1, 3])


def test_a_block_ends_when_its_free_is_requested_as_max_memory_allocated_counts_it():
    events = [alloc(1, 100), free(1, action="free_requested"), alloc(2, 60), free(1), alloc(3, 10)]
    peak, at, blocks = memory_peak.peak_blocks(events)
    assert (peak, at, sorted(blocks)) == (100, 0, [1])
    assert memory_peak.peak_blocks([alloc(1, 100), free(1), alloc(2, 60)])[0] == 100  # a completion alone ends it


def test_a_free_of_a_block_allocated_before_the_history_began_is_skipped():
    peak, at, blocks = memory_peak.peak_blocks([free(9, 500), alloc(1, 100)])
    assert (peak, at, list(blocks)) == (100, 1, [1])


def test_an_address_allocated_again_ends_its_earlier_block_whose_free_was_not_recorded():
    peak, _, blocks = memory_peak.peak_blocks([alloc(1, 100), alloc(1, 60), alloc(2, 50)])
    assert (peak, {addr: event["size"] for addr, event in blocks.items()}) == (110, {1: 60, 2: 50})


def test_a_site_names_the_innermost_deepspeed_or_transformers_frames_not_torch_s():
    assert memory_peak.site([TORCH, LLAMA, STAGE3]) == \
        "modeling_llama.py:forward:42 < stage3.py:_create_fp32_partitions:7"
    assert memory_peak.site([TORCH], depth=1) == "functional.py:linear:10"
    assert memory_peak.site([]) == "(no stack)"


def test_live_blocks_are_summed_by_site_the_most_bytes_first():
    events = [alloc(1, 100, STAGE3), alloc(2, 150, TORCH, LLAMA), alloc(3, 30, LLAMA)]
    _, _, blocks = memory_peak.peak_blocks(events)
    assert memory_peak.by_site(blocks, depth=1) == [("modeling_llama.py:forward:42", 180, 2),
                                                    ("stage3.py:_create_fp32_partitions:7", 100, 1)]


def test_the_history_is_recorded_only_when_asked_and_only_on_cuda_ranks(monkeypatch, tmp_path):
    report = RankReport(rank=0)
    monkeypatch.delenv(memory_history.ENV, raising=False)
    assert memory_history.start(None, True, report, "run1") is None and report.notes == []
    monkeypatch.setenv(memory_history.ENV, str(tmp_path))
    assert memory_history.start(None, False, report, "run1") is None
    assert report.notes == ["DSX_MEMORY_HISTORY ignored: CPU ranks have no CUDA allocator to record"]


def test_each_run_dumps_its_history_into_a_folder_of_its_own(monkeypatch, tmp_path):
    recorded = {}

    class Memory:
        def _record_memory_history(self, **kwargs):
            recorded.update(kwargs)

        def _dump_snapshot(self, path):
            Path(path).write_bytes(b"history")

    class Torch:
        class cuda:
            memory = Memory()

    report = RankReport(rank=1)
    monkeypatch.setenv(memory_history.ENV, str(tmp_path))
    where = memory_history.start(Torch, True, report, "0f21d560")
    memory_history.dump(Torch, where, 1, report)
    assert (tmp_path / "0f21d560" / "rank1.pickle").read_bytes() == b"history"
    assert recorded == {"context": "alloc", "stacks": "python", "max_entries": memory_history.MAX_ENTRIES}
    assert report.notes[-1] == f"DSX_MEMORY_HISTORY: allocation history in {tmp_path / '0f21d560' / 'rank1.pickle'}"
