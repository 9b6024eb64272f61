"""Every number in every config model is a number: never a boolean (``group_size: true`` read as 1),
never beyond its bound (``10**30`` steps), never NaN or infinite; every boolean is a boolean.

The models are enumerated from ``grm.config.MODELS``, so a field added later is checked without
being named here.
"""

import math
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import annotated_types
import pytest
from pydantic import BaseModel, ValidationError

from grm.config import ConfigError, load
from grm.config.base import MAX_FLOAT, MAX_INT
from tests.unit.config.config_models import reachable_models

ROOT = Path(__file__).resolve().parents[3]


def _leaves(ann: Any) -> set[type]:
    if ann in (int, float, bool):
        return {ann}
    return set().union(*(_leaves(a) for a in typing.get_args(ann)))


def _leaves_with_str(ann: Any) -> set[type]:
    if ann is str:
        return {str}
    return _leaves(ann) | set().union(*(_leaves_with_str(a) for a in typing.get_args(ann)))


def _placed(ann: Any, leaf: Any) -> Any:
    """A value of type ``ann`` with ``leaf`` where its first number goes (other numbers 5.0), or
    None when ``ann`` holds none: lists, tuples and mappings of numbers included."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if ann in (int, float):
        return leaf
    if origin is Annotated:
        return _placed(args[0], leaf)
    if origin in (typing.Union, types.UnionType):
        return next((v for a in args if (v := _placed(a, leaf)) is not None), None)
    if origin is list:
        inner = _placed(args[0], leaf)
        return None if inner is None else [inner]
    if origin is tuple:
        first = _placed(args[0], leaf)
        return None if first is None else [first] + [5.0] * (len(args) - 1)
    if origin is dict:
        inner = _placed(args[1], leaf)
        return None if inner is None else {"k": inner}
    return None


FIELDS = [(m, name, f.annotation) for m in reachable_models() for name, f in m.model_fields.items()]
NUMBERS = [(m, n, a) for m, n, a in FIELDS if _leaves(a) & {int, float} and bool not in _leaves(a)]
INTS = [(m, n, a) for m, n, a in NUMBERS if int in _leaves(a)]
FLOATS = [(m, n, a) for m, n, a in NUMBERS if float in _leaves(a)]
BOOLS = [(m, n, a) for m, n, a in FIELDS if _leaves(a) == {bool}]
_id = [f"{m.__name__}.{n}" for m, n, _ in NUMBERS]


def _errors_at(model: type[BaseModel], name: str, value: Any) -> list[str]:
    """Messages of the errors validating ``{name: value}`` reports at the field ``name`` (the other
    required fields are missing, which pydantic reports apart)."""
    with pytest.raises(ValidationError) as e:
        model.model_validate({name: value})
    return [err["msg"] for err in e.value.errors() if err["loc"][:1] == (name,)]


def test_the_enumeration_reaches_every_kind_of_field():
    assert len(reachable_models()) >= 40 and len(INTS) >= 60 and len(FLOATS) >= 40 and len(BOOLS) >= 15
    names = {f"{m.__name__}.{n}" for m, n, _ in NUMBERS}
    assert {
        "GRPOSpec.group_size",
        "PPOSpec.critic_lr",
        "PoolSpec.resources",
        "ExampleOutput.expect",
        "RegexParser.range",
    } <= names


@pytest.mark.parametrize(("model", "name", "ann"), NUMBERS, ids=_id)
def test_a_number_field_refuses_a_boolean(model, name, ann):
    for flag in (True, False):
        msgs = _errors_at(model, name, _placed(ann, flag))
        assert any("found a boolean" in m for m in msgs), msgs


@pytest.mark.parametrize(("model", "name", "ann"), NUMBERS, ids=_id)
def test_a_number_field_refuses_huge_values(model, name, ann):
    assert _errors_at(model, name, _placed(ann, 10**30)), "10**30 accepted"
    assert _errors_at(model, name, _placed(ann, -(10**30))), "-10**30 accepted"


@pytest.mark.parametrize(("model", "name", "ann"), FLOATS, ids=[f"{m.__name__}.{n}" for m, n, _ in FLOATS])
def test_a_float_field_refuses_non_finite_values(model, name, ann):
    spelled = ["nan", "inf"] if str not in _leaves_with_str(ann) else []  # a str field may hold the word
    for x in [math.nan, math.inf, -math.inf, *spelled]:
        assert _errors_at(model, name, _placed(ann, x)), f"{x!r} accepted"


@pytest.mark.parametrize(("model", "name", "ann"), INTS, ids=[f"{m.__name__}.{n}" for m, n, _ in INTS])
def test_an_integer_field_declares_its_upper_bound(model, name, ann):
    """Sizes, counts and steps each say how large they may be (``Field(le=...)``), below ``MAX_INT``."""
    meta = model.model_fields[name].metadata
    bounds = [b.le for b in meta if isinstance(b, annotated_types.Le)] + [
        b.lt - 1 for b in meta if isinstance(b, annotated_types.Lt)
    ]
    assert bounds and min(bounds) <= MAX_INT


@pytest.mark.parametrize(("model", "name", "ann"), BOOLS, ids=[f"{m.__name__}.{n}" for m, n, _ in BOOLS])
def test_a_boolean_field_refuses_a_number(model, name, ann):
    for x in (0, 1, 1.0):
        msgs = _errors_at(model, name, x)
        assert any("expected true or false" in m for m in msgs), msgs


PIPE = """\
name: t
pools: {train: {cpus: 1}, judge: {cpus: 1%s}}
policy: {spec: builtin:smollm2-135m-instruct, pool: train}
judges:
  - {spec: builtin:numeric-answer}
