"""A process that dies at a chosen filesystem operation, for crash tests of durable writes.

``crash_at(k)`` counts every filesystem call grm's writers make (open, mkdir, rename, unlink,
rmdir, fsync, ...) and from the k-th one on makes each raise ``Crash``: the process is dead, so no
cleanup code after it may touch the disk either (a SIGKILL runs no ``except`` block). Running a
write under ``crash_at(k)`` for k = 1, 2, ... until it completes puts a crash between every pair of
its operations. ``fail_at(k, errno)`` makes only the k-th call fail with that OSError (a full disk),
and the code's own cleanup runs.
"""

from __future__ import annotations

import builtins
import errno as errno_codes
import io
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

OS_CALLS = ("open", "mkdir", "rename", "replace", "unlink", "remove", "rmdir", "fsync", "ftruncate", "truncate", "scandir")


class Crash(BaseException):
    """The process died here (a BaseException: ``except Exception`` cleanup does not run either)."""


class Faults:
    def __init__(self, at: int, fail: Callable[[str], BaseException], sticky: bool) -> None:
        self.at, self.fail, self.sticky = at, fail, sticky
        self.calls = 0
        self.fired = False

    def tick(self, name: str) -> None:
        self.calls += 1
        if (self.fired and self.sticky) or self.calls == self.at:
            self.fired = True
            raise self.fail(name)


def _wrap(faults: Faults, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        faults.tick(name)
        return fn(*args, **kwargs)

    return call


@contextmanager
def _patched(faults: Faults, monkeypatch: Any) -> Iterator[Faults]:
    with monkeypatch.context() as m:
        for name in OS_CALLS:
            m.setattr(os, name, _wrap(faults, f"os.{name}", getattr(os, name)))
        real_open = io.open

        def opened(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            faults.tick(f"open({mode})")
            return real_open(file, mode, *args, **kwargs)

        m.setattr(io, "open", opened)
        m.setattr(builtins, "open", opened)
        m.setattr(shutil, "rmtree", _wrap(faults, "shutil.rmtree", shutil.rmtree))
        yield faults


def crash_at(k: int, monkeypatch: Any) -> Any:
    """Die at the k-th filesystem call: it and every later one raise ``Crash``."""
    return _patched(Faults(k, lambda name: Crash(f"killed at {name}"), sticky=True), monkeypatch)


def fail_at(k: int, monkeypatch: Any, code: int = errno_codes.ENOSPC) -> Any:
    """Fail the k-th filesystem call with OSError ``code`` (the calls after it succeed)."""
    return _patched(Faults(k, lambda name: OSError(code, os.strerror(code), name), sticky=False), monkeypatch)
