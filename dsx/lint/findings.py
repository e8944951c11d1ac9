"""One finding = one mistake in a config: where, how bad, what is wrong, how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    path: str
    """Dotted key path, e.g. zero_optimization.offload_param.device ("" for the whole file)."""
    severity: Severity
    code: str
    """Stable identifier of the rule, e.g. unknown-key, auto-unfilled, stage3-only."""
    message: str
    fix: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def render(self, source: str | None = None) -> str:
        where = f"{source}: " if source else ""
        key = self.path or "<config>"
        text = f"{where}{self.severity}: {key}: {self.message} [{self.code}]"
        return f"{text}\n    fix: {self.fix}" if self.fix else text


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)