data: {prompts: builtin:arith-prompts}
algorithm: {type: grpo, group_size: 4, prompts_per_step: 4}
train: {micro_batch_size: 4%s}
"""


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    return f


def test_the_backstop_bounds_every_number(tmp_path):
    """Beyond the per-field bounds: no integer outside 64 bits, no float above MAX_FLOAT anywhere,
    in mappings too (a pool's custom resources)."""
    f = _write(tmp_path, PIPE % (f", resources: {{x: {MAX_FLOAT * 10:g}}}", ""))
    with pytest.raises(ConfigError, match=rf"{f}:2: pools.judge.resources: number 1e\+13 is too large"):
        load(f)
    f = _write(tmp_path, PIPE % ("", ""))
    with pytest.raises(ConfigError, match=r"override 'judges.0.weight=1e300': judges.0.weight: number 1e\+300 is too large"):
        load(f, ["judges.0.weight=1e300"])
    with pytest.raises(ConfigError, match=r"override 'seed=-9223372036854775809': seed: .*greater than or equal to 0"):
        load(f, [f"seed={-(2**63) - 1}"])


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("mini_batches: true", "algorithm.mini_batches: expected a number, found a boolean (true)"),
        ("mini_batches: 1000000000000000000000000000000", "algorithm.mini_batches: Input should be less than or equal to 65536"),
        ("dual_clip: true", "algorithm.dual_clip: expected a number, found a boolean (true)"),
        ("epochs: false", "algorithm.epochs: expected a number, found a boolean (false)"),
        ("dynamic_filtering: 1", "algorithm.dynamic_filtering: expected true or false, found the number 1"),
        ("kl: {coef: .nan}", "algorithm.kl.coef: Input should be a finite number"),
        ("kl: {coef: true}", "algorithm.kl.coef: expected a number, found a boolean (true)"),
        ("epochs: 1.5", "algorithm.epochs: Input should be a valid integer"),
    ],
)
def test_yaml_errors_name_file_line_and_field(tmp_path, setting, needle):
    f = _write(tmp_path, PIPE.replace("prompts_per_step: 4}", f"prompts_per_step: 4, {setting}}}") % ("", ""))
    with pytest.raises(ConfigError) as e:
        load(f)
    assert str(e.value).startswith(f"{f}:7: algorithm."), str(e.value)
    assert needle is None or needle in str(e.value), str(e.value)


def test_temperatures_are_zero_or_usable(tmp_path):
    f = _write(tmp_path, "name: x\nmodel: m\ngeneration: {temperature: 1.0e-300}\n")
    with pytest.raises(ConfigError, match=rf"{f}:3: generation.temperature: temperature 1e-300: 0 \(greedy\) or at least 0.01"):
        load(f)
    assert load(f, ["generation.temperature=0"]).generation.temperature == 0
    assert load(f, ["generation.temperature=0.01"]).generation.temperature == 0.01


@pytest.mark.parametrize("url", ["http://u:secret@127.0.0.1:8080/v1", "https://token@api.example.com/v1"])
def test_server_urls_carry_no_credentials_into_the_recorded_config(tmp_path, url):
    # a spec is written into every run's config.resolved.yaml, which grm view shows
    f = tmp_path / "j.yaml"
    f.write_text(f"name: j\nmodel: m\ntemplate: t.j2\nparser: {{range: [1, 10]}}\nengine: {{type: openai, base_url: '{url}'}}\n")
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}{{ prompt }} {{ response }}")
    with pytest.raises(ConfigError, match="engine.base_url: .*carries credentials") as e:
        load(f)
    assert "secret" not in str(e.value) and "token@" not in str(e.value)  # the message never repeats the secret
    clean = url.split("//")[0] + "//127.0.0.1/v1"
    f.write_text(
        f"name: j\nmodel: m\ntemplate: t.j2\nparser: {{range: [1, 10]}}\nengine: {{type: openai, base_url: '{clean}'}}\n"
    )
    assert load(f)
