"""The user's own tokens (`--data PATH`): a flat binary file of token ids, or a `datasets` dataset saved to disk.

A binary file is what nanoGPT-style preparation scripts write: the ids one after another, no header, uint16 (GPT-2's
50257 fit) or uint32 (Llama-3's 128256 do not), read through numpy.memmap, so nothing is loaded that the run does
not use. A dataset folder (Dataset.save_to_disk) is read through its Arrow files, memory-mapped, its `input_ids`
rows concatenated in order (pip install datasets). Either way sample i is the i-th window of seq_len tokens
(windows do not overlap); a run that needs more windows than the data has starts again from the first (the row
says so).

`inspect` checks, before anything is launched, what a rank would otherwise trip over mid-run: the dtype, the ids
against the model's vocabulary (every id the run will read), and enough tokens for one global batch. Each failure
is one DataError line.
"""

from __future__ import annotations

from typing import Protocol

from dsx.data.spec import DataError, DataSpec

INSPECT_CHUNK = 1 << 24
"""Ids checked at a time (numpy reads a memory-mapped file in slices of this many)."""
DTYPE_PROBE = 1 << 16
"""Leading ids looked at for the signs of a wrong dtype."""


class TokenStream(Protocol):
    """A flat sequence of token ids, read in slices."""

    tokens: int

    def read(self, start: int, count: int):
        """ids [start, start + count) as an int64 numpy array."""


class BinaryTokens:
    def __init__(self, path: str, dtype: str):
        import numpy as np

        self.data = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
        self.tokens = len(self.data)

    def read(self, start: int, count: int):
        import numpy as np

        return np.asarray(self.data[start:start + count], dtype=np.int64)


class DatasetTokens:
    """The `input_ids` of a saved dataset, row after row: one zero-copy numpy view per Arrow chunk."""

    def __init__(self, path: str):
        import numpy as np

        try:
            import datasets
        except ImportError:
            raise DataError(f"--data {path} is a datasets dataset: reading it needs the datasets package (pip "
                            "install datasets)") from None
        try:
            dataset = datasets.load_from_disk(path)
        except Exception as exc:
            raise DataError(f"--data {path}: datasets cannot load it: {str(exc).splitlines()[0][:200]}") from None
        if not isinstance(dataset, datasets.Dataset):
            raise DataError(f"--data {path}: a {type(dataset).__name__}, not one split; give one split's folder")
        if "input_ids" not in dataset.column_names:
            raise DataError(f"--data {path}: no input_ids column (columns: {', '.join(dataset.column_names)}); "
                            "tokenize it first")
        column = dataset.data.column("input_ids")
        self.chunks = []
        for chunk in column.chunks:
            if not hasattr(chunk, "flatten"):
                raise DataError(f"--data {path}: input_ids holds {chunk.type}, not lists of token ids")
            values = chunk.flatten()
            if values.null_count:
                raise DataError(f"--data {path}: input_ids has missing (null) ids")
            array = values.to_numpy(zero_copy_only=False)
            if array.dtype.kind not in "iu":
                raise DataError(f"--data {path}: input_ids holds {array.dtype} values, not integer token ids")
            self.chunks.append(array)
        self.starts = np.cumsum([0] + [len(c) for c in self.chunks])
        self.tokens = int(self.starts[-1])
        self.dtype = str(self.chunks[0].dtype) if self.chunks else None

    def read(self, start: int, count: int):
        import numpy as np

        pieces, end = [], start + count
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        for i in range(max(first, 0), len(self.chunks)):
            lo, hi = int(self.starts[i]), int(self.starts[i + 1])
            if lo >= end:
                break
            pieces.append(self.chunks[i][max(start, lo) - lo:min(end, hi) - lo])
        return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)


def open_stream(spec: DataSpec) -> TokenStream:
    if spec.source == "tokens":
        return BinaryTokens(spec.path, spec.dtype or "uint16")
    if spec.source == "dataset":
        return DatasetTokens(spec.path)
    raise ValueError(f"{spec.source} is not a file source")


