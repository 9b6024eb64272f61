"""Typed, strict configs and the YAML loading machinery.

``load(path, overrides)`` detects the kind of file (pipeline, judge, policy) from its keys,
validates it and returns the pydantic model; every user error is a ``ConfigError`` whose message
names the file, line and field.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from grm.config.judge import JudgeSpec
from grm.config.loading import ConfigError, Located, apply_overrides, load_yaml, validate
from grm.config.paths import resolve_judge, resolve_path
from grm.config.pipeline import PipelineSpec
from grm.config.policy import PolicySpec

Kind = Literal["pipeline", "judge", "policy"]
MODELS: dict[str, type[BaseModel]] = {"pipeline": PipelineSpec, "judge": JudgeSpec, "policy": PolicySpec}


def detect_kind(data: dict) -> Kind:
    if "pools" in data or "algorithm" in data or "judges" in data:
        return "pipeline"
    if any(k in data for k in ("mode", "template", "parser", "rule", "sampling")):
        return "judge"
    return "policy"


def load(path: str | Path, overrides: Iterable[str] = (), kind: Kind | None = None) -> BaseModel:
    """Load, override and validate a config file; raises ConfigError on any user error."""
    located = load_yaml(path)
    kind = kind or detect_kind(located.data)
    model = MODELS[kind]
    apply_overrides(located, overrides, model)
    return validate(model, located)


def load_judge(ref: str | Path, base_dir: Path | None = None, overrides: Iterable[str] = ()) -> JudgeSpec:
    """Load a judge spec by path or ``builtin:NAME``."""
    return load(_judge_path(ref, base_dir, overrides), overrides, kind="judge")  # type: ignore[return-value]


def _judge_path(ref: str | Path, base_dir: Path | None, overrides: Iterable[str]) -> Path:
    try:
        return resolve_judge(str(ref), base_dir or Path.cwd(), overrides)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None


def load_policy(ref: str | Path, base_dir: Path | None = None, overrides: Iterable[str] = ()) -> PolicySpec:
    return load(_ref(ref, base_dir, "policy"), overrides, kind="policy")  # type: ignore[return-value]


def _ref(ref: str | Path, base_dir: Path | None, kind: str) -> Path:
    try:
        return resolve_path(str(ref), base_dir or Path.cwd(), kind)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None


def validate_tree(path: str | Path, overrides: Iterable[str] = ()) -> list[tuple[Path, BaseModel]]:
    """Validate a file and every spec it references (a pipeline's policy and judges)."""
    from grm.config.resolve import load_pipeline

    path = _ref(str(path), None, "pipelines") if str(path).startswith("builtin:") else Path(path)
    if detect_kind(load_yaml(path).data) != "pipeline":
        return [(path, load(path, overrides))]
    p = load_pipeline(path, overrides)
    return [
        (path, p.spec),
        (_ref(p.spec.policy.spec, path.parent, "policy"), p.policy),
        *((j.path, j.spec) for j in p.judges),
        *((f, spec) for spec, f in p.heldout),
    ]


__all__ = [
    "ConfigError",
    "JudgeSpec",
    "Located",
    "PipelineSpec",
    "PolicySpec",
    "apply_overrides",
    "detect_kind",
    "load",
    "load_judge",
    "load_policy",
    "load_yaml",
    "validate",
    "validate_tree",
]
