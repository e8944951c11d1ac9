"""JSON Schema of the whole DeepSpeed config for one target version, for editors and CI checks.

Built from the same section models `dsx validate` uses; keys the target version does not have are left out,
and with `hf=True` the string "auto" is allowed exactly where the transformers Trainer / accelerate fill it.
"""

from __future__ import annotations

from dsx.lint.autos import HF_FILLED
from dsx.versions import Version


def _deref(schema: dict, node: dict) -> list[dict]:
    """The object schemas `node` may stand for (through $ref, anyOf, oneOf)."""
    if "$ref" in node:
        return _deref(schema, schema["$defs"][node["$ref"].rsplit("/", 1)[-1]])
    found = []
    for key in ("anyOf", "oneOf", "allOf"):
        for option in node.get(key, []):
            found += _deref(schema, option)
    if "properties" in node:
        found.append(node)
    return found


def _prune(schema: dict, node: dict, target: Version) -> None:
    props = node.get("properties", {})
    for key in list(props):
        meta = props[key]
        removed, added = meta.get("dsx_removed_in"), meta.get("dsx_added_in")
        if (removed and target >= Version(removed)) or (added and target < Version(added)):
            del props[key]


def _allow_auto(schema: dict, path: str) -> None:
    nodes = [schema]
    keys = path.split(".")
    for i, key in enumerate(keys):
        holders = [obj for n in nodes for obj in _deref(schema, n) if key in obj.get("properties", {})]
        if i == len(keys) - 1:
            for obj in holders:
                prop = obj["properties"][key]
                if {"const": "auto"} not in prop.get("anyOf", []):
                    obj["properties"][key] = {"anyOf": [prop, {"const": "auto"}],
                                              "description": prop.get("description", "")}
        else:
            nodes = [obj["properties"][key] for obj in holders]


_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}


def _standard_bounds(node) -> None:
    """pydantic writes bounds of Annotated-with-validator ints as ge/gt/le/lt; JSON Schema calls them minimum..."""
    if isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            for short, standard in _BOUNDS.items():
                if short in node:
                    node[standard] = node.pop(short)
        for value in node.values():
            _standard_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _standard_bounds(value)


def config_schema(target: Version, hf: bool = False) -> dict:
    from dsx.schema.config import DeepSpeedConfig

    schema = DeepSpeedConfig.model_json_schema(by_alias=True, mode="validation")
    _prune(schema, schema, target)
    for definition in schema.get("$defs", {}).values():
        _prune(schema, definition, target)
    _standard_bounds(schema)
    if hf:
        for path in HF_FILLED:
            _allow_auto(schema, path)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"DeepSpeed {target} config (dsx{' , Hugging Face auto values' if hf else ''})"
    return schema
