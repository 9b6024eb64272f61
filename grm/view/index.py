"""Byte-offset indexes of JSON-lines files that may still be growing.

A run's samples.jsonl reaches 100k lines (~150 MB): parsing it whole on every page would take
seconds, so the index records where each line starts and which step it belongs to, and a page
parses only its own lines. Refreshing scans only the bytes appended since the last scan; a torn
last line (the writer is mid-append) is left for the next refresh; a file that shrank or was
replaced (``truncate_after`` on resume rewrites it atomically) is indexed again from the start.

The files are untrusted (see ``grm.view.folder``), so the work any of them can cause is bounded:
a line longer than ``MAX_ROW_BYTES`` is never held in memory (its head gives its step, its body
becomes a bad row), at most ``MAX_LINES`` lines are indexed, and a row nested deeper than
``MAX_DEPTH`` or that is not a JSON object comes back as ``{"_error": ...}`` naming file and line.
"""

from __future__ import annotations

import json
import re
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grm.view.folder import BadFile, Folder

MAX_ROW_BYTES = 16 * 2**20
"""A line longer than this is indexed (its step read from its first bytes) but shown as a bad row."""
MAX_LINES = 1_000_000
"""Lines indexed per file at most (~40 bytes of index each); later lines are reported, not read."""
MAX_DEPTH = 64
"""A row nested deeper is a bad row: the server's JSON encoder and the page recurse over rows."""

# The recorder writes "step" as the first key of every row; reading it with a regex from the line's
# head instead of json.loads: 0.014 s vs 0.19 s for 20k lines of 1.7 KB. With it, indexing 100k such
# lines (170 MB) takes 0.40 s and a step's first page 0.07 s (benchmarks/view_open.py). At most 18
# digits, and the number must end there: a 10k-digit "step" is no step, not a slow int().
_STEP = re.compile(rb'^\{\s*"step"\s*:\s*(-?\d{1,18})(?![\d.eE])')
_HEAD = 256
_CHUNK = 2**20


def _at(folder: Folder | Path, name: str) -> tuple[Folder, str]:
    if isinstance(folder, Path):
        return Folder(folder.parent), folder.name
    return folder, name


