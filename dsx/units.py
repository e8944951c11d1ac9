"""Units and their text: byte sizes read from flags, and the numbers printed in tables and summaries.

The fmt_* helpers are the cells of `dsx report`'s tables and the figures of `dsx estimate`'s summary: one number
each, '-' where it is unknown (None)."""

from __future__ import annotations

KIB = 1024
MIB = 1024 ** 2
GIB = 1024 ** 3

_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
               "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def parse_size(text: str | int) -> int:
    """'40GiB', '512MiB', '1.5GB', '1000000' -> bytes (KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000).
    ValueError when it is not a size or is below one byte."""
    if isinstance(text, int):
        return text
    clean = str(text).strip().replace(" ", "")
    number = clean.rstrip("KMGTBikmgtb")
    unit = clean[len(number):].lower()
    try:
        size = float(number) * _SIZE_UNITS[unit]
    except (ValueError, KeyError):
        raise ValueError(f"{text!r} is not a size (examples: 40GiB, 512MiB, 1.5GB, 1000000)") from None
    if size != size or size == float("inf"):  # nan, inf, 1e400
        raise ValueError(f"{text!r} is not a finite size")
    if size < 1:
        raise ValueError(f"{text!r} must be at least 1 byte")
    return int(size)


def size_arg(n: int) -> str:
    """Bytes as a --memory-cap style argument parse_size reads back exactly: '2GiB', '512MiB', '1000001'."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def format_bytes(n: float | None) -> str:
    """'-', '512 B', '1.5 KiB', '61.7 GiB': a byte count for a human."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def fmt_gib(n: float | None) -> str:
    """Bytes as GiB with one decimal and thousands separators: '22.7', '1,024.0'."""
    return "-" if n is None else f"{n / GIB:,.1f}"


def gib(n: float) -> str:
    """'129.71 GiB': bytes as GiB with two decimals and the unit (what needs, and what there is, in fit messages)."""
    return f"{n / GIB:.2f} GiB"


def fmt_mib(n: float | None) -> str:
    """Bytes as MiB with one decimal and thousands separators."""
    return "-" if n is None else f"{n / MIB:,.1f}"


def fmt_num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def fmt_tflops(v: float | None) -> str:
    """Three significant figures below 100 (CPU runs are tiny), whole numbers above."""
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def fmt_spread(v: float | None) -> str:
    """A run's step-time spread: '±4%', or '±0.3%' when small."""
    if v is None:
        return "-"
    return f"±{v:.0%}" if v >= 0.1 else f"±{v:.1%}"


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def fmt_ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def fmt_params(n: int | None) -> str:
    """A parameter count: '124M', '1.5B', '999'."""
    if n is None:
        return "-"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)
