"""The checkpoints of a run directory: ``checkpoints/step-N``, each written by ``grm.base.atomic_dir``
(``COMPLETE`` marked, an existing one replaced only once the new one is whole), how the run's writer
finds them after a crash (``complete_checkpoints``), and what a checkpoint's driver state holds."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from grm.base import is_complete, own_dir, regular_file_bytes, settle_dir
from grm.orchestrator.errors import RunError
from grm.run_format import read_row

JSON_LIMIT = 64 << 20
"""The most bytes a checkpoint's JSON file (``driver.json``, ``anchors.json``) may hold."""

CHECKPOINT = re.compile(r"\.?(step-\d+)(\..+)?")
"""A checkpoint (``step-N``), or what ``atomic_dir`` keeps beside it while writing or deleting it."""


def complete_checkpoints(root: Path) -> list[Path]:
    """The complete checkpoints under ``root``, oldest first, once the writes and deletions a crash
    cut short are finished or undone (``grm.base.settle_dir``): after a crash at any point of a
    checkpoint's write, overwrite or pruning, a complete checkpoint is here. The run's writer only."""
    own_dir(root, RunError)
    where = root
    try:
        if root.is_dir():
            for name in sorted({m.group(1) for p in root.iterdir() if (m := CHECKPOINT.fullmatch(p.name))}):
                where = root / name
                settle_dir(where)
            where = root
        done = [p for p in root.glob("step-*") if p.name[5:].isdigit() and is_complete(own_dir(p, RunError))]
    except OSError as e:
        raise RunError(f"{where}: cannot list or settle the checkpoints ({e.strerror or e})") from None
    return sorted(done, key=lambda p: int(p.name[5:]))


def _read_json(path: Path) -> Any:
    raw = regular_file_bytes(path, RunError, limit=JSON_LIMIT, own=True)  # a FIFO would block, /dev/zero never end
    if raw is None:
        raise RunError(f"{path}: cannot read the checkpoint (missing)")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RunError(f"{path}: cannot read the checkpoint ({str(e)[:200]})") from None


def driver_state(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's ``driver.json`` (step, prompt stream) with ``anchors`` when it has ``anchors.json``;
    RunError naming the file when it is of a format this grm cannot read (``grm.run_format``)."""
    state = _read_json(ckpt / "driver.json")
    if isinstance(state, dict):
        read_row("checkpoint", state, str(ckpt / "driver.json"), RunError)
    if not isinstance(state, dict) or type(state.get("step")) is not int or not isinstance(state.get("stream"), dict):
        raise RunError(f"{ckpt / 'driver.json'}: not a checkpoint's driver state (an integer step and a stream)")
    if (ckpt / "anchors.json").exists():
        state["anchors"] = _read_json(ckpt / "anchors.json")
    return state


def failure_words(cause: BaseException, latest: Path | None, root: Path) -> str:
    """A failed checkpoint write in words. torch.save reports a full disk as an "iostream error",
    so the free space is compared with what the last checkpoint took."""
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    free = shutil.disk_usage(root).free
    need = sum(f.stat().st_size for f in latest.rglob("*") if f.is_file()) if latest is not None else 0
    if free < need:
        return f"No space left on device: a checkpoint takes {need / 2**20:.0f} MiB, {free / 2**20:.0f} MiB are free"
    first = str(cause).strip().splitlines()[-1] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {first}; {free / 2**20:.0f} MiB free"
