"""A run's metrics.jsonl as the page plots it: every numeric key, nested dicts flattened and grouped
by prefix, read once as the file grows and kept in bounded memory however long it gets.

Held whole, a crafted 1,000,000-row metrics.jsonl took 755 MB and 8.3 s on the first request, then
2.2 s and a 40 MB answer on every poll of the live page (every 5 s). Here each line is parsed once,
when it is appended; the plot keeps every row until ``MAX_POINTS`` (or ``MAX_VALUES`` numbers),
then every second row, every fourth... (the stride doubles, so kept rows stay evenly spread over
the run) and always the last one, and the answer says when it is thinned. A poll costs a stat and
the appended tail, and an answer of at most ``MAX_POINTS`` rows. The same file now: 8.4 s once
(parsing, ~8 us a line, on a loaded 2-core machine; the index stops at 1,000,000 lines), 85 MB,
then 0.02 s and 128 KB a poll.

A value that is no finite number (NaN, 1e400, a 401-digit integer) makes its row a bad row, listed
with its line: the recorder writes NaN as null, so such a value is not a step of this run's to plot.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from grm.run_format import FORMAT_KEY, read_row
from grm.view.folder import Folder
from grm.view.index import LineIndex, bad_row

MAX_POINTS = 2000
"""Rows of metrics.jsonl the plot gets at most (a chart is ~400 pixels wide)."""
MAX_VALUES = 400_000
"""Numbers (kept rows x their keys) the plot gets at most: an answer of a few MB."""
MAX_METRIC_KEYS = 10_000
"""Numeric keys one row, and the whole run, may have; a row past it is a bad row."""
MAX_KEY_CHARS = 200
"""Characters of a metric's name at most (it is a chart's legend)."""
SHOWN_BAD_ROWS = 50


def flatten_numeric(row: dict[str, Any], prefix: str = "") -> dict[str, float | None]:
    """Every number in a metrics row, nested dicts flattened with '/' (``masked_by_judge/j``).
    None stays None (NaN was written as null) so a chart shows a gap, not a zero; ValueError naming
    the key for a number that is not finite or too large for a float, or a key too long to show."""
    out: dict[str, float | None] = {}
    for k, v in row.items():
        key = f"{prefix}{k}"
        if len(key) > MAX_KEY_CHARS:
            raise ValueError(f"a key of {len(key):,} characters (a metric's name may have {MAX_KEY_CHARS})")
        if isinstance(v, bool):
            out[key] = float(v)
        elif isinstance(v, (int, float)):
            out[key] = _finite(key, v)
        elif v is None:
            out[key] = None
        elif isinstance(v, dict):
            out.update(flatten_numeric(v, key + "/"))
    return out


def _finite(key: str, v: int | float) -> float:
    try:
        x = float(v)
    except OverflowError:  # an int past 1.8e308 (a float never overflows here)
        digits = int(abs(int(v)).bit_length() * math.log10(2)) + 1
        raise ValueError(f"{key}: an integer of about {digits} digits, too large to plot") from None
    if not math.isfinite(x):
        raise ValueError(f"{key}: {x} is not a finite number")
    return x


def metric_group(key: str, families: frozenset[str] | set[str] = frozenset()) -> str:
    """The chart a key belongs to: its prefix before '/' (``reward/judge`` -> reward), else the part
    before its first '_' when other keys share it (``seconds_rollout`` -> seconds), else the key."""
    if "/" in key:
        return key.split("/", 1)[0]
    head = key.split("_", 1)[0]
    return head if head in families else key


def chart_groups(keys: list[str] | dict[str, None]) -> dict[str, list[str]]:
    """Chart name -> ``keys`` (those with at least one number, in first-seen order)."""
    heads: dict[str, int] = {}
    for k in keys:
        head = k.split("/", 1)[0] if "/" in k else k.split("_", 1)[0]
        heads[head] = heads.get(head, 0) + 1
    families = {h for h, n in heads.items() if n > 1}
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(metric_group(k, families), []).append(k)
    return groups


def group_keys(rows: list[dict[str, float | None]]) -> dict[str, list[str]]:
    """Chart name -> keys with at least one number, in first-seen order; ``step`` is the x axis."""
    seen: dict[str, None] = {}
    for r in rows:
        for k, v in r.items():
            if v is not None and k != "step":
                seen.setdefault(k, None)
    return chart_groups(seen)


def metric_row(row: dict[str, Any], n: int) -> dict[str, Any]:
    """A parsed line of metrics.jsonl (line number ``n``, from 0) flattened for the plot, or a bad
    row naming the line and why."""
    where = f"metrics.jsonl line {n + 1}"
    if "_error" in row:
        return row
    try:
        read_row("metrics", row)  # first: a newer format may lay out even its step otherwise
    except ValueError as e:
        return bad_row(where, str(e))
    step = row.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return bad_row(where, f"'step' must be an integer, not {type(step).__name__}")
    try:
        flat = flatten_numeric({k: v for k, v in row.items() if k != FORMAT_KEY})  # a version, not a curve
    except ValueError as e:
        return bad_row(where, str(e))
    if len(flat) > MAX_METRIC_KEYS:
        return bad_row(where, f"{len(flat)} numeric keys, more than the {MAX_METRIC_KEYS} a chart set may have")
    return flat


class PlotRows:
    """Rows kept for a plot, in order: every row until ``max_points`` of them (or ``max_values``
    numbers) are kept, then every second, fourth... row (the stride doubles), so what is kept stays
    evenly spread over all rows seen; the last row is always shown."""

    def __init__(self, max_points: int = MAX_POINTS, max_values: int = MAX_VALUES) -> None:
        self.max_points, self.max_values = max_points, max_values
        self.total = 0
        self.stride = 1
        self._kept: list[tuple[int, dict[str, Any]]] = []
        """(ordinal, row) of every ``stride``-th row seen."""
        self._values = 0
        self._last: dict[str, Any] | None = None

    def add(self, row: dict[str, Any]) -> None:
        i, self.total, self._last = self.total, self.total + 1, row
        if i % self.stride:
            return
        self._kept.append((i, row))
        self._values += len(row)
        while len(self._kept) > self.max_points or (self._values > self.max_values and len(self._kept) > 1):
            self.stride *= 2
            self._kept = [(j, r) for j, r in self._kept if j % self.stride == 0]
            self._values = sum(len(r) for _, r in self._kept)

    def rows(self) -> list[dict[str, Any]]:
        """The kept rows and, when it is not one of them, the last row seen."""
        rows = [r for _, r in self._kept]
        if self._last is not None and (not rows or rows[-1] is not self._last):
            rows.append(self._last)
        return rows


class MetricLog:
    """metrics.jsonl read as it grows: what the plot keeps of it, its keys and its bad rows."""

    def __init__(self, folder: Folder) -> None:
        self.index = LineIndex(folder, "metrics.jsonl", stepped=False)
        self._lock = threading.Lock()
        self._start()

    def _start(self) -> None:
        self._generation = self.index.generation
        self._read = 0
        """Lines of the index consumed."""
        self.plot = PlotRows(MAX_POINTS, MAX_VALUES)
        self.keys: dict[str, None] = {}
        """Keys with at least one number so far, in first-seen order."""
        self.bad: list[str] = []
        self.bad_total = 0

    @property
    def problem(self) -> str | None:
        return self.index.problem

    def refresh(self) -> None:
        """Read the lines appended since the last call (all of them again when the file was replaced)."""
        with self._lock:
            self.index.refresh()
            if self.index.generation != self._generation:
                self._start()
            new = range(self._read, len(self.index))
            for n, row in zip(new, self.index.rows(new), strict=True):
                try:
                    flat = metric_row(row, n)
                except Exception as e:  # noqa: BLE001 - an unforeseen shape costs its row, never the plot
                    flat = bad_row(f"metrics.jsonl line {n + 1}", f"cannot be plotted ({type(e).__name__}: {e})")
                self._add(flat, n)
            self._read = new.stop

    def _add(self, row: dict[str, Any], n: int) -> None:
        fresh = [] if "_error" in row else [k for k, v in row.items() if v is not None and k != "step" and k not in self.keys]
        if len(self.keys) + len(fresh) > MAX_METRIC_KEYS:
            row = bad_row(
                f"metrics.jsonl line {n + 1}",
                f"{len(fresh)} new keys would take the run past the {MAX_METRIC_KEYS} numeric keys a chart set may have",
            )
        if "_error" in row:
            self.bad_total += 1
            if len(self.bad) < SHOWN_BAD_ROWS:
                self.bad.append(row["_error"])
            return
        self.keys.update(dict.fromkeys(fresh))
        self.plot.add(row)

    def plotted(self) -> dict[str, Any]:
        """The page's answer: the rows kept (the last always among them), the chart groups, how many
        rows there are and whether the plot is thinned, and the bad rows."""
        with self._lock:
            note = ""
            if self.plot.stride > 1:
                note = f"metrics.jsonl has {self.plot.total:,} rows: one row in {self.plot.stride} and the last are plotted"
            return {
                "rows": self.plot.rows(),
                "rows_total": self.plot.total,
                "note": note,
                "groups": chart_groups(self.keys),
                "bad_rows": list(self.bad),
                "bad_rows_total": self.bad_total,
            }
