"""Shared building blocks for the DeepSpeed section models.

Every section model derives from `Section`: unknown keys are errors (DeepSpeed silently drops them in its
dict-read sections), field docstrings become descriptions in `dsx schema` (dsx.schema.docs), and scalar types are strict where
DeepSpeed's lax parsing hides mistakes (the string "false" is truthy to DeepSpeed's dict readers).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

__all__ = ["Section", "Bool", "Int", "Float", "version_gate", "AUTO"]

AUTO = "auto"


def _integral_float_to_int(value: Any) -> Any:
    """DeepSpeed accepts integral floats such as 5e8 for int fields; keep that, and emit them as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Bool = Annotated[bool, Strict()]
"""true/false only: no "false" strings, no 0/1."""

Int = Annotated[int, Strict(), BeforeValidator(_integral_float_to_int)]
"""An integer; 5e8 is accepted (and emitted as 500000000), 5.5 and "5" are not."""

Float = Annotated[float, Strict()]
"""A number (ints allowed), never a string or a bool."""


def version_gate(*, added_in: str | None = None, removed_in: str | None = None, instead: str | None = None) -> dict:
    """Field metadata read by the linter and `dsx schema`: the DeepSpeed versions that know this key.

    `removed_in`: first version that rejects or no longer has the key; `instead` names the replacement.
    `added_in`: first version that has the key (older versions ignore or reject it).
    """
    gate: dict[str, str] = {}
    if added_in:
        gate["dsx_added_in"] = added_in
    if removed_in:
        gate["dsx_removed_in"] = removed_in
    if instead:
        gate["dsx_instead"] = instead
    return gate


class Section(BaseModel):
    """Base of every DeepSpeed config section model."""

    # Field docstrings are not read at import (pydantic's use_attribute_docstrings costs ~0.25 s of cold start);
    # dsx.schema.docs attaches them when `dsx schema` needs descriptions. defer_build: validators are built on
    # first use, once for the whole config, not once per section class.
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        defer_build=True,
        validate_default=False,
        protected_namespaces=(),
    )


__all__ += ["Field"]
