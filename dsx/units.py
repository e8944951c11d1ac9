"""Units and their text: byte sizes read from flags and printed in tables and summaries."""

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
    if size < 1:
        raise ValueError(f"{text!r} must be at least 1 byte")
    return int(size)


def format_bytes(n: float | None) -> str:
    """'-', '512 B', '1.5 KiB', '61.7 GiB': a byte count for a human."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
