"""Field docstrings -> field descriptions, for `dsx schema`.

Every field in dsx/schema has a docstring right below it. pydantic can read those at class creation
(use_attribute_docstrings), but that parses source per class and costs ~0.25 s of every command's start, so
dsx reads them here, once per module, only when a JSON Schema is wanted (dsx.json_schema).
"""

from __future__ import annotations

import ast
import inspect
import sys
from functools import lru_cache

from pydantic import BaseModel


@lru_cache(maxsize=None)
def _module_docs(module_name: str) -> dict[tuple[str, str], str]:
    """(class name, field name) -> docstring for every class in a module."""
    module = sys.modules[module_name]
    tree = ast.parse(inspect.getsource(module))
    docs: dict[tuple[str, str], str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for stmt, following in zip(body, body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[(node.name, stmt.target.id)] = inspect.cleandoc(following.value.value)
    return docs


def _all_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    seen, stack = [], [root]
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen


def field_docstring(model: type[BaseModel], name: str) -> str | None:
    for cls in model.__mro__:
        if issubclass(cls, BaseModel) and cls.__module__.startswith("dsx."):
            doc = _module_docs(cls.__module__).get((cls.__name__, name))
            if doc:
                return doc
    return None
