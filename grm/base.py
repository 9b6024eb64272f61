"""What every layer of grm shares: the user-error base class and durable file writes.

Imports only the standard library, so any module (config, engines, training, orchestrator) may use
it without pulling in a heavy dependency or running against the import contract.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class GrmError(Exception):
    """An error the user can act on: the CLI prints its message as one line and exits 2, no traceback.

    Every user-facing error class (config, data, judge, engine, run, placement, model store)
    derives from it, so the command line catches this one type.
    """


# --------------------------------------------------------------------------- JSON lines


def json_safe(x: Any) -> Any:
    """``x`` with non-finite floats as None (JSON has no NaN), recursively through dicts and lists."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def append_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append ``rows`` as JSON lines and fsync: once this returns, a SIGKILL cannot lose them."""
    with open(path, "a", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(json_safe(r), ensure_ascii=False, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: str | Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """Every complete line of a JSON-lines file ([] when it does not exist).

    A torn last line (the writer was killed mid-line) is not returned and, with ``repair``, is cut
    off the file so the next append starts on a clean line.
    """
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    good_end = raw.rfind(b"\n") + 1
    if repair and good_end < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return [json.loads(line) for line in raw[:good_end].splitlines() if line.strip()]


def rewrite_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Replace the whole file with ``rows`` atomically (readers see the old or the new file)."""
    text = "".join(json.dumps(json_safe(r), ensure_ascii=False, default=str) + "\n" for r in rows)
    atomic_write_text(path, text)


# --------------------------------------------------------------------------- atomic writes


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file, fsync and one rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@contextmanager
def atomic_dir(path: str | Path, *, is_writer: bool = True) -> Iterator[Path]:
    """Yield a temp dir next to ``path``; on success it replaces ``path`` in one rename.

    A crash inside the block leaves ``path`` as it was (the old checkpoint or nothing): a half
    written directory never sits where a loader would look, and a ``COMPLETE`` marker is written
    last. ``is_writer=False`` (non-zero ranks) only yields the shared temp dir; the writer renames.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    if is_writer:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    try:
        yield tmp
        if not is_writer:
            return
        (tmp / "COMPLETE").write_text("ok\n")
        for p in tmp.rglob("*"):
            if p.is_file():
                with open(p, "rb") as fh:
                    os.fsync(fh.fileno())
    except BaseException:
        if is_writer:  # a failed write (disk full, a crash in the block) leaves no half directory behind
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def check_complete(path: str | Path) -> Path:
    """``path`` if it is a directory ``atomic_dir`` finished, else FileNotFoundError."""
    path = Path(path)
    if not (path / "COMPLETE").is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no COMPLETE marker)")
    return path


# --------------------------------------------------------------------------- network


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (for a server or a process-group rendezvous)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
