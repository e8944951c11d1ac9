"""One finding = one mistake in a config: where, how bad, what is wrong, how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning"]
"""How bad a finding is follows from what DeepSpeed (and, under --hf, the transformers Trainer) does with the config
in the context linted (target version, world size, --hf), never from the key alone:

* error: whatever the script and its arguments, the run is refused (DeepSpeedConfig, the Trainer's checks,
  deepspeed.initialize, the first step), stops early, or runs without something the config turns on (offload,
  ZeRO, a precision, a stage-3 feature, a checkpointing constraint the block's user relies on).
* warning: it goes wrong only for some scripts or arguments dsx cannot see (the Trainer's batch arguments, a
  script's deepspeed.checkpointing.configure() arguments), or the key changes nothing that was asked for (an ignored
  tuning knob, a dead key, a block nothing applies), or a default differs between DeepSpeed versions.
"""


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
