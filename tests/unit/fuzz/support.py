"""What every fuzz module shares: the in-process command line, the failure property, the case count.

The property for user input (YAML, templates, data files) is the one of issue #18: the command
either succeeds, or exits non-zero with a message naming the file (and line, field or row), never a
traceback. ``run_cli`` calls ``grm.cli.main`` in this process, so any exception other than
SystemExit escapes into the test and fails it with the example that raised it.
"""

from __future__ import annotations

import io
import itertools
import re
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings

from grm.cli import main

CASES: Counter[str] = Counter()
"""Examples run per fuzz area; the fuzz conftest prints them in the terminal summary."""

_names = itertools.count()


def count(area: str) -> None:
    CASES[area] += 1


def budget(n: int) -> int:
    """``n`` examples under the default ``fuzz`` profile (100 examples), scaled for the others."""
    return max(1, n * settings.default.max_examples // 100)


def fresh(folder: Path, suffix: str) -> Path:
    """A new file name in ``folder``: each example writes its own file, so nothing cached by path
    (parsed templates, data loaders) can answer for an earlier example."""
    return folder / f"case{next(_names)}{suffix}"


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*argv: str) -> CliResult:
    """``grm ARGV`` in this process; exceptions other than SystemExit propagate (a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse errors, --help
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


def assert_clean_failure(res: CliResult, *files: Path, stream: str = "err", or_names: str | None = None) -> None:
    """A failed command: non-zero, no traceback, and its message names one of ``files`` (or holds
    ``or_names``: a command-line argument at fault, such as an override)."""
    text = res.err if stream == "err" else res.out + res.err
    assert res.code != 0
    assert "Traceback" not in res.err + res.out, res.err
    assert text.strip(), "failed without a message"
    if or_names is not None and or_names in text:
        return
    named = [f for f in files if re.search(re.escape(str(f)) + r"(:\d+)?[: ]", text)]
    assert named, f"message names none of {[str(f) for f in files]}:\n{text}"
