"""`--data`: which source a run trains on, as data the rank plan and the row carry. Imports neither torch nor numpy.

`parse_data` turns the flag into a DataSpec (a word, or a path that must exist); dsx.data.files.inspect then opens
a path's tokens and checks them against the model and the run (vocabulary, dtype, enough tokens) before anything
is launched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

DATA_WORDS = ("synthetic", "random")
"""The built-in sources: `synthetic` (learnable, the default) and `random` (uniform ids)."""
TOKEN_DTYPES = ("uint16", "uint32")
DEFAULT_SEED = 1234
DATASET_MARKERS = ("dataset_info.json", "state.json")
"""Files `datasets`' save_to_disk writes into a dataset's folder."""
DATASET_DICT_MARKER = "dataset_dict.json"


class DataError(ValueError):
    """A --data request that cannot be honoured; the message is one line that says what to change."""


class DataSpec(BaseModel):
    """The source of a run's tokens (dsx.data): the rank plan carries it to the ranks, the row records it."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["synthetic", "random", "tokens", "dataset"] = "synthetic"
    path: str | None = None
    """tokens: the binary file; dataset: the folder save_to_disk wrote (absolute)."""
    dtype: Literal["uint16", "uint32"] | None = None
    """tokens: the ids' width in the file."""
    seed: int = DEFAULT_SEED
    """synthetic/random: the seed of the source (and of BERT-style masking for every source)."""
    tokens: int | None = None
    """tokens/dataset: how many token ids the file or dataset holds (set by dsx.data.files.inspect)."""

    @property
    def label(self) -> str:
        """A few words for tables: synthetic, random, or the file's name."""
        if self.source in DATA_WORDS:
            return self.source if self.seed == DEFAULT_SEED else f"{self.source}:{self.seed}"
        return Path(self.path or "?").name

    def trial_part(self) -> dict | None:
        """What the data adds to a trial key: nothing for the default (keys of earlier rows stay as they were)."""
        if self.source == "synthetic" and self.seed == DEFAULT_SEED:
            return None
        return self.model_dump(exclude={"tokens"})


def parse_data(text: str | None, dtype: str | None = None, seed: int | None = None) -> DataSpec:
    """--data WORD|PATH (and --data-dtype, --data-seed) as a DataSpec; DataError with the fix for anything else.
    A path must name a regular file or a datasets folder; its contents are checked by dsx.data.files.inspect."""
    seed = DEFAULT_SEED if seed is None else seed
    word = (text or "synthetic").strip()
    if word in DATA_WORDS:
        if dtype is not None:
            raise DataError(f"--data-dtype {dtype} is for a token file; --data {word} makes its own tokens")
        return DataSpec(source=word, seed=seed)
    if dtype is not None and dtype not in TOKEN_DTYPES:
        raise DataError(f"--data-dtype {dtype}: a token file holds {' or '.join(TOKEN_DTYPES)} ids")
    path = Path(word).expanduser()
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"--data {word}: no such file or directory (a token file, a datasets folder, or one of "
                        f"{', '.join(DATA_WORDS)})") from None
    except OSError as exc:
        raise DataError(f"--data {word}: cannot read: {exc.strerror or exc}") from None
    import stat

    if stat.S_ISDIR(mode):
        if (path / DATASET_DICT_MARKER).exists():
            splits = sorted(p.name for p in path.iterdir() if p.is_dir())
            raise DataError(f"--data {word}: a DatasetDict ({', '.join(splits) or 'no splits'}); give one split's "
                            f"folder, e.g. --data {path / (splits[0] if splits else 'train')}")
        if not any((path / marker).exists() for marker in DATASET_MARKERS):
            raise DataError(f"--data {word}: a folder that is not a datasets dataset (no {DATASET_MARKERS[0]}: "
                            "save it with Dataset.save_to_disk), nor a token file")
        if dtype is not None:
            raise DataError(f"--data-dtype {dtype} is for a token file; a datasets dataset says its own dtype")
        from dsx.safe_io import UnreadableFile, check_regular

        for marker in DATASET_MARKERS:  # datasets reads them whole: a FIFO would hang it
            try:
                if os.path.lexists(path / marker):
                    check_regular(path / marker, "a datasets metadata file")
            except UnreadableFile as exc:
                raise DataError(f"--data {exc}") from None
        return DataSpec(source="dataset", path=str(path.resolve()), seed=seed)
    from dsx.safe_io import not_a_regular_file

    if kind := not_a_regular_file(mode):
        raise DataError(f"--data {word}: is {kind}, not a token file")
    return DataSpec(source="tokens", path=str(path.resolve()), dtype=dtype, seed=seed)


ENV = {"path": "DSX_DATA", "dtype": "DSX_DATA_DTYPE", "seed": "DSX_DATA_SEED"}
"""What `dsx launch --data` puts in every rank's environment, for the script to read back (spec_from_env)."""


def data_env(spec: DataSpec) -> dict[str, str]:
    """The environment that hands `spec` to a launched script."""
    env = {ENV["path"]: spec.path if spec.path else spec.source, ENV["seed"]: str(spec.seed)}
    if spec.dtype:
        env[ENV["dtype"]] = spec.dtype
    return env


def spec_from_env(env=None) -> DataSpec | None:
    """The DataSpec `dsx launch --data` handed this process, or None without one (in a script: `from dsx.data.spec
    import spec_from_env`, then dsx.data.batches.WindowDataset)."""
    env = os.environ if env is None else env
    if not env.get(ENV["path"]):
        return None
    seed = env.get(ENV["seed"])
    return parse_data(env[ENV["path"]], env.get(ENV["dtype"]), int(seed) if seed else None)
