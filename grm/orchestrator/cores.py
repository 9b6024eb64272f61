"""Idle cores lent between a run's processes on one node, while phases overlap (async mode).

Each process of a run (policy rank, judge replica, reference) owns its pool's share of threads. In
async mode phases overlap by design, but not all the time: in the peer benchmark the policy pool
waits ~4 s a step for the judge pool, whose core count stays at its share meanwhile. Here each
process marks itself busy while a phase call runs (``busy``) in a ledger every process of the run
on that node maps (a small file in ``/dev/shm``, one slot of two bytes per process: its share and
its busy flag). Before each forward of its models (``watch``) a busy process takes its share of the
node's run cores divided among the busy processes: the cores of idle processes are lent to the
busy ones in proportion to their shares, and return at the lender's next forward call once it is
busy again (so a lent core may be oversubscribed for one forward call). Nothing is lent between
nodes or to another run: the cores counted are the shares the run's processes on this node hold.
"""

from __future__ import annotations

import itertools
import mmap
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.process import release_free_memory

SLOTS = 256
"""Processes a run's ledger has room for on one node (two bytes each)."""


@dataclass(frozen=True)
class CoreShare:
    """Where a process keeps its place in the run's ledger: the run's ``key`` (one file per run on
    each node), its ``slot`` (unique in the run) and its own ``threads``."""

    key: str
    slot: int
    threads: int


class CoreShares:
    """Hands each process of a run its ``CoreShare`` when the run lends idle cores (``lends``,
    ``schedule.lends_cores``), else None: one ledger key for the run, a slot per process."""

    def __init__(self, lends: bool) -> None:
        self.key = uuid.uuid4().hex[:16] if lends else None
        self.slots = itertools.count()

    def __call__(self, threads: int) -> CoreShare | None:
        return None if self.key is None else CoreShare(self.key, next(self.slots), threads)


def remove(key: str | None, directory: str | Path = "/dev/shm") -> None:
    """The run's ledger file on this node, gone (the run has ended)."""
    if key is not None:
        ledger_path(key, directory).unlink(missing_ok=True)


def ledger_path(key: str, directory: str | Path = "/dev/shm") -> Path:
    return Path(directory) / f"grm-cores-{key}"


class CoreLedger:
    """One process's view of the run's ledger on its node (see the module docstring)."""

    def __init__(self, share: CoreShare, directory: str | Path = "/dev/shm") -> None:
        if not 0 <= share.slot < SLOTS:
            raise ValueError(f"core ledger slot {share.slot} outside 0..{SLOTS - 1}")
        self.share = share
        self.path = ledger_path(share.key, directory)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)  # /dev/shm is shared: never through a planted link
        try:
            if os.fstat(fd).st_size < 2 * SLOTS:
                os.ftruncate(fd, 2 * SLOTS)  # zeros; never shrinks a file another process filled
            self.map = mmap.mmap(fd, 2 * SLOTS)
        finally:
            os.close(fd)
        self.map[2 * share.slot] = min(255, max(1, share.threads))
        self.map[2 * share.slot + 1] = 0
        self.depth = 0
        self.current = share.threads
        self.peak = share.threads
        """The most threads a forward of this process ran with since the last ``take_peak``."""

    def threads(self) -> int:
        """Threads for this process now: its share, or while busy its proportion of the run's
        cores on this node among the busy processes."""
        own = self.share.threads
        if not self.depth:
            return own
        data = self.map[: 2 * SLOTS]
        shares, flags = data[0::2], data[1::2]
        cores = sum(shares)
        busy = sum(s for s, f in zip(shares, flags, strict=True) if f)
        return max(own, cores * own // max(busy, own))

    def refresh(self, *_: Any) -> None:
        """Set this process's torch threads to ``threads()`` (a forward pre-hook: ``watch``)."""
        n = self.threads()
        if n != self.current:
            set_threads(n)
            self.current = n
        self.peak = max(self.peak, n)

    def watch(self, *modules: Any) -> None:
        """Refresh the thread count before each forward of these (top-level) torch modules and of
        each of their layers (the elements of their ``ModuleList``s), and before each layer's
        backward (a hook on its output): a training micro-batch's forward and backward take seconds,
        and a core lent to them returns within a layer. None and repeated modules are skipped."""
        import torch

        seen: set[int] = set()
        for m in modules:
            if m is None or id(m) in seen or not isinstance(m, torch.nn.Module):
                continue
            seen.add(id(m))
            m.register_forward_pre_hook(self.refresh)
            for stack in m.modules():
                if isinstance(stack, torch.nn.ModuleList):
                    for layer in stack:
                        layer.register_forward_pre_hook(self.refresh)
                        layer.register_forward_hook(self._before_backward)

    def _before_backward(self, module: Any, args: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        if getattr(out, "requires_grad", False):
            out.register_hook(self._refresh_grad)

    def _refresh_grad(self, grad: Any) -> None:
        self.refresh()

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A phase call: marked busy for its duration (nested calls count once); on the way out the
        process returns to its own share, and its freed memory to the system."""
        self.depth += 1
        self.map[2 * self.share.slot + 1] = 1
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth:
                self.map[2 * self.share.slot + 1] = 0
                if self.current != self.share.threads:
                    set_threads(self.share.threads)
                    self.current = self.share.threads
                release_free_memory()

    def take_peak(self) -> int:
        """The most threads a forward ran with since the last call (then reset to the current);
        what a call ran with when read right after it."""
        out, self.peak = self.peak, self.current
        return out


def set_threads(n: int) -> None:
    """This process's torch (and OpenMP) threads: its pool's share, its phase's, or what it is lent."""
    import torch

    os.environ["OMP_NUM_THREADS"] = str(n)
    torch.set_num_threads(n)


class NoLedger:
    """What a process without lending holds: the same calls, its own threads throughout."""

    def watch(self, *modules: Any) -> None:
        pass

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A phase call; on the way out its freed memory goes back to the system."""
        try:
            yield
        finally:
            release_free_memory()

    def take_peak(self) -> int:
        """This process's threads (never lent, so what a call ran with)."""
        import torch

        return torch.get_num_threads()


def ledger(share: CoreShare | None) -> CoreLedger | NoLedger:
    """The process's ledger for ``share``, or a ``NoLedger`` when nothing is lent (sync mode, or
    ``schedule.overlap_threads: pool``) or ``/dev/shm`` is not there to hold it."""
    if share is None or not Path("/dev/shm").is_dir():
        return NoLedger()
    return CoreLedger(share)
