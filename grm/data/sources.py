"""Row sources shared by training prompts and evaluation data: a .json/.jsonl/.csv/.parquet file,
a saved ``datasets`` directory, or a builtin generated set.

JSON, JSON lines and CSV are read with the standard library, row by row: each row keeps the file
line it starts on, so every error about it says ``FILE:LINE`` (a CSV row whose quoted cell spans
lines is named by its first line); values keep their types (a CSV cell is the text it holds; an
empty cell is missing), and a column of mixed types is not refused for want of one Arrow type.
Parquet files are read by ``pyarrow`` and saved ``datasets`` directories by ``datasets`` (only
once every file their ``state.json`` names is a regular file inside them); having no lines, their
rows are named ``SOURCE row N``, counted from 0 as ``datasets`` and the default item ids count.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grm.base import regular_file, regular_file_bytes
from grm.data.builtin import SETS
from grm.data.errors import DataError
from grm.jsonl import SURROGATE_WHY, lone_surrogate, parse_failure, parse_jsonl, unique_keys

TEXT_SUFFIXES = (".json", ".jsonl", ".csv")


class Row(dict):  # type: ignore[type-arg]
    """A row of a text data file that knows the 1-based file line it starts on.

    The line travels with the row (through ``--limit`` slices and filters) rather than in a list
    kept beside the rows by index."""

    __slots__ = ("line",)

    def __init__(self, value: dict[str, Any], line: int) -> None:
        super().__init__(value)
        self.line = line


def row_where(source: str, row: Mapping[str, Any], index: int) -> str:
    """How messages name a row: ``SOURCE:LINE`` when it came from a text file, else ``SOURCE row
    INDEX`` (0-based, as ``datasets`` indexes it and the default item id ``row-INDEX`` says)."""
    line = getattr(row, "line", None)
    return f"{source}:{line}" if line is not None else f"{source} row {index}"


def load_rows(source: str) -> list[dict[str, Any]]:
    """Rows of a .json/.jsonl/.csv/.parquet file, a saved datasets dir, or builtin:NAME."""
    if source.startswith("builtin:"):
        name = source.removeprefix("builtin:")
        if name not in SETS:
            raise DataError(f"unknown builtin data set '{name}'; known: {', '.join(SETS)}")
        return SETS[name]()
    path = Path(source).expanduser()
    if path.is_dir():
        if path.suffix in (*TEXT_SUFFIXES, ".parquet"):
            raise DataError(f"{path}: is a directory, not a {path.suffix} file")
        rows = _datasets_rows(path)
    elif path.suffix not in (*TEXT_SUFFIXES, ".parquet") and path.exists():
        raise DataError(
            f"{path}: unsupported data file type '{path.suffix}'; use .json, .jsonl, .csv, .parquet or a saved datasets dir"
        )
    elif path.suffix == ".parquet":
        if not regular_file(path, DataError):  # a FIFO or device is refused before it is opened
            raise DataError(f"{path}: no such file or directory")
        if path.stat().st_size == 0:
            raise DataError(f"{path}: empty file, no rows")
        rows = _datasets_rows(path)
    else:
        raw = regular_file_bytes(path, DataError)
        if raw is None:
            raise DataError(f"{path}: no such file or directory")
        if not raw.strip():
            raise DataError(f"{path}: empty file, no rows")
        if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            raise DataError(f"{path}: the file is UTF-16 (it starts with a UTF-16 byte order mark); save it as UTF-8")
        rows = _csv_rows(path, _text(path, raw)) if path.suffix == ".csv" else _json_rows(path, raw)
    if not rows:
        raise DataError(f"{path}: no rows")
    if "instruction_id_list" in rows[0] and "constraints" not in rows[0]:
        rows = _ifeval_rows(rows, path)
    return rows


def _ifeval_rows(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """An IFEval-style file (``prompt``, ``instruction_id_list``, ``kwargs``) as constraint prompts:
    the rows whose every instruction grm's checkers implement (``grm.data.ifeval``); what was left
    out is said on stderr, once."""
    from grm.data.ifeval import from_ifeval
    from grm.terminal import escape_controls

    kept, skipped = from_ifeval(rows, str(path))
    left = escape_controls(", ".join(f"{k[:80]} {v}" for k, v in skipped.most_common(8)))  # ids are the file's text
    print(
        f"{escape_controls(str(path))}: IFEval rows: {len(kept)} of {len(rows)} kept "
        "(every instruction one grm's checkers implement)" + (f"; left out, by instruction: {left}" if left else ""),
        file=sys.stderr,
    )
    if not kept:
        raise DataError(f"{path}: IFEval rows, but none has only instructions grm's checkers implement")
    return kept


def _text(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 (byte 0x{raw[e.start]:02x}); save the file as UTF-8") from None


def _object(value: Any, path: Path, line: int) -> Row:
    if not isinstance(value, dict):
        raise DataError(f'{path}:{line}: expected a JSON object ({{"prompt": ...}}), found {type(value).__name__}')
    return Row(value, line)


def _json_rows(path: Path, raw: bytes) -> list[dict[str, Any]]:
    """A JSON list of objects (or one object), else JSON lines: one object per non-blank line."""
    if path.suffix == ".json":
        text = _text(path, raw)
        try:
            data = json.loads(text, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as e:
            if text.lstrip().startswith("[") or not _first_line_is_json(text):
                raise DataError(f"{path}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
            data = None  # JSON lines in a .json file
        except (ValueError, RecursionError) as e:  # an int past 4300 digits; nested too deeply
            raise DataError(f"{path}: invalid JSON: {parse_failure(e)}") from None
        else:
            start = _first_line(text)
            if isinstance(data, dict):
                if lone_surrogate(data):
                    raise DataError(f"{path}:{start}: {SURROGATE_WHY}")
                return [Row(data, start)]
            if not isinstance(data, list):
                raise DataError(f"{path}:{start}: expected a list of JSON objects, found {type(data).__name__}")
            rows = [_object(r, path, line) for r, line in zip(data, _element_lines(text), strict=True)]
            for row in rows:
                if lone_surrogate(row):
                    raise DataError(f"{path}:{row.line}: {SURROGATE_WHY}")
            return rows
    return [Row(value, line) for line, value in parse_jsonl(raw, path, DataError)]


_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def _first_line(text: str) -> int:
    return text.count("\n", 0, _WS.match(text).end()) + 1  # type: ignore[union-attr]


def _first_line_is_json(text: str) -> bool:
    """Whether the first non-blank line parses alone: a .json file of JSON lines, not one broken
    document (whose own error is then the one to report)."""
    first = next((ln for ln in text.split("\n") if ln.strip()), "")
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return False
    return True


def _element_lines(text: str) -> list[int]:
    """The 1-based line each element of ``text``'s top-level array starts on (``text`` is valid
    JSON: ``json.loads`` has read it). The standard decoder reads each element from its offset."""
    decoder = json.JSONDecoder()
    i = _WS.match(text).end() + 1  # type: ignore[union-attr]  # past "["
    line, counted, lines = 1, 0, []
    while True:
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if text[i] == "]":
            return lines
        line += text.count("\n", counted, i)
        counted = i
        lines.append(line)
        _, i = decoder.raw_decode(text, i)
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if text[i] == ",":
            i += 1


def _csv_rows(path: Path, text: str) -> list[dict[str, Any]]:
    """Rows under the header line; every cell is its text, an empty cell is missing (None).

    ``strict``: a quote left open, or followed by more text in its cell, is an error naming the
    line, rather than a cell that swallows the rest of the file (then blamed as a missing column).
    """
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # the default 128 KiB refuses long responses
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[dict[str, Any]] = []
    start = 1  # the line the record being read starts on; reader.line_num is the line it ends on
    try:
        header = next(reader, None)
        if not header:
            raise DataError(f"{path}:1: no header line naming the columns")
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            raise DataError(f"{path}:1: duplicate column(s) {twice}")
        start = reader.line_num + 1
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not any(cells):
                continue
            if len(cells) > len(header):
                raise DataError(f"{path}:{line}: {len(cells)} cells, the header names {len(header)} columns")
            cells += [""] * (len(header) - len(cells))
            rows.append(Row({c: (v if v != "" else None) for c, v in zip(header, cells, strict=True)}, line))
    except csv.Error as e:
        if "unexpected end of data" in str(e):
            raise DataError(
                f'{path}:{start}: a quoted cell opened in the row starting here is never closed (no closing ")'
            ) from None
        hint = ' (a quote inside a quoted cell is written twice: "")' if "expected after" in str(e) else ""
        raise DataError(f"{path}:{reader.line_num}: invalid CSV: {e}{hint}") from None
    return rows


def _saved_dataset_files(path: Path) -> Path:
    """The directory of the one split a saved ``datasets`` directory is read from (itself, or the
    first split a ``DatasetDict`` lists), once every file it would open is checked.

    ``state.json`` names the Arrow files ``load_from_disk`` opens, and a crafted one can name
    ``../x`` or ``/etc/...``: a FIFO there blocks the reader for good (past Ctrl-C), any other file
    is read as data. Every ``state.json`` and ``dataset_info.json`` present is a bounded regular
    file, and every data file it names a plain name in its directory of a regular file (a link is
    followed, as a downloaded snapshot's are, but must end at a regular file).
    """
    for meta in ("dataset_info.json", "dataset_dict.json", "state.json"):
        regular_file_bytes(path / meta, DataError, limit=16 << 20)  # refused when not a bounded regular file
    split = path
    if not (path / "state.json").exists():  # datasets reads a DatasetDict only without a top-level state.json
        dict_raw = regular_file_bytes(path / "dataset_dict.json", DataError, limit=1 << 20)
        if dict_raw is None:
            raise DataError(f"{path}: not a saved datasets directory (no state.json); give a data file or a saved dataset")
        try:
            names = json.loads(dict_raw)["splits"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise DataError(f'{path / "dataset_dict.json"}: not a datasets split list ({{"splits": [...]}})') from None
        if not isinstance(names, list) or not names or not all(_plain_name(n) for n in names):
            raise DataError(f"{path / 'dataset_dict.json'}: 'splits' must list split directories by plain name")
        split = path / names[0]
    state_path = split / "state.json"
    raw = regular_file_bytes(state_path, DataError, limit=16 << 20)
    regular_file_bytes(split / "dataset_info.json", DataError, limit=16 << 20)
    if raw is None:
        raise DataError(f"{split}: not a saved datasets directory (no state.json); give a data file or a saved dataset")
    try:
        names = [f["filename"] for f in json.loads(raw)["_data_files"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise DataError(f"{state_path}: not a datasets state file (no '_data_files' list of filenames)") from None
    for name in names:
        if not _plain_name(name):
            raise DataError(f"{state_path}: data file {str(name)[:100]!r} is not a file name inside {split}")
        try:
            mode = (split / name).stat().st_mode
        except OSError as e:
            raise DataError(f"{split / name}: cannot read ({e.strerror or e})") from None
        if not stat.S_ISREG(mode):  # a FIFO never ends a read, a device never ends it either
            raise DataError(f"{split / name}: not a regular file (a FIFO, socket or device)")
    return split


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def _datasets_rows(path: Path) -> list[dict[str, Any]]:
    split = _saved_dataset_files(path) if path.is_dir() else None
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        if split is not None:
            return datasets.Dataset.load_from_disk(str(split)).to_list()
        import pyarrow.parquet as pq  # read directly: datasets' parquet builder would copy it into ~/.cache

        return pq.read_table(str(path)).to_pylist()
    except Exception as e:  # datasets and pyarrow raise many types for unreadable files
        first = (str(e).splitlines() or [""])[0][:300]
        raise DataError(f"{path}: cannot read data: {type(e).__name__}: {first}") from None
