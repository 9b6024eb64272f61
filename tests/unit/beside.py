"""Importing a script that lives beside the package (benchmarks/, scripts/) for its unit tests."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def script(folder: str, name: str) -> Iterator[ModuleType]:
    """``ROOT/folder/name.py`` imported with its folder on ``sys.path`` (its own sibling imports work)
    while the block runs."""
    path = str(ROOT / folder)
    sys.path.insert(0, path)
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(path)
