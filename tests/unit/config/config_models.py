"""Every pydantic model a pipeline, judge or policy spec can hold: what the config-wide tests walk."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

from grm.config import MODELS


def inner_models(ann: Any) -> list[type[BaseModel]]:
    """The models inside an annotation (unions and ``Annotated`` variants included)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in typing.get_args(ann) for m in inner_models(a)]


def reachable_models() -> list[type[BaseModel]]:
    """Every model the three specs can hold, at any depth."""
    seen: list[type[BaseModel]] = []
    stack = list(MODELS.values())
    while stack:
        m = stack.pop()
        if m not in seen:
            seen.append(m)
            stack += [x for f in m.model_fields.values() for x in inner_models(f.annotation)]
    return seen
