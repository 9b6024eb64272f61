"""A sample file (``grm judge render|try --sample FILE``): one sample object or a list of them, read
strictly, every error naming the file and the item.

What a data loader would refuse, a sample file is refused for too, when it is read: JSON's
non-numbers (``NaN``, ``Infinity``, and a literal such as ``1e400`` too large for a float, which
Python's reader turns into infinity), a lone surrogate, and a ``metadata.constraints`` or
``metadata.checklist`` that ``grm.data`` would not accept from a data row. Messages quote the path
and the item on one line (``grm.terminal.one_line``): a path or id holding a line break cannot split
the ``error:`` line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from grm.base import regular_file_bytes
from grm.data.checklists import METADATA_KEY as CHECKLIST_KEY
from grm.data.checklists import read_checklist
from grm.data.constraint_cell import read_constraints
from grm.data.constraints import METADATA_KEY as CONSTRAINTS_KEY
from grm.data.errors import DataError
from grm.jsonl import parse_failure, surrogate_at, unique_keys
from grm.judges.errors import JudgeError
from grm.judges.types import Sample
from grm.terminal import one_line


class _NotANumber(ValueError):
    """A JSON number Python would read as NaN or an infinity."""


def _refuse_constant(name: str) -> Any:
    raise _NotANumber(f"{name} is not a JSON number (JSON has no NaN or infinity)")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _NotANumber(f"{text[:40]} is too large for a number (it reads as infinity)")
    return v


def read_samples(path: str) -> list[Sample]:
    """The samples of the file at ``path``; a ``JudgeError`` naming it (and the item) otherwise."""
    p = Path(path)
    name = one_line(str(p))
    try:
        raw = regular_file_bytes(p, JudgeError)  # a FIFO or a device is refused, not opened
    except JudgeError as e:
        raise JudgeError(one_line(str(e))) from None
    if raw is None:
        raise JudgeError(f"{name}: no such file")
    try:
        data = json.loads(
            raw.decode("utf-8-sig"),  # a byte order mark is harmless
            object_pairs_hook=unique_keys,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
        )
    except UnicodeDecodeError:
        raise JudgeError(f"{name}: not valid UTF-8") from None
    except json.JSONDecodeError as e:
        raise JudgeError(f"{name}:{e.lineno}: invalid JSON: {e.msg}") from None
    except _NotANumber as e:
        raise JudgeError(f"{name}: invalid JSON: {e}") from None
    except (ValueError, RecursionError) as e:  # an integer past 4300 digits; nesting too deep; a key twice
        raise JudgeError(f"{name}: invalid JSON: {parse_failure(e)}") from None
    found = surrogate_at(data, pairs_ok=False)  # JSON may escape one ("\\ud800"); no prompt can carry it to a model
    if found is not None:
        raise JudgeError(f"{name}: {found[1]}")
    items = data if isinstance(data, list) else [data]
    if not items:
        raise JudgeError(f"{name}: an empty list; give a sample object or a list of them")
    out = []
    for i, d in enumerate(items):
        where = name + (f" item {i}" if isinstance(data, list) else "")
        s = Sample.from_dict(d, where=where)
        check_metadata(s, where)
        out.append(s)
    return out


def check_metadata(s: Sample, where: str) -> None:
    """``s.metadata``'s constraints and checklist checked as a data row's are (``grm.data``): a
    ``JudgeError`` starting with ``where``. Empty constraints are left to the verifier, which masks
    a sample with nothing to verify."""
    try:
        got = s.metadata.get(CONSTRAINTS_KEY)
        if got is not None and got != []:
            read_constraints(got, f"{where}: metadata.{CONSTRAINTS_KEY}")
        if CHECKLIST_KEY in s.metadata:
            read_checklist(s.metadata[CHECKLIST_KEY], f"{where}: metadata.{CHECKLIST_KEY}")
    except DataError as e:
        raise JudgeError(str(e)) from None
