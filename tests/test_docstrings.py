"""Every field of every DeepSpeed section model has a docstring saying what it does; `dsx schema` shows them."""

from dsx.schema.base import Section
from dsx.schema.config import full_model
from dsx.schema.docs import _all_models, field_docstring


def test_every_field_of_every_section_has_a_docstring():
    full_model()  # imports every section module
    missing = [f"{model.__module__}.{model.__name__}.{name}"
               for model in _all_models(Section) if model.__module__.startswith("dsx.")
               for name, info in model.model_fields.items() if not (field_docstring(model, name) or info.description)]
    assert missing == []


def test_docstrings_reach_the_json_schema():
    from dsx.json_schema import build_schema
    from dsx.versions import Version

    zero = build_schema(Version("0.19.8"))["$defs"]["ZeroConfig"]["properties"]
    assert zero["stage3_max_live_parameters"]["description"] == field_docstring(
        __import__("dsx.schema.zero", fromlist=["ZeroConfig"]).ZeroConfig, "max_live_parameters")
