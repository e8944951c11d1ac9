"""JSON Schema of the whole DeepSpeed config for one target version, for editors and CI checks.

Built from the same section models `dsx validate` uses; keys the target version does not have are left out,
and with `hf=True` the string "auto" is allowed exactly where the transformers Trainer / accelerate fill it.

Building it needs every section model (~0.5 s), so the schemas of the versions dsx knows are shipped in
dsx/schema/json/ (a test fails when they drift from the models; `python -m dsx.json_schema` rewrites them).
"""

from __future__ import annotations

import json
from pathlib import Path

from dsx.lint.autos import HF_FILLED
from dsx.versions import KNOWN_VERSIONS, Version

SHIPPED = Path(__file__).parent / "schema" / "json"


def shipped_path(target: Version) -> Path:
    return SHIPPED / f"deepspeed-{target}.schema.json"


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


def _describe(schema: dict, root) -> None:
    """Field docstrings -> "description" of each property (read from the source, see dsx.schema.docs)."""
    from dsx.schema.base import Section
    from dsx.schema.docs import _all_models, field_docstring

    by_name = {m.__name__: m for m in _all_models(Section)}
    targets = [(schema, root)] + [(d, by_name.get(name)) for name, d in schema.get("$defs", {}).items()]
    for node, model in targets:
        if model is None:
            continue
        for name, info in model.model_fields.items():
            prop = node.get("properties", {}).get(info.alias or name)
            doc = field_docstring(model, name) or info.description
            if prop is not None and doc:
                prop["description"] = doc


def config_schema(target: Version, hf: bool = False) -> dict:
    """The schema for `target`: the shipped one for a known version, else built from the models."""
    path = shipped_path(target)
    schema = json.loads(path.read_text()) if path.exists() else build_schema(target)
    if hf:
        for key in HF_FILLED:
            _allow_auto(schema, key)
    schema["title"] = f"DeepSpeed {target} config (dsx{', Hugging Face auto values' if hf else ''})"
    return schema


def build_schema(target: Version) -> dict:
    """Build the schema from the section models (slow: imports and builds every section)."""
    from dsx.schema.config import full_model

    model = full_model()
    schema = model.model_json_schema(by_alias=True, mode="validation")
    _describe(schema, model)
    _prune(schema, schema, target)
    for definition in schema.get("$defs", {}).values():
        _prune(schema, definition, target)
    _standard_bounds(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"DeepSpeed {target} config (dsx)"
    return schema


def write_shipped() -> list[Path]:
    SHIPPED.mkdir(parents=True, exist_ok=True)
    written = []
    for version in KNOWN_VERSIONS:
        path = shipped_path(Version(version))
        path.write_text(json.dumps(build_schema(Version(version)), indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_shipped():
        print(f"wrote {written_path}")
