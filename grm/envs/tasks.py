"""The tasks an environment offers: data rows of a named split, for an evaluation (``grm eval
--policy P --env E --split S``) to run episodes on.

An environment that offers tasks defines ``task_rows(split, n, start) -> list[dict]`` and, to name
and size its splits, ``SPLITS`` (split name -> a sized collection of its tasks), as a class
attribute or in its module (``grm.envs.calc`` has both). A split is named loosely: case, ``_``,
``-`` and spaces are ignored, so ``heldout``, ``held-out`` and ``held_out`` name the same split.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sized
from typing import Any

from grm.envs.base import EnvError


def _attr(cls: type, name: str) -> Any:
    """``cls.name``, else the same name in the class's module, else None."""
    found = getattr(cls, name, None)
    if found is None:
        found = getattr(sys.modules.get(cls.__module__), name, None)
    return found


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c not in "_- ")


def env_splits(cls: type) -> dict[str, int] | None:
    """Split name -> number of tasks, from the environment's ``SPLITS``; None when it has none."""
    splits = _attr(cls, "SPLITS")
    if not isinstance(splits, Mapping):
        return None
    return {str(k): len(v) if isinstance(v, Sized) else -1 for k, v in splits.items()}


def resolve_split(cls: type, spec: str, split: str) -> str:
    """The environment's own name of ``split`` (matched loosely); an ``EnvError`` naming the splits
    it has when none matches. Without ``SPLITS`` the name is passed on as given."""
    splits = env_splits(cls)
    if splits is None:
        return split
    if split in splits:
        return split
    near = [k for k in splits if _norm(k) == _norm(split)]
    if len(near) == 1:
        return near[0]
    have = ", ".join(f"{k} ({n} tasks)" if n >= 0 else k for k, n in splits.items())
    raise EnvError(f"env {spec!r} has no split {split!r} (its splits: {have})")


def task_rows(cls: type, spec: str, split: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` task rows of ``split`` from its ``start``-th task on (fewer when the split has fewer),
    from the environment's ``task_rows``; every failure is an ``EnvError`` naming the spec."""
    make: Callable[..., Any] | None = _attr(cls, "task_rows")
    if not callable(make):
        raise EnvError(
            f"env {spec!r}: {cls.__name__} offers no tasks (define task_rows(split, n, start) on the class or in "
            f"its module, and SPLITS to name the splits)"
        )
    name = resolve_split(cls, spec, split)
    size = (env_splits(cls) or {}).get(name, -1)
    if size >= 0:
        if start >= size:
            raise EnvError(f"env {spec!r}: split {name!r} has {size} tasks; none from task {start} on")
        n = min(n, size - start)
    try:
        rows = make(name, n, start)
    except Exception as e:  # noqa: BLE001 - the environment's code: its failure is named, never a traceback
        raise EnvError(f"env {spec!r}: task_rows({name!r}, {n}, {start}) raised {type(e).__name__}: {str(e)[:300]}") from e
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise EnvError(f"env {spec!r}: task_rows({name!r}, ...) must return a list of mappings (data rows)")
    if not rows:
        raise EnvError(f"env {spec!r}: split {name!r} gave no tasks")
    return [dict(r) for r in rows]
