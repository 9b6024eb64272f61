"""The ``constraints`` cell of a data row (a list of ``{type, ...args}``, or that list as JSON text in
a CSV cell), checked against the constraint types of ``grm.data.constraints`` before a prompt, an
evaluation item or a verifier uses it."""

from __future__ import annotations

from typing import Any

from grm.data.checklists import list_cell, short
from grm.data.constraints import ARGS
from grm.data.errors import DataError

_SHAPE = 'a non-empty list of constraints, each {"type": ..., <its arguments>} (e.g. {"type": "max_words", "n": 40})'


def read_constraints(value: Any, where: str) -> list[dict[str, Any]]:
    """``value`` (a list, or that list as JSON text in a CSV cell) checked against ``ARGS``; a
    ``DataError`` starting with ``where`` (e.g. ``"data.jsonl row 3: column 'constraints'"``) says
    what is wrong. A type may occur once per prompt: per-type results are keyed by type."""
    out = [_constraint(c, f"{where} item {k}") for k, c in enumerate(list_cell(value, where, _SHAPE))]
    types = [c["type"] for c in out]
    twice = sorted({t for t in types if types.count(t) > 1})
    if twice:
        raise DataError(f"{where}: constraint type(s) {twice} occur more than once; each type may occur once per prompt")
    return out


def _constraint(c: Any, where: str) -> dict[str, Any]:
    if not isinstance(c, dict):
        raise DataError(f"{where}: expected an object with 'type' and its arguments, found {short(c)}")
    kind = c.get("type")
    if kind not in ARGS:
        raise DataError(f"{where}: unknown constraint type {short(kind)}; known: {', '.join(ARGS)}")
    want = ARGS[kind]
    unknown = sorted(set(c) - {"type"} - set(want))
    if unknown:
        raise DataError(f"{where}: '{kind}' takes {sorted(want) or 'no arguments'}, not {unknown}")
    out: dict[str, Any] = {"type": kind}
    for arg, typ in want.items():
        v = c.get(arg)
        if typ is int:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise DataError(f"{where}: '{kind}' needs '{arg}', a whole number >= 1; found {short(v)}")
        elif not isinstance(v, str) or not v.strip():
            raise DataError(f"{where}: '{kind}' needs '{arg}', a non-empty string; found {short(v)}")
        else:
            v = v.strip()
        out[arg] = v
    return out