class TokenWindows:
    """Sample i = window i (mod the windows there are) of `length` tokens."""

    def __init__(self, stream: TokenStream):
        self.stream = stream

    def sample(self, index: int, length: int):
        import torch

        windows = self.stream.tokens // length
        start = (index % windows) * length
        return torch.from_numpy(self.stream.read(start, length))


def default_dtype(vocab: int) -> str:
    """uint16 when every id of the vocabulary fits in 16 bits (nanoGPT's choice for GPT-2), else uint32."""
    return "uint16" if vocab <= 1 << 16 else "uint32"


def _check_dtype(spec: DataSpec, path: str) -> None:
    """A file whose size is not whole ids of its dtype, or uint32 ids read as uint16 (every second value 0)."""
    import os

    import numpy as np

    itemsize = np.dtype(spec.dtype).itemsize
    size = os.path.getsize(path)
    if size == 0:
        raise DataError(f"--data {path}: the file is empty")
    if size % itemsize:
        other = "uint16" if spec.dtype == "uint32" else "uint32"
        raise DataError(f"--data {path}: {size:,} bytes is not a whole number of {spec.dtype} ids; is it {other}? "
                        f"(--data-dtype {other})")
    if spec.dtype == "uint16" and size >= 256:
        head = np.memmap(path, dtype="<u2", mode="r")[:DTYPE_PROBE]
        if not head[1::2].any() and head[0::2].any():
            raise DataError(f"--data {path}: every second uint16 is 0, as when uint32 ids are read as uint16; "
                            "pass --data-dtype uint32")


def inspect(spec: DataSpec, vocab: int | None, seq_len: int | None, global_batch: int = 1,
            samples: int = 0) -> tuple[DataSpec, list[str]]:
    """The spec with its dtype and token count filled in, and notes for the row; DataError when the run could not
    train on it: a wrong dtype, too few tokens for one global batch, an id the model's vocabulary does not have
    (every id of the `samples` windows the run reads is checked). `dsx launch` knows no model: vocab and seq_len
    None check the dtype alone."""
    if spec.source not in ("tokens", "dataset"):
        return spec, []
    path = spec.path
    if spec.source == "tokens":
        spec = spec.model_copy(update={"dtype": spec.dtype or (default_dtype(vocab) if vocab else "uint16")})
        _check_dtype(spec, path)
    stream = open_stream(spec)
    spec = spec.model_copy(update={"tokens": stream.tokens})
    if seq_len is None:
        return spec, []
    windows = stream.tokens // seq_len
    if windows < global_batch:
        raise DataError(f"--data {path}: {stream.tokens:,} tokens make {windows:,} window(s) of {seq_len}; one "
                        f"global batch needs {global_batch} (micro-batch x grad-accum x data-parallel replicas)")
    needed = min(samples, windows) * seq_len if vocab is not None else 0
    for start in range(0, needed, INSPECT_CHUNK):
        ids = stream.read(start, min(INSPECT_CHUNK, needed - start))
        if ids.size and (int(ids.max()) >= vocab or int(ids.min()) < 0):
            where = int((ids >= vocab).argmax() if int(ids.max()) >= vocab else (ids < 0).argmax())
            value = int(ids[where])
            hint = ""
            if spec.source == "tokens" and spec.dtype == "uint32" and value >= 1 << 16:
                hint = "; if the file holds uint16 ids, pass --data-dtype uint16"
            raise DataError(f"--data {path}: token id {value:,} at position {start + where:,} is outside the model's "
                            f"vocabulary of {vocab:,}{hint}")
    notes = []
    if samples > windows:
        notes.append(f"--data {path}: the run reads {samples:,} windows of {seq_len} tokens and the data holds "
                     f"{windows:,}: it starts again from the first after window {windows:,}")
    return spec, notes
