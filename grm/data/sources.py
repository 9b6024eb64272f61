"""Row sources shared by training prompts and evaluation data: a .json/.jsonl/.csv/.parquet file,
a saved ``datasets`` directory, or a builtin generated set."""

from __future__ import annotations

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
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        if path.is_dir():
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[next(iter(ds))]
        else:
            kinds = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
            if path.suffix not in kinds:
                raise DataError(
                    f"{path}: unsupported data file type '{path.suffix}'; use .json, .jsonl, .csv, .parquet or a saved datasets dir"  # noqa: E501
                )
            if path.stat().st_size == 0:
                raise DataError(f"{path}: empty file, no rows")
            ds = datasets.load_dataset(kinds[path.suffix], data_files=str(path), split="train")
    except DataError:
        raise
    except Exception as e:  # datasets raises many types for unreadable files
        raise DataError(f"{path}: cannot read data: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from None
    rows = ds.to_list()
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows
