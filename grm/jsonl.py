"""JSON lines as grm writes and reads them: appends that survive a kill, reads that name a damaged
line (and cut only a torn last one), and the checks on JSON text a file or server may hold: a key
twice, a lone surrogate, a number past Python's digit limit.

Imports only ``grm.base`` (errors, regular-file reads, link-refusing opens, atomic writes) and the
standard library, so every layer above may use it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from grm.base import GrmError, atomic_write_text, open_own, regular_file_bytes

MAX_JSON_DEPTH = 256
"""Deepest nesting ``json_safe`` passes on: ``json.dumps`` and ``json.loads`` recurse once per level
against Python's ~1,000-frame limit, so a deeper value could be written but not read back, or not
written at all (a RecursionError out of the writer)."""


def json_safe(x: Any) -> Any:
    """``x`` with non-finite floats as None (JSON has no NaN) and lone surrogates as U+FFFD (UTF-8
    has none), through dicts, lists and tuples (as lists) at any depth up to ``MAX_JSON_DEPTH``:
    ValueError saying so past it (a cycle included). Iterative: no depth costs a stack frame."""
    root: list[Any] = [None]
    todo: list[tuple[Any, Any, Any, int]] = [(x, root, 0, 1)]  # (value, into, key, depth): into[key] = the safe value
    while todo:  # a stack, children pushed last first: taken in order, so of two keys that become one the last wins
        v, into, key, depth = todo.pop()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, str):
            v = without_lone_surrogates(v)
        elif isinstance(v, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"a value nested more than {MAX_JSON_DEPTH} levels deep cannot be written as JSON")
            if isinstance(v, dict):
                out: Any = {}
                children = []
                for k, child in v.items():
                    k = without_lone_surrogates(k) if isinstance(k, str) else k
                    out[k] = None  # the key's place in the order, its value set when taken
                    children.append((child, out, k, depth + 1))
            else:
                out = [None] * len(v)
                children = [(child, out, i, depth + 1) for i, child in enumerate(v)]
            todo.extend(reversed(children))
            v = out
        into[key] = v
    return root[0]


def append_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append ``rows`` as JSON lines and fsync: once this returns, a SIGKILL cannot lose them.
    ``path`` is a file of grm's own: never written through a link (``open_own``)."""
    # every row made text first: one that cannot be (nested past MAX_JSON_DEPTH) writes none of the batch
    text = "".join(json.dumps(json_safe(r), ensure_ascii=False, default=str) + "\n" for r in rows)
    with os.fdopen(open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


class DuplicateKey(ValueError):
    """A JSON object names one key twice (the standard decoder would keep the last silently)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: the object, or DuplicateKey naming the repeated key."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise DuplicateKey(f"duplicate key {key[:100]!r}")
    return out


def parse_failure(e: BaseException) -> str:
    """A short reason for the ValueError or RecursionError a parser (json, PyYAML, int()) raised
    past its syntax errors: a number of more than 4,300 digits (Python's limit, whose own message
    quotes the literal and advises changing the interpreter), nesting too deep, else the message."""
    if isinstance(e, RecursionError):
        return "nested too deeply"
    text = str(e)
    if isinstance(e, DuplicateKey):
        return text
    if "integer string conversion" in text:
        return f"a number of more than {sys.get_int_max_str_digits()} digits"
    return f"{type(e).__name__}: {text[:200]}"


class JsonlError(GrmError):
    """A damaged JSON-lines file grm wrote or reads: the message says ``FILE:LINE: what is wrong``."""


_BOM = b"\xef\xbb\xbf"


def parse_jsonl(raw: bytes, path: str | Path, error: type[GrmError] = JsonlError) -> list[tuple[int, dict[str, Any]]]:
    """(1-based file line, object) for every non-blank line of ``raw``, or ``error`` naming the line.

    Lines end at b"\\n" alone: U+0085, U+2028 and U+2029 may stand raw inside JSON strings, and
    ``str.splitlines`` would cut them there. A UTF-8 byte order mark opens the first line, CRLF
    endings are JSON whitespace; each line is decoded alone, so a bad byte is named by its line.
    """
    out = []
    for n, line in enumerate(raw.split(b"\n"), 1):
        if n == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(f"{path}:{n}: not valid UTF-8 (byte 0x{line[e.start]:02x} at column {e.start + 1})") from None
        try:
            value = json.loads(text, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as e:
            raise error(f"{path}:{n}: invalid JSON: {e.msg} (column {e.colno})") from None
        except (ValueError, RecursionError) as e:  # an int past 4300 digits; nested too deeply
            raise error(f"{path}:{n}: invalid JSON: {parse_failure(e)}") from None
        if not isinstance(value, dict):
            raise error(f"{path}:{n}: expected a JSON object ({{...}}), found {type(value).__name__}")
        if _ESCAPED_SURROGATE.search(line) and lone_surrogate(value):
            raise error(f"{path}:{n}: {SURROGATE_WHY}")
        out.append((n, value))
    return out


_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # raw UTF-8 cannot hold a surrogate: only a JSON escape can
_LONE = re.compile(r"(?<![\ud800-\udbff])[\udc00-\udfff]|[\ud800-\udbff](?![\udc00-\udfff])")
_SURROGATE = re.compile("[\ud800-\udfff]")
SURROGATE_WHY = "a string holds a lone UTF-16 surrogate (an escape such as \\ud800 with no pair): not text; mend the row"


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD: what a model or server wrote is kept, as text."""
    try:
        text.encode("utf-8")  # the fast path: text without any surrogate
        return text
    except UnicodeEncodeError:  # json.loads joins an escaped pair; any surrogate left cannot be UTF-8
        return _SURROGATE.sub("\ufffd", text)


def surrogate_at(value: Any, *, pairs_ok: bool = True) -> tuple[tuple[Any, ...], str] | None:
    """The first string in ``value`` (the keys and values of mappings, the items of lists and tuples,
    at any depth) holding a surrogate: its key path (a key's ends with the key itself) and what is
    wrong on one line, ``FIELD: ...``; None when there is none.

    JSON and YAML let ``"\\ud800"`` through as a one-character string that no UTF-8 writer, hash or
    tokenizer accepts: refused where the text is read, naming where, not where it is first encoded.
    ``pairs_ok`` lets a high-low pair through: ``json.loads`` joins an escaped pair into one
    character, so JSON leaves only lone ones; YAML leaves a pair as two code points, which UTF-8
    cannot hold either (config text passes ``pairs_ok=False``). Iterative: a value nested thousands
    deep costs no stack frame.
    """
    bad = _LONE if pairs_ok else _SURROGATE
    todo: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while todo:
        path, v = todo.pop()
        if isinstance(v, str):
            if (m := bad.search(v)) is not None:
                return path, f"{_field(path)}text holds a lone surrogate ({m.group()!a}), not valid Unicode"
        elif isinstance(v, dict):
            for k, child in v.items():
                if isinstance(k, str) and (m := bad.search(k)) is not None:
                    return (*path, k), f"{_field(path)}key {k!a} holds a lone surrogate ({m.group()!a}), not valid Unicode"
                todo.append(((*path, k), child))
        elif isinstance(v, (list, tuple, set, frozenset)):
            todo.extend(((*path, i), child) for i, child in enumerate(v))
    return None


def _field(path: tuple[Any, ...]) -> str:
    return ".".join(map(str, path)) + ": " if path else ""


def lone_surrogate(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (JSON: dicts, lists, strings) holds a lone surrogate
    (``surrogate_at``)."""
    return surrogate_at(value) is not None


def read_jsonl_numbered(
    path: str | Path, *, repair: bool = True, check: Callable[[dict[str, Any]], None] | None = None, own: bool = False
) -> list[tuple[int, dict[str, Any]]]:
    """(1-based line, object) for every complete line of a JSON-lines file ([] when it does not exist).

    A torn last line (no line end: the writer was killed mid-line, or is still writing it) is not
    returned and, with ``repair``, is cut off the file so the next append starts on a clean line;
    only a writer holding the directory's ``writer_lock`` may repair. A bad line before it cannot be
    a torn write: it raises ``JsonlError`` naming the file and line. ``check(row)`` may refuse a row
    that is JSON but not what the file holds, by raising ValueError or TypeError with the reason.
    """
    path = Path(path)
    raw = regular_file_bytes(path, JsonlError, own=own)  # own: a link planted in grm's directory is refused
    if raw is None:
        return []
    good_end = raw.rfind(b"\n") + 1
    try:
        rows = parse_jsonl(raw[:good_end], path)
    except JsonlError as e:
        raise JsonlError(f"{e}; only the last line can be cut short by a killed writer: mend or delete this one") from None
    if check is not None:
        for n, row in rows:
            try:
                check(row)
            except (ValueError, TypeError) as e:
                raise JsonlError(f"{path}:{n}: {e}") from None
    if repair and good_end < len(raw):  # only once the rest is known good: a damaged file is left as found
        fd = open_own(path, os.O_RDWR, JsonlError)
        try:
            os.ftruncate(fd, good_end)
        finally:
            os.close(fd)
    return rows


def read_jsonl(
    path: str | Path, *, repair: bool = True, check: Callable[[dict[str, Any]], None] | None = None, own: bool = False
) -> list[dict[str, Any]]:
    """The objects of ``read_jsonl_numbered`` without their line numbers."""
    return [row for _, row in read_jsonl_numbered(path, repair=repair, check=check, own=own)]


def rewrite_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Replace the whole file with ``rows`` atomically (readers see the old or the new file)."""
    text = "".join(json.dumps(json_safe(r), ensure_ascii=False, default=str) + "\n" for r in rows)
    atomic_write_text(path, text)
