"""Shared pydantic base and field helpers for every grm config model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo

from grm.config.paths import resolve_path


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, docstrings describe fields, and a float
    is a finite number (``.nan`` or ``.inf`` in a YAML is refused: a NaN tolerance or weight would
    quietly turn every score into the same number)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True, allow_inf_nan=False)


def check_file(value: str | None, info: ValidationInfo, kind: str) -> str | None:
    """Field validator body: the referenced file must exist (relative to the YAML or builtin:)."""
    if value is None:
        return value
    base = (info.context or {}).get("base_dir")
    if base is None:
        return value
    try:
        resolve_path(value, Path(base), kind)
    except FileNotFoundError as e:
        raise ValueError(str(e)) from None
    return value


def base_dir(info: ValidationInfo) -> Path | None:
    ctx: dict[str, Any] = info.context or {}
    return Path(ctx["base_dir"]) if ctx.get("base_dir") else None
