"""The format version of each file grm writes into run and eval directories, and the migrations
that let this grm read the older ones.

A run or eval directory outlives the grm that wrote it: it is resumed, rescored and viewed by
later (or earlier) versions. So every line of ``metrics.jsonl``, ``samples.jsonl`` and an eval's
``results.jsonl``, and a checkpoint's ``driver.json``, carries ``"format": N`` (``stamp``, put
last so ``"step"`` stays a line's first key). A line without it is format 1: the layout grm wrote
before formats were stamped. Every reader passes each row through ``read_row``: a format newer
than this grm knows is refused with a message naming the file and line, never misread; an older
one is brought up to date in place, one ``MIGRATIONS`` step at a time.

To change a layout: add 1 to its ``FORMATS`` entry, write ``<kind>_<N>_to_<N+1>(row)`` that turns
a row of the old format into the new one in place, register it in ``MIGRATIONS``, and test it
(``tests/unit/test_run_format.py``). Readers then see the new layout only.

Imports nothing from grm: errors come as the caller's class (``ValueError`` by default, which
``grm.jsonl.read_jsonl``'s ``check`` turns into a ``JsonlError`` naming the file and line).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

FORMAT_KEY = "format"
"""The key of the version in a written row (no row grm writes has another key of this name)."""

FORMATS = {"metrics": 1, "samples": 1, "results": 2, "checkpoint": 1, "heldout": 1}
"""The format each kind of file is written in now: metrics.jsonl, samples.jsonl, results.jsonl
(``grm eval``, ``grm rescore``), a checkpoint's driver.json and a run's heldout.jsonl."""


def results_1_to_2(row: dict[str, Any]) -> None:
    """Format 1 results lines may come from a grm that did not yet count responses cut to fit the
    judge (``truncated``), pairs masked because one order failed (``one_order_failed``) or text
    aimed at the judge (``judge_directed``), nor split a batch's ``cost`` over its items: the
    counts were zero, and the cost is unknown (None)."""
    for key in ("truncated", "one_order_failed", "judge_directed"):
        row.setdefault(key, 0)
    row.setdefault("cost", None)


Migration = Callable[[dict[str, Any]], None]

MIGRATIONS: dict[str, dict[int, Migration]] = {"results": {1: results_1_to_2}}
"""kind -> {N: the function turning a row of format N into format N + 1, in place}."""


def stamp(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``row`` with the current format of ``kind`` as its last key, as it is written."""
    return {**row, FORMAT_KEY: FORMATS[kind]}


def check_format(kind: str, n: Any, where: str | None = None, error: type[Exception] = ValueError) -> int:
    """``n``, the format a row of ``kind`` says it has, when this grm reads it; else ``error``, its
    message starting with ``where`` (``FILE:LINE``) when given: a newer format, or not a number."""
    newest = FORMATS[kind]
    at = f"{where}: " if where else ""
    if type(n) is not int or n < 1:
        shown = repr(n)[:40] if isinstance(n, (int, float, str)) else f"a {type(n).__name__}"
        raise error(f"{at}'{FORMAT_KEY}' is {shown}, not a format number (1, 2, ...); not a line grm writes")
    if n > newest:
        raise error(f"{at}written by a newer grm ({kind} format {n}; this grm reads up to {newest}): upgrade grm to read it")
    return n


def read_row(kind: str, row: dict[str, Any], where: str | None = None, error: type[Exception] = ValueError) -> dict[str, Any]:
    """``row`` (a line of a file of ``kind``) brought to the current format in place, and returned;
    ``error`` as ``check_format`` says when this grm cannot read it. A migrated row says its new
    format; a row already current is left as it is (unstamped if it was: format 1 needs no key)."""
    n = check_format(kind, row.get(FORMAT_KEY, 1), where, error)
    for old in range(n, FORMATS[kind]):
        MIGRATIONS[kind][old](row)
        row[FORMAT_KEY] = old + 1
    return row


# ``stamp`` puts the format last: a line's tail gives it without a json.loads of the whole line.
_TAIL = re.compile(rb'"' + FORMAT_KEY.encode() + rb'"\s*:\s*(-?\d{1,18})\s*\}\s*$')


def line_format(line: bytes) -> int | None:
    """The format a JSON line's tail says it has; None when its tail holds none: a format 1 line,
    unless ``"format"`` stands elsewhere in it (``FORMAT_KEY.encode() in line``: parse it then)."""
    m = _TAIL.search(line, max(0, len(line) - 64))  # the stamp ends the line: its last bytes hold it
    return int(m.group(1)) if m else None
