"""Which DeepSpeed release a config is meant for.

dsx knows the config surface of the 0.18 and 0.19 series (checked against 0.18.9 and 0.19.8). The default
target is the installed DeepSpeed, read from package metadata so that deepspeed itself is never imported.
"""

from __future__ import annotations

import sys
from functools import total_ordering
from pathlib import Path

KNOWN_VERSIONS = ("0.18.9", "0.19.8")
NEWEST_KNOWN = KNOWN_VERSIONS[-1]
REMOVAL_RELEASE = "0.19.0"  # the release that removed the 1-bit optimizers, sparse attention, elasticity, ...


class VersionError(ValueError):
    """A target version dsx cannot check against."""


@total_ordering
class Version:
    """A DeepSpeed release number such as 0.19.8 (local suffixes such as +cu130 are dropped)."""

    def __init__(self, text: str):
        core = str(text).strip().split("+")[0]
        parts = core.split(".")
        try:
            numbers = tuple(int(p) for p in parts[:3])
        except ValueError:
            raise VersionError(f"'{text}' is not a DeepSpeed version (expected something like 0.19.8)") from None
        if not 1 <= len(numbers) <= 3:
            raise VersionError(f"'{text}' is not a DeepSpeed version (expected something like 0.19.8)")
        self.parts = numbers + (0,) * (3 - len(numbers))
        self.text = ".".join(str(p) for p in self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self.parts == other.parts

    def __lt__(self, other: "Version") -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    def __repr__(self) -> str:
        return f"Version('{self.text}')"

    def __str__(self) -> str:
        return self.text

    @property
    def is_legacy(self) -> bool:
        """True for the 0.18 series, which still has the features 0.19 removed."""
        return self < Version(REMOVAL_RELEASE)


def installed_deepspeed() -> str | None:
    """The installed DeepSpeed version, or None; never imports deepspeed.

    Reads the name of DeepSpeed's .dist-info directory on sys.path, the first one found, as importlib.metadata
    would (importing importlib.metadata alone costs ~40 ms of dsx's cold start).
    """
    for entry in sys.path:
        try:
            found = sorted(Path(entry or ".").glob("deepspeed-*.dist-info"))
        except OSError:
            continue
        if found:
            return found[0].name[len("deepspeed-"):-len(".dist-info")]
    return None


def resolve_target(text: str | None = None) -> Version:
    """The version to check against: `text` if given, else the installed DeepSpeed, else the newest known."""
    version = Version(text or installed_deepspeed() or NEWEST_KNOWN)
    if not Version("0.18.0") <= version < Version("0.20.0"):
        known = ", ".join(KNOWN_VERSIONS)
        raise VersionError(
            f"dsx knows the DeepSpeed 0.18 and 0.19 config surface (checked against {known}); "
            f"{version} is outside it: pass --target-deepspeed with one of those"
        )
    return version
