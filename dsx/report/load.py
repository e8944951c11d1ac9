"""Reading result rows for a report: every file's rows normalised to one schema version, and what was left out."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from dsx.results import SCHEMA_VERSION, RunRow, read_rows
from dsx.safe_io import UnreadableFile


class ReportError(Exception):
    """A user mistake or an input with nothing to report: one line for the user, and the exit status."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Loaded:
    """The rows of every results file, normalised (every optional field present), and what was left out."""

    rows: list[dict] = field(default_factory=list)
    files: list[tuple[str, int, int]] = field(default_factory=list)
    """(path, rows used, lines or rows skipped) per file, for the report's "read from" line."""
    warnings: list[str] = field(default_factory=list)


def load(paths: list[str]) -> Loaded:
    """Read every file; rows that are not dsx rows of this schema version are skipped with a warning.

    Rows are validated with dsx.results.RunRow and dumped back to dicts, so a row written before an optional
    field existed reads that field as its default (None, {}) and the table code needs no `.get` chains.
    Raises ReportError (exit 2) for a missing or unreadable file; no usable row at all is the caller's to refuse
    (after it has shown the warnings that say why).
    """
    loaded = Loaded()
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise ReportError(f"{path}: no such file", 2)
        if p.is_dir():
            raise ReportError(f"{path}: is a directory, not a results file", 2)
        if not os.access(p, os.R_OK):
            raise ReportError(f"{path}: cannot be read (permission denied)", 2)
        try:
            raw = read_rows(p)  # bounded: a FIFO, a device, an oversize or too deep file is refused
        except UnreadableFile as exc:
            raise ReportError(str(exc), 2) from None
        skipped = len(raw.skipped)
        if raw.skipped:
            shown = "; ".join(f"line {n}: {why}" for n, why in raw.skipped[:3])
            more = f"; and {len(raw.skipped) - 3} more" if len(raw.skipped) > 3 else ""
            loaded.warnings.append(f"{path}: skipped {len(raw.skipped)} line(s) that are not JSON rows "
                                   f"({shown}{more})")
        versions: dict[object, int] = {}
        invalid: list[str] = []
        used = 0
        for index, data in enumerate(raw, start=1):
            version = data.get("schema_version")
            if version != SCHEMA_VERSION:
                versions[version] = versions.get(version, 0) + 1
                continue
            try:
                row = RunRow.model_validate(data, extra="ignore")  # fields a newer dsx added
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "row"
                invalid.append(f"row {index}: {where}: {first['msg']}")
                continue
            loaded.rows.append(row.model_dump(mode="json"))
            used += 1
        for version, count in versions.items():
            what = ("without a schema_version (not a dsx run row)" if version is None
                    else f"of schema_version {version!r} (this dsx reads {SCHEMA_VERSION})")
            loaded.warnings.append(f"{path}: skipped {count} row(s) {what}")
        if invalid:
            loaded.warnings.append(f"{path}: skipped {len(invalid)} row(s) that are not valid dsx rows "
                                   f"({'; '.join(invalid[:3])})")
        skipped += sum(versions.values()) + len(invalid)
        loaded.files.append((path, used, skipped))
    return loaded


def read_from_line(loaded: Loaded) -> str:
    """Which files were read and how many rows: every report says what it was made from."""
    if len(loaded.files) == 1 and not loaded.files[0][2]:
        return f"Read {len(loaded.rows)} row(s) from {loaded.files[0][0]}."
    parts = [f"{path} ({used} row(s)" + (f", {skipped} skipped" if skipped else "") + ")"
             for path, used, skipped in loaded.files]
    return f"Read {len(loaded.rows)} row(s) from " + ", ".join(parts) + "."
