"""Every config field a user can write has a description (STYLE 2: its unit and scope).

Descriptions are the attribute docstrings under each field; ``Strict`` sets pydantic's
``use_attribute_docstrings``, so they become ``FieldInfo.description`` and the ``description`` of
each property in the JSON schema, which is what a user's editor shows. The models are found by
walking the pipeline, judge and policy specs (``grm.config.MODELS``), so a field or model added
later is checked without being named here.
"""

import importlib
import inspect
import pkgutil

import pytest

import grm.config
from grm.config import MODELS
from grm.config.base import Strict
from tests.unit.config.config_models import reachable_models


def fields() -> list[tuple[str, str | None]]:
    """(``module.Class.field``, its description) for every field of every reachable model."""
    return [
        (f"{m.__module__}.{m.__qualname__}.{name}", f.description)
        for m in reachable_models()
        for name, f in m.model_fields.items()
    ]


def _described(text: str | None) -> bool:
    # two words at least: a placeholder ("TODO", "x") is not a description
    return text is not None and len(text.split()) >= 2


def test_every_config_field_has_a_description():
    found = fields()
    missing = [name for name, text in found if not _described(text)]
    assert len(found) > 200  # the walk reached the nested models, not just the three roots
    assert not missing, f"{len(missing)} of {len(found)} config fields have no description:\n" + "\n".join(missing)


def test_every_config_model_in_grm_config_is_reached_by_the_walk():
    """A model the walk cannot see (held behind a type it does not look through) would escape the
    check above; only the abstract bases may be unreached."""
    defined = set()
    for info in pkgutil.iter_modules(grm.config.__path__):
        module = importlib.import_module(f"grm.config.{info.name}")
        defined |= {
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, Strict) and obj.__module__ == module.__name__
        }
    unreached = {m.__qualname__ for m in defined - set(reachable_models())}
    assert unreached <= {"Strict", "_AlgorithmCommon"}, unreached


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_the_json_schema_a_user_sees_describes_every_property(kind):
    schema = MODELS[kind].model_json_schema()
    parts = [(kind, schema), *schema.get("$defs", {}).items()]
    props = [(f"{owner}.{name}", p) for owner, part in parts for name, p in part.get("properties", {}).items()]
    missing = [name for name, p in props if not _described(p.get("description"))]
    assert props and not missing, missing


def test_a_field_without_a_docstring_is_reported_by_name():
    """The check can fail: a model with one undocumented field is caught, with its name."""

    class Probe(Strict):
        documented: int = 1
        """Sequences per probe (global)."""
        bare: int = 2

    described = {name: _described(f.description) for name, f in Probe.model_fields.items()}
    assert described == {"documented": True, "bare": False}
