"""Row sources shared by training prompts and evaluation data: a .json/.jsonl/.csv/.parquet file,
a saved ``datasets`` directory, or a builtin generated set.

JSON, JSON lines and CSV are read with the standard library, row by row: a bad row is named by its
line, values keep their types (a CSV cell is the text it holds; an empty cell is missing), and a
column of mixed types is not refused for want of one Arrow type. Parquet files and saved
``datasets`` directories go through ``datasets``.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from grm.base import GrmError
from grm.data.builtin import SETS


class DataError(GrmError):
    """Bad data: the message names the source and, where it applies, the row and column."""


def load_rows(source: str) -> list[dict[str, Any]]:
    """Rows of a .json/.jsonl/.csv/.parquet file, a saved datasets dir, or builtin:NAME."""
    if source.startswith("builtin:"):
        name = source.removeprefix("builtin:")
        if name not in SETS:
            raise DataError(f"unknown builtin data set '{name}'; known: {', '.join(SETS)}")
        return SETS[name]()
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_dir() or path.suffix == ".parquet":
        rows = _datasets_rows(path)
    elif path.suffix in (".json", ".jsonl"):
        rows = _json_rows(path, _text(path))
    elif path.suffix == ".csv":
        rows = _csv_rows(path, _text(path))
    else:
        raise DataError(
            f"{path}: unsupported data file type '{path.suffix}'; use .json, .jsonl, .csv, .parquet or a saved datasets dir"
        )
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _text(path: Path) -> str:
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(f"{path}: empty file, no rows")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line}: not valid UTF-8 (byte 0x{raw[e.start]:02x}); save the file as UTF-8") from None


def _object(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f'{path}: {where}: expected a JSON object ({{"prompt": ...}}), found {type(value).__name__}')
    return value


def _json_rows(path: Path, text: str) -> list[dict[str, Any]]:
    """A JSON list of objects (or one object), else JSON lines: one object per non-blank line."""
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            if text.lstrip().startswith("["):
                raise DataError(f"{path}: line {e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
            data = None  # maybe JSON lines in a .json file
        except (ValueError, RecursionError) as e:  # an int past 4300 digits; nested too deeply
            raise DataError(f"{path}: invalid JSON: {type(e).__name__}: {str(e)[:200]}") from None
        else:
            if isinstance(data, dict):
                return [data]
            if not isinstance(data, list):
                raise DataError(f"{path}: expected a list of JSON objects, found {type(data).__name__}")
            return [_object(r, path, f"row {i}") for i, r in enumerate(data)]
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {n}: invalid JSON: {e.msg} (column {e.colno})") from None
        except (ValueError, RecursionError) as e:  # an int past 4300 digits; nested too deeply
            raise DataError(f"{path}: line {n}: invalid JSON: {type(e).__name__}: {str(e)[:200]}") from None
        rows.append(_object(value, path, f"line {n}"))
    return rows


def _csv_rows(path: Path, text: str) -> list[dict[str, Any]]:
    """Rows under the header line; every cell is its text, an empty cell is missing (None)."""
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # the default 128 KiB refuses long responses
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[dict[str, Any]] = []
    try:
        header = next(reader, None)
        if not header:
            raise DataError(f"{path}: line 1: no header line naming the columns")
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            raise DataError(f"{path}: line 1: duplicate column(s) {twice}")
        for cells in reader:
            if not any(cells):
                continue
            if len(cells) > len(header):
                raise DataError(f"{path}: line {reader.line_num}: {len(cells)} cells, the header names {len(header)} columns")
            rows.append({c: (v if v != "" else None) for c, v in zip(header, cells + [""] * len(header), strict=False)})
    except csv.Error as e:
        raise DataError(f"{path}: line {reader.line_num}: invalid CSV: {e}") from None
    return rows


def _datasets_rows(path: Path) -> list[dict[str, Any]]:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        if path.is_dir():
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[next(iter(ds))]
        else:
            if path.stat().st_size == 0:
                raise DataError(f"{path}: empty file, no rows")
            ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
        return ds.to_list()
    except DataError:
        raise
    except Exception as e:  # datasets and pyarrow raise many types for unreadable files
        first = (str(e).splitlines() or [""])[0][:300]
        raise DataError(f"{path}: cannot read data: {type(e).__name__}: {first}") from None
