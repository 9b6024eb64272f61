"""A prompt's checklist as data: the yes/no questions a checklist judge asks about each response.

A checklist cell is a list of questions, each a string or ``{question, weight, pass_if}`` (weight >
0, default 1; ``pass_if`` "yes" (default) or "no": the answer that means the response passes, for a
question asked about presence, e.g. "Does the response use the word X?"), or that list as JSON text
(a CSV cell). ``read_checklist`` checks one cell and returns it in one shape, ``[{"question": str,
"weight": float}, ...]`` plus ``"pass_if": "no"`` on the items "No" passes, the shape judges receive
in ``Sample.metadata["checklist"]``, so a wrong row is refused when the data loads, naming it.
"""

from __future__ import annotations

import json
import math
from numbers import Real
from typing import Any

from grm.data.errors import DataError

METADATA_KEY = "checklist"
"""Where a sample's checklist travels to judges: ``Sample.metadata["checklist"]``."""

_SHAPE = 'a non-empty list of yes/no questions (strings, or {"question": ..., "weight": ..., "pass_if": "yes"|"no"} objects)'


def read_checklist(value: Any, where: str) -> list[dict[str, Any]]:
    """``value`` as ``[{"question", "weight"}, ...]``; a ``DataError`` starting with ``where`` (e.g.
    ``"data.jsonl row 3: column 'checklist'"``) says what is wrong with it."""
    return [_item(entry, f"{where} item {k}") for k, entry in enumerate(list_cell(value, where, _SHAPE))]


def list_cell(value: Any, where: str, shape: str) -> list[Any]:
    """A data cell that holds a non-empty list, or that list as JSON text (a CSV cell); a
    ``DataError`` starting with ``where`` says it is missing or what it holds instead of ``shape``."""
    if value is None:
        raise DataError(f"{where} is missing; expected {shape}")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise DataError(f"{where}: expected {shape}; found text that is not a JSON list: {short(value)}") from None
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: expected {shape}; found {short(value)}")
    return value


def check_length(items: list[dict[str, Any]], max_items: int, judge: str, where: str) -> None:
    """A checklist from the data asks every question it holds: one with more than the judge's
    ``checklist.max_items`` is refused (a ``DataError`` starting with ``where``) rather than cut,
    since its last questions are requirements its author meant, and the judge's deadline is sized
    for ``max_items`` questions."""
    if len(items) > max_items:
        raise DataError(
            f"{where}: {len(items)} questions, more than judge '{judge}' asks (its checklist.max_items is "
            f"{max_items}); shorten the checklist or set checklist.max_items to {len(items)} or more"
        )


def _item(entry: Any, where: str) -> dict[str, Any]:
    if isinstance(entry, str):
        entry = {"question": entry}
    if not isinstance(entry, dict):
        raise DataError(f"{where}: expected a question (string) or an object with 'question' and 'weight'; found {short(entry)}")
    unknown = sorted(set(entry) - {"question", "weight", "pass_if"})
    if unknown:
        raise DataError(f"{where}: unknown key(s) {unknown}; an item has 'question' and optionally 'weight' and 'pass_if'")
    question = entry.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: 'question' must be a non-empty string, found {short(question)}")
    weight = entry.get("weight", 1.0)
    if not _positive_number(weight):
        raise DataError(f"{where}: 'weight' must be a number above 0, found {short(weight)}")
    pass_if = entry.get("pass_if", "yes")
    if pass_if not in ("yes", "no"):
        raise DataError(f'{where}: \'pass_if\' must be "yes" or "no" (the answer that passes), found {short(pass_if)}')
    item = {"question": question.strip(), "weight": float(weight)}
    return {**item, "pass_if": "no"} if pass_if == "no" else item


def _positive_number(v: Any) -> bool:
    """A finite number above 0 as a float can hold it: not a bool, NaN or infinity, nor an integer
    too large for a float (``float(10**400)`` raises OverflowError, and ``math.isfinite`` with it)."""
    if isinstance(v, bool) or not isinstance(v, Real):
        return False
    try:
        f = float(v)
    except OverflowError:
        return False
    return math.isfinite(f) and f > 0


def short(v: Any) -> str:
    """``repr(v)`` cut to 80 characters, for error messages (a repr holds no line break)."""
    try:
        text = repr(v)
    except ValueError:  # an integer past Python's 4,300-digit limit for printing
        return f"an integer of about {int(v.bit_length() * 0.30103):,} digits" if isinstance(v, int) else type(v).__name__
    return text if len(text) <= 80 else text[:77] + "..."
