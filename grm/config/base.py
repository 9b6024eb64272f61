"""Shared pydantic base and field helpers for every grm config model."""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from grm.config.paths import resolve_path
from grm.config.template_size import template_size_problem
from grm.jsonl import surrogate_at

MAX_INT = 2**63 - 1
"""Largest integer any config field holds: torch, numpy and C take 64-bit integers. Fields that size
work (tokens, counts, replicas) have their own, lower bounds."""
MAX_FLOAT = 1e12
"""Largest magnitude of any config float. Weights, coefficients and score ranges far above it only
overflow (a weight of 1e308 times a reward of 2 is inf)."""
MAX_TOKENS = 1 << 20
"""Tokens one generation may ask for, and a response may keep: above every context window in use."""
MAX_SECONDS = 1e6
"""Seconds a timeout or wait may last (11.6 days). Python's clocks (``time.sleep``, ``Event.wait``)
overflow past about 9.2e9 s, which a larger deadline multiplied by retries or samples reaches."""
Seconds = Annotated[float, Field(le=MAX_SECONDS)]


def _temperature(t: float) -> float:
    if 0 < t < 0.01:  # logits / temperature: 1e-300 turns every logit into inf, the softmax into NaN
        raise ValueError(f"temperature {t:g}: 0 (greedy) or at least 0.01")
    return t


Temperature = Annotated[float, Field(ge=0, le=100), AfterValidator(_temperature)]
"""A sampling temperature: 0 is greedy decoding."""


def by_type(tags: Sequence[str], default: str | None = None) -> Discriminator:
    """The discriminator of a union of specs chosen by their ``type`` key (``default`` when absent).
    A function rather than ``Field(discriminator="type")``, which forbids validators on ``type``:
    ``Strict`` checks every field."""

    def tag(v: Any) -> str | None:
        t = v.get("type", default) if isinstance(v, dict) else getattr(v, "type", default)
        return t if isinstance(t, str) else None

    return Discriminator(tag, custom_error_type="invalid_type", custom_error_message=f"type must be one of: {', '.join(tags)}")


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _bool_as_number(raw: bool) -> str:
    return f"expected a number, found a boolean ({str(raw).lower()})"


def _scalars(ann: Any) -> set[Any]:
    """The scalar types among int, float and bool that annotation ``ann`` holds, at any depth."""
    if ann in (int, float, bool):
        return {ann}
    return set().union(*(_scalars(a) for a in typing.get_args(ann)))


def _mistyped(raw: Any, out: Any) -> str | None:
    """What is wrong with validating ``raw`` into ``out`` that pydantic's lax mode lets through: a
    boolean read as a number (``group_size: true`` is 1), a number read as a boolean, a number
    outside ``MAX_INT``/``MAX_FLOAT``. Nested models check their own fields."""
    if isinstance(out, BaseModel):
        return None
    if isinstance(raw, bool) and isinstance(out, (int, float)) and not isinstance(out, bool):
        return _bool_as_number(raw)
    if isinstance(out, bool) and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return f"expected true or false, found the number {_short(raw)}"
    if isinstance(out, int) and not isinstance(out, bool) and abs(out) > MAX_INT:
        return f"integer {_short(out)} is too large (at most {MAX_INT} in size)"
    if isinstance(out, float) and math.isfinite(out) and abs(out) > MAX_FLOAT:
        return f"number {out:g} is too large (at most {MAX_FLOAT:g} in size)"
    if isinstance(out, dict) and isinstance(raw, dict):
        return next((p for k, v in out.items() if k in raw and (p := _mistyped(raw[k], v))), None)
    if isinstance(out, (list, tuple)) and isinstance(raw, (list, tuple)) and len(raw) == len(out):
        return next((p for r, v in zip(raw, out, strict=True) if (p := _mistyped(r, v))), None)
    return None


def _lone_surrogate(out: Any) -> str | None:
    """What is wrong with a validated value holding a surrogate (``grm.jsonl.surrogate_at``); a
    nested model's fields check their own."""
    found = None if isinstance(out, BaseModel) else surrogate_at(out, pairs_ok=False)
    return None if found is None else found[1]


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, docstrings describe fields, a float is
    a finite number (``.nan`` or ``.inf`` in a YAML is refused: a NaN tolerance or weight would
    quietly turn every score into the same number), a number is never a boolean nor a boolean a
    number, no number is beyond ``MAX_INT``/``MAX_FLOAT`` (``_mistyped``), and no text holds a lone
    surrogate (``_lone_surrogate``): every field, in lists and mappings too, so a field added later
    is covered without a word, whichever way the data came (a YAML file, an override, a recorded
    spec read back)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="wrap")
    @classmethod
    def _numbers_are_numbers(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name in cls.model_fields:
            # before the field's own checks, which would read false as 0 and say "at least 1"
            kinds = _scalars(cls.model_fields[info.field_name].annotation)
            if kinds & {int, float} and bool not in kinds:
                raise ValueError(_bool_as_number(value))
        out = handler(value)
        problem = _mistyped(value, out) or _lone_surrogate(out)
        if problem is not None:
            raise ValueError(problem)
        return out


def check_file(value: str | None, info: ValidationInfo, kind: str) -> str | None:
    """Field validator body: the referenced file must exist (relative to the YAML or builtin:)."""
    if value is None:
        return value
    base = (info.context or {}).get("base_dir")
    if base is None:
        return value
    try:
        path = resolve_path(value, Path(base), kind)
    except FileNotFoundError as e:
        raise ValueError(str(e)) from None
    if kind == "prompts" and (problem := template_size_problem(path)) is not None:
        raise ValueError(problem)
    return value


def base_dir(info: ValidationInfo) -> Path | None:
    ctx: dict[str, Any] = info.context or {}
    return Path(ctx["base_dir"]) if ctx.get("base_dir") else None


def field_errors(e: ValidationError) -> str:
    """A pydantic error on one line: ``field: what is wrong (got VALUE)`` per problem, ``; ``-joined."""
    out = []
    for err in e.errors():
        field = ".".join(str(p) for p in err["loc"])
        got = f" (got {err['input']!r:.60})" if "input" in err and err["type"] != "value_error" else ""
        out.append(f"{field + ': ' if field else ''}{err['msg'].removeprefix('Value error, ')}{got}")
    return "; ".join(out)
