"""Types of the ``grm`` command line's arguments: every path and number is checked as the line is
parsed, before anything loads or runs.

A wrong value is refused by argparse as one line naming the argument and the value, exit 2
(``error: grm eval: argument --out: runs/x: is a regular file, expected a directory``).

Paths are checked with ``os.stat`` and ``os.access`` and never opened here: opening a FIFO for
reading blocks until some writer comes (forever, on the command line), and a device reads without
end (``/dev/zero``) or from the terminal (``/dev/tty``). A path must therefore be a regular file
or a directory, as the argument expects, that exists and can be read (and written, for an output
directory). ``builtin:NAME`` values are left to the loaders, which know the names. A later open
can still meet a file swapped in the meantime; the loaders handle those errors too.

Numbers are integers or finite floats in the option's range; argparse's own ``type=int`` let
``--batch-size -1`` through (no batches, then a traceback) and ``--limit -1`` drop the last row.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from grm.terminal import one_line

if TYPE_CHECKING:
    from grm.evaluation.length_control import LengthControl

BUILTIN = "builtin:"


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line: ``error: grm eval: argument --out: ...``. The usage it
    prints first by default takes six lines for ``grm eval`` and pushes the reason off a small
    screen; ``--help`` still shows it. Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        prog = one_line(self.prog)
        self.exit(2, f"error: {prog}: {one_line(message)} (see {prog} --help)\n")


_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse(value: str, why: str) -> argparse.ArgumentTypeError:
    shown = one_line(value) if value else "''"
    if len(shown) > 200:  # a pasted file, not a path: say what is wrong, not all of it
        shown = shown[:200] + "..."
    return argparse.ArgumentTypeError(f"{shown}: {why}")


def _stat(value: str) -> os.stat_result:
    """``os.stat`` of the path (links followed), or the argument error saying why there is none."""
    if not value:
        raise _refuse(value, "empty path")
    path = os.path.expanduser(value)
    try:
        return os.stat(path)
    except ValueError:  # os.stat's answer to a NUL character
        raise _refuse(value, "a path cannot hold a NUL character") from None
    except OSError as e:
        if e.errno == errno.ENOENT and os.path.islink(path):
            why = f"a broken symbolic link (to {one_line(os.readlink(path))})"
        elif e.errno == errno.ELOOP:
            why = "a symbolic link loop (too many levels of symbolic links)"
        elif e.errno == errno.ENOENT:
            why = "no such file or directory"
        elif e.errno == errno.ENOTDIR:
            why = "not found: a part of the path before the last is not a directory"
        elif e.errno == errno.EACCES:
            why = "permission denied (a directory on the path cannot be searched)"
        else:
            why = (e.strerror or str(e)).lower()
        raise _refuse(value, why) from None


def _kind(st: os.stat_result) -> str:
    return next((name for test, name in _KINDS if test(st.st_mode)), "not a file or directory")


def _expect(value: str, st: os.stat_result, *wanted: str) -> None:
    if _kind(st) not in wanted:
        raise _refuse(value, f"is {_kind(st)}, expected {' or '.join(wanted)}")


def _readable(value: str, st: os.stat_result, write: bool = False) -> None:
    is_dir = stat.S_ISDIR(st.st_mode)
    mode = os.R_OK | (os.X_OK if is_dir else 0) | (os.W_OK if write else 0)
    if not os.access(os.path.expanduser(value), mode):
        need = "readable and writable" if write else "readable"
        raise _refuse(value, f"permission denied: the {'directory' if is_dir else 'file'} is not {need}")


# --------------------------------------------------------------------------- paths


def existing_file(value: str) -> str:
    """A readable regular file (symbolic links followed)."""
    st = _stat(value)
    _expect(value, st, "a regular file")
    _readable(value, st)
    return value


def existing_dir(value: str) -> str:
    """A readable directory."""
    st = _stat(value)
    _expect(value, st, "a directory")
    _readable(value, st)
    return value


def writable_dir(value: str) -> str:
    """A directory that exists and that grm adds files to (``--resume``, ``grm rescore``)."""
    st = _stat(value)
    _expect(value, st, "a directory")
    _readable(value, st, write=True)
    return value


def spec(value: str) -> str:
    """A YAML spec: ``builtin:NAME`` or a readable regular file."""
    return value if value.startswith(BUILTIN) else existing_file(value)


def spec_list(value: str) -> str:
    """Comma-separated specs (``grm eval``'s JUDGE[,JUDGE2...]), each as ``spec``."""
    parts = [p for p in value.split(",") if p]
    if not parts:
        raise _refuse(value, "no judge named (expected JUDGE.yaml or builtin:NAME, comma separated)")
    for p in parts:
        spec(p)
    return value


def data_source(value: str) -> str:
    """A data set: ``builtin:NAME``, a readable file, or a directory (a saved ``datasets`` set)."""
    if value.startswith(BUILTIN):
        return value
    st = _stat(value)
    _expect(value, st, "a regular file", "a directory")
    _readable(value, st)
    return value


def model_ref(value: str) -> str:
    """A policy (``--policy``, ``--against``): a path that exists must be a readable file or
    directory; anything else is left to the resolver as a model alias or a hub id."""
    if value.startswith(BUILTIN) or not os.path.lexists(os.path.expanduser(value)):
        return value
    return data_source(value)


def out_dir(value: str) -> str:
    """An output directory: an existing writable directory, or a path whose nearest existing
    ancestor is a writable directory (it is created there)."""
    if not value:
        raise _refuse(value, "empty path")
    path = os.path.expanduser(value)
    if os.path.lexists(path):
        st = _stat(value)  # a broken link or a loop is refused here, not followed into
        _expect(value, st, "a directory")
        _readable(value, st, write=True)
        return value
    try:
        os.stat(path)
    except FileNotFoundError:
        pass  # to be created
    except (OSError, ValueError):  # a NUL, a loop, a file or an unsearchable directory on the path
        _stat(value)
    ancestor = next(a for a in Path(path).absolute().parents if os.path.lexists(a))
    st = _stat(str(ancestor))
    if not stat.S_ISDIR(st.st_mode) or not os.access(ancestor, os.W_OK | os.X_OK):
        raise _refuse(value, f"cannot be created: {one_line(str(ancestor))} is not a writable directory")
    return value


# --------------------------------------------------------------------------- numbers


_ASCII_INT = re.compile(r"\s*[-+]?\d+\s*", re.ASCII)
_ASCII_FLOAT = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*", re.ASCII)


def integer(low: int, high: int | None = None, note: str = "") -> Callable[[str], int]:
    """An integer in ``[low, high]`` (``high`` None: no upper bound)."""
    bounds = f"from {low} to {high}" if high is not None else f">= {low}"

    def parse(value: str) -> int:
        try:
            if not _ASCII_INT.fullmatch(value):  # int() also takes "1_000" and other scripts' digits
                raise ValueError(value)
            n = int(value)
        except ValueError:
            raise _refuse(value, f"not an integer (expected an integer {bounds}{note})") from None
        if n < low or (high is not None and n > high):
            raise _refuse(value, f"out of range (expected an integer {bounds}{note})")
        return n

    return parse


def number(low: float, high: float | None = None, note: str = "") -> Callable[[str], float]:
    """A finite float in ``[low, high]``."""
    bounds = f"from {low:g} to {high:g}" if high is not None else f">= {low:g}"

    def parse(value: str) -> float:
        try:
            if not _ASCII_FLOAT.fullmatch(value):  # float() also takes "1_0", other scripts' digits, "infinity"
                raise ValueError(value)
            x = float(value)
        except ValueError:
            raise _refuse(value, f"not a number (expected a number {bounds}{note})") from None
        if not math.isfinite(x) or x < low or (high is not None and x > high):
            raise _refuse(value, f"out of range (expected a finite number {bounds}{note})")
        return x

    return parse


positive = integer(1)
seed = integer(0, 2**31 - 1, note="; servers read seeds as 32-bit integers")
port = integer(0, 65535, note="; 0: a free port")
non_negative = number(0.0)


def length_control(text: str) -> LengthControl:
    from grm.evaluation.length_control import parse_length_control

    try:
        return parse_length_control(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


LENGTH_CONTROL_HELP = (
    "also report the pairs' swap-combined accuracy with length controlled: regress (remove the margin's "
    "linear dependence on the length difference, slope fitted on these pairs) or penalty:COEF (the longer "
    "response loses COEF per character beyond the pair's median)"
)


_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"


def hub_repo(value: str) -> str:
    """A Hugging Face Hub repo id, ``OWNER/NAME`` (letters, digits, '.', '_', '-'; no '..')."""
    import re

    if not re.fullmatch(f"{_HUB_PART}/{_HUB_PART}", value) or ".." in value:
        raise argparse.ArgumentTypeError(f"{one_line(value)!r} is not a Hub repo id like OWNER/NAME")
    return value
