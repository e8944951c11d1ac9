"""Walk the section models by key path, the way the raw JSON nests: which keys exist where, which accept
"auto", and which carry version metadata. Works on classes only; no config instance is needed."""

from __future__ import annotations

import typing
from functools import lru_cache

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo


def models_in(annotation) -> list[type[BaseModel]]:
    """Section models reachable from a field annotation (through Optional, Union, Annotated, list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        for model in models_in(arg):
            if model not in found:
                found.append(model)
    return found


def field_for(models: list[type[BaseModel]], key: str) -> tuple[type[BaseModel], FieldInfo] | None:
    """The field that JSON key `key` sets in any of `models` (by name or alias)."""
    for model in models:
        for name, info in model.model_fields.items():
            if key == name or key == info.alias:
                return model, info
    return None


def keys_of(models: list[type[BaseModel]]) -> list[str]:
    """All JSON spellings accepted by `models` (field names and aliases)."""
    keys: list[str] = []
    for model in models:
        for name, info in model.model_fields.items():
            for key in (info.alias, name):
                if key and key not in keys:
                    keys.append(key)
    return keys


def resolve(keys: list[str]) -> tuple[list[type[BaseModel]], FieldInfo | None]:
    """Follow a key path from the top of the config: (models that hold the last key, its FieldInfo or None if
    unknown). Only the sections on the path are imported."""
    from dsx.schema.config import TopLevelConfig, root_field

    models: list[type[BaseModel]] = [TopLevelConfig]
    info: FieldInfo | None = None
    for i, key in enumerate(keys):
        if i == 0:
            info = root_field(key)
            if info is None:
                return models, None
        else:
            hit = field_for(models, key)
            if hit is None:
                return models, None
            info = hit[1]
        if i < len(keys) - 1:
            models = models_in(info.annotation)
            if not models:
                return models, None
    return models, info


@lru_cache(maxsize=None)
def _adapter(info_id: int, info: FieldInfo) -> TypeAdapter:
    if not info.metadata:
        return TypeAdapter(info.annotation)
    return TypeAdapter(typing.Annotated.__class_getitem__((info.annotation, *info.metadata)))


def accepts(info: FieldInfo, value) -> bool:
    """Does the field accept this value as it stands (e.g. the string "auto")?"""
    try:
        _adapter(id(info), info).validate_python(value)
        return True
    except ValidationError:
        return False


def gate(info: FieldInfo | None) -> dict:
    extra = info.json_schema_extra if info is not None else None
    return extra if isinstance(extra, dict) else {}
