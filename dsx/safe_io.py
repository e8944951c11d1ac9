"""Reading and writing the files a user names, in bounded time and memory, each failure one sentence.

Every file dsx reads whole (configs, results files, hostfiles) goes through read_bounded: the path is stat'ed before
it is opened (open() of a FIFO waits for a writer, /dev/zero never ends), anything but a regular file is refused,
and so is a file larger than the limit its kind is given. Token files (--data) are memory-mapped, not read whole:
check_regular is all they need. write_text is every -o: a missing folder or a full disk is the user's to fix, not
an internal error.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from pathlib import Path

from dsx.units import GIB, KIB, MIB

MAX_NESTING = 100
"""Containers nested deeper than this are refused: dsx's files nest a few levels, and deeper input would overflow
the recursive parsers (a RecursionError is not a user-facing message)."""


class UnreadableFile(ValueError):
    """A file dsx must not or cannot read; `reason` is missing, special, too-large or os-error."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def not_a_regular_file(mode: int) -> str | None:
    """What a non-regular file is, in words ('a FIFO'); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device",
             stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}
    return next((name for test, name in kinds.items() if test(mode)), "a special file")


def size_text(size: int) -> str:
    """1 MiB, 256 MiB, 2 GiB: the limits as the messages say them."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def check_regular(path: str | os.PathLike, what: str) -> os.stat_result:
    """stat() of a regular file, or UnreadableFile: a FIFO, a device or a folder is refused before it is opened."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UnreadableFile(f"{path}: no such file", "missing") from None
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot read: {exc.strerror or exc}", "os-error") from None
    kind = not_a_regular_file(info.st_mode)
    if kind:
        raise UnreadableFile(f"{path}: is {kind}, not {what}", "special")
    return info


def read_bounded(path: str | os.PathLike, *, limit: int, what: str, why: str = "") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is refused before a byte is read.

    `what` names the file's kind in the refusals ("a config file"), `why` says why the limit is enough.
    """
    too_large = UnreadableFile(f"{path}: larger than {size_text(limit)}, the most dsx reads"
                               + (f"; {why}" if why else ""), "too-large")
    if check_regular(path, what).st_size > limit:
        raise too_large
    try:
        # O_NONBLOCK: if a FIFO replaced the file since stat, opening it must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot read: {exc.strerror or exc}", "os-error") from None
    with os.fdopen(fd, "rb") as file:
        kind = not_a_regular_file(os.fstat(fd).st_mode)
        if kind:
            raise UnreadableFile(f"{path}: is {kind}, not {what}", "special")
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            raise UnreadableFile(f"{path}: cannot read: {exc.strerror or exc}", "os-error") from None
    if len(data) > limit:
        raise too_large
    return data


def check_appendable(path: str | os.PathLike, what: str = "a results file") -> None:
    """A file dsx will append rows to: absent (it will be made) or a regular file; a FIFO would block the write."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot read: {exc.strerror or exc}", "os-error") from None
    kind = not_a_regular_file(info.st_mode)
    if kind:
        raise UnreadableFile(f"{path}: is {kind}, not {what}", "special")


def non_finite_paths(value, path: str = "") -> list[str]:
    """Dotted paths of every Infinity / NaN in parsed JSON (Python's json reads them; JSON has no such numbers)."""
    found, stack = [], [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            found.append(where or "(top level)")
        elif isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))
    return found


class OutputError(ValueError):
    """An -o path that cannot be written: one line for the user."""


def check_output_parent(path: str | os.PathLike, flag: str = "-o") -> None:
    """The folder an output goes into must exist: dsx makes no folders above the one it was asked for."""
    parent = Path(path).parent
    if not parent.exists():
        raise OutputError(f"{flag} {path}: no such directory: {parent}")
    if not parent.is_dir():
        raise OutputError(f"{flag} {path}: {parent} is not a directory")


def write_text(path: str | os.PathLike, text: str, flag: str = "-o") -> None:
    """Write an output file; OutputError names the path and the reason (missing folder, full disk, permission)."""
    check_output_parent(path, flag)
    try:
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError as exc:
        reason = "no space left on the device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise OutputError(f"{flag} {path}: cannot write: {reason}") from None
