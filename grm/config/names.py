"""Names that become path components: a pipeline's run directory (``runs/NAME-TIMESTAMP``), a judge's
gate directory (``RUN/gate/NAME``), a ``builtin:NAME`` asset. One check, made when the YAML loads,
so ``grm validate`` refuses what ``grm run`` would refuse, and again where the path is built."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit, 100 characters at
most: one path component on every filesystem, never ``.`` or ``..``, never hidden, no separator or
NUL, nothing a shell or URL would read differently, and the same bytes whatever the locale."""

RUNS = Path("runs")
"""Where ``grm run`` puts a run directory unless the pipeline's ``out_dir`` says otherwise."""


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot name a file or directory, or None when it can."""
    if NAME.fullmatch(value):
        return None
    if not value:
        return "empty"
    if len(value) > 100:
        return f"{len(value)} characters; at most 100"
    bad = next((c for c in value if not re.fullmatch(r"[A-Za-z0-9._-]", c)), None)
    if bad is not None:
        return f"character {bad!r} is not allowed (letters, digits, '.', '_' and '-' only)"
    return f"must start with a letter or digit, not {value[0]!r}"


def check_name(value: str) -> str:
    """Field validator body: ``value`` as a name that becomes a path component, or ValueError."""
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"{value[:40]!r} cannot name a directory: {problem}")
    return value


SafeName = Annotated[str, AfterValidator(check_name)]
"""A spec's ``name``: it names directories and metric keys."""


def check_out_dir(value: str | None) -> str | None:
    """An explicit run directory: any path the user chooses, but a real one."""
    if value is not None and (not value.strip() or "\x00" in value):
        raise ValueError("must be a path (not empty, no NUL character), or null for runs/NAME-TIMESTAMP")
    return value


def run_dir(name: str, out_dir: str | None, stamp: str) -> Path:
    """The run directory of a pipeline named ``name``: ``out_dir`` when set, else
    ``runs/NAME-STAMP``, one directory inside ``runs/`` (the name is checked again here, so a
    spec built in code without validation cannot lead elsewhere)."""
    if out_dir is not None:
        check_out_dir(out_dir)
        return Path(out_dir)
    return RUNS / f"{check_name(name)}-{check_name(stamp)}"
