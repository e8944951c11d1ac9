"""`lint(config)`: every problem in a DeepSpeed config, not just the first.

Order of work: duplicate keys from the loader; "auto" placeholders; keys the target DeepSpeed version does not
have; the section models (unknown keys, types, in-section rules); then cross-section rules. Each pass removes
what it reported so the next one does not report it again.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from typing import Iterator

from pydantic import ValidationError

from dsx.lint import autos
from dsx.lint.context import LintContext
from dsx.lint.findings import Finding, join
from dsx.lint.inert_rules import makes_inside_moot
from dsx.lint.paths import accepts, gate, keys_of, models_in, resolve
from dsx.lint.rules import RULES
from dsx.safe_io import non_finite_paths
from dsx.schema.config import SECTIONS, TopLevelConfig, section_adapter, top_level_keys
from dsx.versions import Version

# Sections DeepSpeed validates with pydantic (unknown keys rejected); everything else is read with dict.get
# (unknown keys silently ignored), and `pipeline` keeps unknown keys without reading them. (facts §1)
PYDANTIC_SECTIONS = {
    "zero_optimization", "fp16", "bf16", "bfloat16", "comms_logger", "tensorboard", "wandb", "csv_monitor",
    "comet", "compile", "tensor_parallel", "hybrid_engine", "weight_quantization",
}

# Known misnomers whose right name difflib cannot guess.
RENAMES = {
    "max_grad_norm": "gradient_clipping, DeepSpeed's name for the gradient-norm clip",
    "thread_count": "intra_op_parallelism (the docs say thread_count, DeepSpeed reads intra_op_parallelism)",
    "check_overflow": "check_grad_overflow",
    "start_step": "start_profile_step",
    "end_step": "end_profile_step",
    "cpu_offload_params": "offload_param: {\"device\": \"cpu\"}",
}


def regime(parts: list[str]) -> str:
    """How DeepSpeed treats an unknown key at this key path: 'rejects' (pydantic section), 'ignores' (dict.get
    reader), 'keeps' (pipeline: kept, never read) or 'constructor' (optimizer/scheduler params: passed as keyword
    arguments, so deepspeed.initialize fails)."""
    if len(parts) < 2:
        return "ignores"  # the top level is read with dict.get
    if len(parts) == 3 and parts[0] in ("optimizer", "scheduler") and parts[1] == "params":
        return "constructor"  # params become constructor keyword arguments
    top = parts[0]
    if top in PYDANTIC_SECTIONS or parts[:2] == ["timers", "throughput"]:
        return "rejects"
    if top == "pipeline":
        return "keeps"
    return "ignores"


def _walk(node: dict, path: str = "") -> Iterator[tuple[dict, str, str]]:
    """(parent dict, key, dotted path) for every key, parents before children; safe against removal."""
    for key in list(node):
        here = join(path, key)
        yield node, key, here
        if isinstance(node.get(key), dict):
            yield from _walk(node[key], here)


def _split(path: str) -> list[str]:
    return path.split(".") if path else []


# ---------------------------------------------------------------- "auto"


def check_autos(data: dict, ctx: LintContext) -> list[Finding]:
    findings = []
    for parent, key, path in list(_walk(data)):
        if key not in parent or parent[key] != "auto":
            continue
        ctx.autos.add(path)
        if path in autos.HF_FILLED:
            if ctx.hf:
                ctx.filled_by_hf.add(path)
            else:
                findings.append(Finding(
                    path, "error", "auto-unfilled",
                    f'"auto" is filled only by the transformers Trainer / accelerate; passed to DeepSpeed directly '
                    f"it {autos.HF_FILLED[path]}",
                    "set a value, or lint with --hf if this config goes through the Trainer/accelerate",
                ))
            del parent[key]
            continue
        _, info = resolve(_split(path))
        if info is None or accepts(info, "auto"):
            continue  # unknown keys are reported by the model pass; some keys legitimately take "auto"
        effect = ("silently drops it and uses the default" if regime(_split(path)) == "rejects"
                  else "passes the string on and fails later, or misreads it")
        findings.append(Finding(
            path, "error", "auto-unfilled",
            f'"auto" here is filled by nothing (not by the Trainer or accelerate either); DeepSpeed {effect}',
            "set a value",
        ))
        del parent[key]
    return findings


# ---------------------------------------------------------------- versions


def check_versions(data: dict, ctx: LintContext) -> list[Finding]:
    from dsx.schema.optimizer import REMOVED_OPTIMIZERS, optimizer_kind

    findings = []
    for parent, key, path in list(_walk(data)):
        if key not in parent:
            continue
        _, info = resolve(_split(path))
        meta = gate(info)
        removed, added = meta.get("dsx_removed_in"), meta.get("dsx_added_in")
        if removed and ctx.target >= Version(removed):
            findings.append(Finding(
                path, "error", "removed-feature",
                f"'{key}' was removed in DeepSpeed {Version(removed).parts[0]}.{Version(removed).parts[1]}; "
                f"DeepSpeed {ctx.target} does not support it",
                f"use {meta['dsx_instead']}" if meta.get("dsx_instead") else "remove it",
            ))
            del parent[key]
        elif added and ctx.target < Version(added):
            findings.append(Finding(
                path, "error", "not-in-target",
                f"'{key}' is new in DeepSpeed {added}; DeepSpeed {ctx.target} does not know it",
                "remove it, or target a newer DeepSpeed with --target-deepspeed",
            ))
            del parent[key]
    passes = data.get("compile", {}).get("passes") if isinstance(data.get("compile"), dict) else None
    if isinstance(passes, list):
        from dsx.schema.compile import PASS_ADDED_IN

        for name in passes:
            if isinstance(name, str) and name in PASS_ADDED_IN and ctx.target < Version(PASS_ADDED_IN[name]):
                findings.append(Finding(
                    "compile.passes", "error", "not-in-target",
                    f"compile pass '{name}' is new in DeepSpeed {PASS_ADDED_IN[name]}; "
                    f"DeepSpeed {ctx.target} rejects it",
                    "remove it, or target a newer DeepSpeed with --target-deepspeed",
                ))
    optimizer = data.get("optimizer")
    if isinstance(optimizer, dict) and isinstance(optimizer.get("type"), str) and not ctx.target.is_legacy:
        kind = optimizer_kind(optimizer["type"])
        if kind in REMOVED_OPTIMIZERS:
            findings.append(Finding(
                "optimizer.type", "error", "removed-feature",
                f"'{optimizer['type']}' was removed in DeepSpeed 0.19: DeepSpeed {ctx.target} accepts the config "
                f"and then fails in deepspeed.initialize()",
                f"use {REMOVED_OPTIMIZERS[kind]['dsx_instead']} (or target DeepSpeed 0.18.9 for the 1-bit optimizers)",
            ))
    return findings


# ---------------------------------------------------------------- section models


def _raw_path(data, loc: tuple) -> list[str]:
    """Map a pydantic error location onto the raw JSON keys (list indices written as key[i])."""
    node, parts = data, []
    for i, item in enumerate(loc):
        if isinstance(node, dict) and isinstance(item, str) and item in node:
            node = node[item]
            parts.append(item)
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
            if parts:
                parts[-1] = f"{parts[-1]}[{item}]"
        elif isinstance(item, str) and isinstance(node, dict) and i == len(loc) - 1:
            parts.append(item)  # the key itself is what is missing or unknown
        # anything else is a union branch or model name pydantic inserted: not a key
    return parts


def _suggest(key: str, parent_path: str, data: dict) -> str | None:
    from dsx.schema.optimizer import KNOWN_WRONG_PARAMS

    if parent_path == "optimizer.params" and key in KNOWN_WRONG_PARAMS:
        return KNOWN_WRONG_PARAMS[key]
    if key in RENAMES:
        return f"use {RENAMES[key]}"
    if "." in key and not parent_path:
        head, _, rest = key.partition(".")
        return f"nest it: {{\"{head}\": {{\"{rest}\": ...}}}} (only accelerate expands dotted keys)"
    if parent_path:
        candidates = keys_of(models_in(resolve(_split(parent_path))[1].annotation))  # type: ignore[union-attr]
    else:
        candidates = top_level_keys()
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "remove it (`dsx schema` lists the keys of every section)"


def _optimizer_is_muon(data: dict, parts: list[str]) -> bool:
    optimizer = data.get("optimizer")
    return (parts[0] == "optimizer" and isinstance(optimizer, dict)
            and str(optimizer.get("type", "")).lower() == "muon")


def _translate(err: dict, data: dict) -> Finding:
    kind, loc = err["type"], err["loc"]
    parts = _raw_path(data, loc)
    path = ".".join(parts)
    value = err.get("input")
    key = parts[-1].split("[")[0] if parts else ""
    parent = ".".join(parts[:-1])
    if kind == "extra_forbidden":
        how = {"rejects": "DeepSpeed rejects the config",
               "ignores": "DeepSpeed silently ignores it",
               "keeps": "DeepSpeed keeps it and never reads it",
               "constructor": "DeepSpeed accepts the config, then deepspeed.initialize() fails when it passes "
                              "the key to the constructor"}[regime(parts)]
        if regime(parts) == "constructor" and _optimizer_is_muon(data, parts):
            how = "DeepSpeed's Muon silently ignores params it does not know"
        if value == "auto" and regime(parts) == "rejects":
            how = 'DeepSpeed drops keys set to "auto" before checking names, so it would not notice'
        try:
            fix = _suggest(key, parent, data)
        except AttributeError:
            fix = None
        return Finding(path, "error", "unknown-key", f"unknown key '{key}': {how}", fix)
    if kind == "missing":
        return Finding(path, "error", "missing-key", f"required key '{key}' is missing", f"add '{key}'")
    if kind == "bool_type":
        if isinstance(value, str):
            truthy = " (DeepSpeed reads any non-empty string as true)" if regime(parts) != "rejects" else ""
            fix = f"write {value.strip().lower()} without quotes" if value.strip().lower() in ("true", "false") \
                else "write true or false"
            return Finding(path, "error", "string-for-bool",
                           f'expected true or false, got the string "{value}"{truthy}', fix)
        return Finding(path, "error", "wrong-type", f"expected true or false, got {value!r}", "write true or false")
    if kind in ("int_type", "float_type", "int_from_float") and isinstance(value, str):
        return Finding(path, "error", "string-for-number", f'expected a number, got the string "{value}"',
                       "write the number without quotes")
    if kind in ("value_error", "assertion_error"):
        message = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return Finding(path, "error", "invalid-value", message)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return Finding(path, "error", "unknown-type", err["msg"])
    return Finding(path, "error", "invalid-value", f"{err['msg']} (got {value!r})")


def _model_errors(data: dict) -> list[dict]:
    """pydantic errors for the top-level keys and each section used (sections validated on their own, so only
    the sections present are ever built)."""
    errors: list[dict] = []
    try:
        TopLevelConfig.model_validate({k: v for k, v in data.items() if k not in SECTIONS})
    except ValidationError as exc:
        errors += exc.errors()
    for key in data:
        if key in SECTIONS:
            try:
                section_adapter(key, data[key]).validate_python(data[key])
            except ValidationError as exc:
                errors += [{**err, "loc": (key, *err["loc"])} for err in exc.errors()]
    return errors


# The activation-checkpointing model's checks, which only deepspeed.checkpointing.configure() makes.
CONFIGURE_ASSERTS = "contiguous_memory_optimization requires"


def check_models(data: dict, ctx: LintContext) -> list[Finding]:
    findings: list[Finding] = []
    seen: set[str] = set()
    for err in _model_errors(data):
        finding = _translate(err, data)
        if finding.code == "missing-key" and finding.path in ctx.autos:
            continue  # it held "auto": reported already, or the Trainer/accelerate fills it
        if finding.path == "activation_checkpointing" and finding.message.startswith(CONFIGURE_ASSERTS):
            continue  # configure() asserts it, and its arguments can supply it: inert_rules gives the severity
        if finding.path in seen:  # one finding per key: union branches each report the same input
            continue
        seen.add(finding.path)
        findings.append(finding)
    return findings


# ---------------------------------------------------------------- entry point


def lint(data: dict, *, target: Version, world_size: int | None = None, hf: bool = False,
         duplicate_keys: list[str] | tuple = (), model_params: int | None = None) -> list[Finding]:
    """All findings for one parsed config (for a model of `model_params` parameters, when known)."""

    ctx = LintContext(target=target, world_size=world_size, hf=hf, model_params=model_params)
    work = copy.deepcopy(data)
    findings = [
        Finding(path, "error", "duplicate-key",
                "key appears more than once: DeepSpeed's loader rejects the file (plain json keeps the last)",
                "keep one")
        for path in duplicate_keys
    ]
    findings += [  # the loader's finding, like duplicate keys (dsx.safe_io.non_finite_paths)
        Finding(path, "error", "non-finite-number",
                "not a JSON number (Infinity/NaN): strict parsers and editors reject the file, and DeepSpeed's "
                "loader reads a float no training step can use", "write a finite number")
        for path in non_finite_paths(data)
    ]
    findings += check_autos(work, ctx)
    findings += check_versions(work, ctx)
    findings += check_models(work, ctx)
    for rule in RULES:
        findings += list(rule(work, ctx))
    return fold_moot(findings, ctx)


def fold_moot(findings: list[Finding], ctx: LintContext) -> list[Finding]:
    """One finding for a block nothing reads in this context: what is wrong inside it is named there, not repeated
    (fixing it would change nothing; removing the block fixes all)."""
    blocks = [f for f in findings if makes_inside_moot(f, ctx)]
    inside = {b.path: [f for f in findings if f not in blocks and f.path.startswith(b.path + ".")] for b in blocks}
    moot = {id(f) for fs in inside.values() for f in fs}
    out = []
    for f in findings:
        if id(f) in moot:
            continue
        if inside.get(f.path) and f in blocks:
            paths = ", ".join(dict.fromkeys(x.path.removeprefix(f.path + ".") for x in inside[f.path]))
            f = dataclasses.replace(f, message=f"{f.message}; so what is wrong inside it is moot ({paths})")
        out.append(f)
    return out
