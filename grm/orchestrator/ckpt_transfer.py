"""Checkpoints without a shared filesystem: files between a policy rank's node and the driver's run
directory through Ray's object store.

Before a save, the driver writes a marker named after a fresh token into the checkpoint's temp dir
(``MARKER``). A rank that sees it writes its ZeRO shard straight there (a shared filesystem, or the
driver's node); a rank that does not has written it to its own node's disk under the same path, and
sends the files back (``pack``: each file in chunks of at most ``CHUNK`` bytes, put in the object
store), then deletes its copy; the driver writes them into the checkpoint (``unpack``) before it is
sealed. A resume goes the other way: the driver asks every rank whether it sees the checkpoint
(the marker again); if one does not, the driver puts the checkpoint's files in the object store and
that rank writes them to its disk, loads, and deletes them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

CHUNK = 64 * 1024 * 1024
MARKER = ".driver-sees-{token}"

Shipped = list[tuple[str, list[Any]]]
"""Files in transit: (path relative to the checkpoint, its chunks' object refs) each."""


def mark(path: Path, token: str) -> Path:
    """The driver's marker in checkpoint ``path``."""
    marker = path / MARKER.format(token=token)
    marker.write_text(token)
    return marker


def sees(path: str | Path, token: str | None) -> bool:
    """This process sees the driver's checkpoint directory (no token: assume it does)."""
    return token is None or (Path(path) / MARKER.format(token=token)).is_file()


def pack(path: str | Path, *, remove: bool = False) -> Shipped:
    """Every file under ``path`` (but markers) into the object store, each under its final name
    (a rank other than 0 writes into its trainer's staged ``.policy.tmp``, which only rank 0
    renames, on its own node); ``remove`` deletes them after."""
    import ray

    root, out = Path(path), []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".driver-sees-")):
        chunks = []
        with f.open("rb") as fh:
            while block := fh.read(CHUNK):
                chunks.append(ray.put(block))
        out.append((unstaged(f.relative_to(root).as_posix()), chunks))
    if remove:
        shutil.rmtree(root, ignore_errors=True)
    return out


def unstaged(rel: str) -> str:
    """``rel`` with every staged directory (``.NAME.tmp``, ``grm.base.atomic_dir``) named as it ends up."""
    parts = [p[1:-4] if p.startswith(".") and p.endswith(".tmp") and len(p) > 5 else p for p in rel.split("/")]
    return "/".join(parts)


def merge_staged(root: str | Path) -> None:
    """Move the files left in staged directories under ``root`` (a rank that saw the driver's
    checkpoint while rank 0, on another node, did not: nobody renamed its ``.policy.tmp`` there)
    into the directories they were staged for."""
    base = Path(root)
    for staged in sorted(base.glob(".*.tmp")):
        if not staged.is_dir():
            continue
        final = base / unstaged(staged.name)
        for f in sorted(p for p in staged.rglob("*") if p.is_file()):
            target = final / f.relative_to(staged)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                os.replace(f, target)
        shutil.rmtree(staged, ignore_errors=True)


def together() -> None:
    """A barrier of the policy's ranks (none with one rank)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def unpack(shipped: Shipped, dest: str | Path) -> int:
    """Write ``shipped`` under ``dest`` (one chunk in memory at a time; a file two ranks on one
    node both sent, once); the bytes written."""
    import ray

    root, total, done = Path(dest), 0, set()
    for rel, chunks in shipped:
        if rel in done:
            continue
        done.add(rel)
        target = (root / rel).resolve()
        if root.resolve() not in target.parents:
            raise ValueError(f"{rel!r} is not a path inside the checkpoint")
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as fh:
            for ref in chunks:
                block = ray.get(ref)
                fh.write(block)
                total += len(block)
            fh.flush()
            os.fsync(fh.fileno())
    return total


def concat(parts: list[Shipped]) -> Shipped:
    """The ranks' shipments as one."""
    return [item for part in parts for item in part]
