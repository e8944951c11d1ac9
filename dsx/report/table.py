"""The one table shape every report part builds and every renderer (rich, markdown) draws."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    """Formatted table data, independent of how it is rendered.

    `rows` holds lists of cells (strings, one per column) and group header lines (a plain string)."""

    title: str
    columns: list[str]
    rows: list[list[str] | str] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)