MAX_MESSAGE_CHARS = 300
"""Characters of a bad row's message at most, on one line. Messages quote what they refuse: a 5 MB
trajectory id, role or version quoted whole made a 5 MB entry (a 25 MB answer for five rows)."""
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as one line (control characters and line separators as spaces) of at most ``limit``
    characters: when longer, its head and how long it was. Only the head is ever scanned."""
    if len(text) <= limit:
        return _UNPRINTABLE.sub(" ", text)
    note = f" ... [{len(text):,} characters]"
    return _UNPRINTABLE.sub(" ", text[: max(0, limit - len(note))]) + note


def bad_row(where: str, why: str) -> dict[str, Any]:
    """A row shown as bad: ``where`` (file and line) and why, one line of at most ``MAX_MESSAGE_CHARS``."""
    return {"_error": one_line(f"{where}: {why}")}


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(v, dict):
            stack.extend((c, depth + 1) for c in v.values())
        elif isinstance(v, list):
            stack.extend((c, depth + 1) for c in v)
    return False


def parse_row(raw: bytes, where: str) -> dict[str, Any]:
    """One JSON-lines row, or a bad row saying why it is not one (never an exception)."""
    try:
        row = json.loads(raw)
    except RecursionError:
        return bad_row(where, f"nested deeper than {MAX_DEPTH} levels")
    except ValueError as e:  # UnicodeDecodeError included: bytes that are not UTF-8
        return bad_row(where, f"not JSON ({str(e)[:200]})")
    if not isinstance(row, dict):
        return bad_row(where, f"not a JSON object (a {type(row).__name__})")
    if raw.count(b"[") + raw.count(b"{") >= MAX_DEPTH and too_deep(row):  # each level opens one
        return bad_row(where, f"nested deeper than {MAX_DEPTH} levels")
    return row


def parse_yaml(raw: bytes, where: str) -> Any:
    """A small YAML file (config.resolved.yaml) parsed by libyaml where installed: the pure-Python
    loader takes 4 s to refuse 5000 nested '[' (libyaml: 1 ms); ValueError naming ``where``."""
    import yaml

    try:
        return yaml.load(raw.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError, ValueError) as e:
        raise ValueError(f"{where}: not YAML ({str(e)[:200]})") from None


@dataclass
class LineIndex:
    """Where each complete line of the file ``name`` in ``folder`` starts and ends, and its step
    (``LineIndex(path)``: the file at ``path``, its directory opened as the folder)."""

    folder: Folder
    name: str = ""
    stepped: bool = True
    """Whether lines are indexed by step (samples.jsonl); a file read in order (metrics.jsonl,
    results.jsonl) skips it: a dict of a million one-line steps costs ~150 MB."""
    starts: array = field(default_factory=lambda: array("q"))
    ends: array = field(default_factory=lambda: array("q"))
    by_step: dict[int, list[int]] = field(default_factory=dict)
    """step -> line numbers, in file order."""
    unstepped: int = 0
    """Lines without an integer step (not JSON, or no "step"): in no step's page."""
    scanned: int = 0
    """Bytes consumed: always at the end of a complete line."""
    generation: int = 0
    """Bumped whenever the file was found replaced or shrunk and indexing started over."""
    problem: str | None = None
    """Why the file cannot be read right now (a link, a FIFO, unreadable), or that it was cut short."""
    capped: bool = False
    _seen: int = 0
    """Lines scanned, blank ones included (what MAX_LINES bounds)."""
    _ident: tuple[int, int] | None = None
    _long: tuple[int, bytes, int] | None = None
    """A line longer than MAX_ROW_BYTES whose end is not written yet: (start, head, bytes scanned to)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.folder, self.name = _at(self.folder, self.name)

    def where(self, n: int | None = None) -> str:
        return self.name if n is None else f"{self.name} line {n + 1}"

    def refresh(self) -> int:
        """Index lines appended since the last call; returns how many were added."""
        with self._lock:
            try:
                fh, st = self.folder.open(self.name)
            except FileNotFoundError:
                if self._ident is not None:
                    self._reset()
                self.problem = None
                return 0
            except OSError as e:
                if self._ident is not None:
                    self._reset()
                self.problem = str(e) if isinstance(e, BadFile) else f"{self.folder.where(self.name)}: {e.strerror or e}"
                return 0
            with fh:
                ident = (st.st_dev, st.st_ino)
                if ident != self._ident or st.st_size < self.scanned:
                    self._reset()
                    self._ident = ident
                self.problem = f"only the first {MAX_LINES:,} lines of {self.name} are read" if self.capped else None
                if self.capped or (st.st_size == self.scanned and self._long is None):
                    return 0
                before = len(self.starts)
                self._scan(fh)
                if self.capped:
                    self.problem = f"only the first {MAX_LINES:,} lines of {self.name} are read"
                return len(self.starts) - before

    def _scan(self, fh: Any) -> None:
        # Raw reads and bytes.find: BufferedReader.readline(limit) takes 8 s over a 1 GB line
        # where this takes 0.2 s. ``carry`` holds the unfinished line while it may still be a row;
        # past MAX_ROW_BYTES only its head is kept (None carry) and the rest is skipped.
        if self._long is not None:
            start, head, at = self._long
            carry: bytearray | None = None
        else:
            start = at = self.scanned
            head, carry = b"", bytearray()
        fh.seek(at)
        while chunk := fh.read(_CHUNK):
            i = 0
            while (j := chunk.find(b"\n", i)) >= 0:
                end = at + j + 1
                if carry is None:
                    self._add(head, start, end, whole=False)
                elif len(carry) + j + 1 - i > MAX_ROW_BYTES:
                    self._add((bytes(carry[:_HEAD]) + chunk[i : i + _HEAD])[:_HEAD], start, end, whole=False)
                else:
                    line = bytes(carry) + chunk[i : j + 1] if carry else chunk[i : j + 1]
                    if not line.isspace():
                        self._add(line, start, end, whole=True)
                self.scanned = start = end
                head, carry = b"", bytearray()
                i = j + 1
                self._seen += 1
                if self._seen >= MAX_LINES:  # blank lines count: a 1 GB file of newlines is work too
                    self.capped, self._long = True, None
                    return
            if carry is not None:
                carry += chunk[i:]
                if len(carry) > MAX_ROW_BYTES:
                    head, carry = bytes(carry[:_HEAD]), None
            at += len(chunk)
        # end of file: an unfinished line waits for its writer; a long one resumes where this stopped
        self._long = None if carry is not None else (start, head, at)

    def _reset(self) -> None:
        self.generation += 1
        self.starts, self.ends, self.by_step, self.unstepped = array("q"), array("q"), {}, 0
        self.scanned, self._ident, self._long, self.capped, self._seen = 0, None, None, False, 0

    def _add(self, line: bytes, start: int, end: int, *, whole: bool) -> None:
        if not self.stepped:
            self.starts.append(start)
            self.ends.append(end)
            return
        m = _STEP.match(line)
        step: int | None = int(m.group(1)) if m else None
        if step is None and whole and b'"step"' in line:
            try:
                value = json.loads(line).get("step")
            except (ValueError, AttributeError, RecursionError):
                value = None
            step = value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63 else None
        n = len(self.starts)
        self.starts.append(start)
        self.ends.append(end)
        if step is None:
            self.unstepped += 1
        else:
            self.by_step.setdefault(step, []).append(n)

    def __len__(self) -> int:
        return len(self.starts)

    def rows(self, numbers: Iterable[int]) -> Iterator[dict[str, Any]]:
        """The parsed lines ``numbers``, one at a time; a line that cannot be a row comes back as
        ``{"_error": ...}`` naming the file and line."""
        numbers = list(numbers)
        if not numbers:
            return
        try:
            fh, st = self.folder.open(self.name)
        except OSError as e:
            for n in numbers:
                yield bad_row(self.where(n), f"cannot read ({e})")
            return
        with fh:
            if (st.st_dev, st.st_ino) != self._ident:
                for n in numbers:
                    yield bad_row(self.where(n), "the file was replaced since it was indexed; refresh the page")
                return
            starts, ends = self.starts, self.ends  # a concurrent reset swaps these for new, shorter arrays
            for n in numbers:
                if n >= len(ends):
                    yield bad_row(self.where(n), "the file was replaced since it was indexed; refresh the page")
                    continue
                size = ends[n] - starts[n]
                if size > MAX_ROW_BYTES:
                    yield bad_row(
                        self.where(n), f"{size / 2**20:.0f} MiB, longer than the {MAX_ROW_BYTES // 2**20} MiB a row may be"
                    )
                    continue
                fh.seek(starts[n])
                yield parse_row(fh.read(size), self.where(n))

    def read(self, numbers: Iterable[int]) -> list[dict[str, Any]]:
        return list(self.rows(numbers))

    def read_all(self) -> list[dict[str, Any]]:
        return self.read(range(len(self.starts)))


@dataclass
class RowLog:
    """A JSON-lines file (metrics.jsonl, results.jsonl) kept parsed, growing by refresh.

    ``keep`` maps each parsed row (and its line number) to what stays in memory: a page reads the
    few whole rows it shows through ``index``, so a 1 GB results.jsonl costs its projections only.
    """

    folder: Folder
    name: str = ""
    keep: Callable[[dict[str, Any], int], dict[str, Any]] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    index: LineIndex = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.folder, self.name = _at(self.folder, self.name)
        self.index = LineIndex(self.folder, self.name, stepped=False)

    @property
    def problem(self) -> str | None:
        return self.index.problem

    def refresh(self) -> list[dict[str, Any]]:
        with self._lock:
            generation = self.index.generation
            self.index.refresh()
            if self.index.generation != generation:  # rewritten: start over
                self.rows = []
            first = len(self.rows)
            for n, row in enumerate(self.index.rows(range(first, len(self.index))), start=first):
                self.rows.append(self.keep(row, n) if self.keep else row)
            return self.rows
