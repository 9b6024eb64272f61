"""The process group of a multi-rank trainer, and how its ranks fail together.

Every collective (and the rendezvous) waits at most ``timeout_s`` for the other ranks
(``train.backend.collective_timeout_s``), then raises. A rank whose trainer call raises tears the
group down (``failing_together``) before the error leaves it, so the peers blocked in a collective
with it fail at once (gloo: "Connection closed by peer", measured under 0.1 s) rather than after the
timeout; the timeout bounds what a teardown cannot reach (a rank that hangs, or NCCL peers, whose
kernels do not notice). Each rank remembers the failure it saw first (``first_failure``), so the
driver can name the rank where it started and why (``grm.orchestrator.policy_group``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

COLLECTIVE_TIMEOUT_S = 1800.0
"""Default wait of a rank for the others in one collective: DeepSpeed's own default (30 min); a
checkpoint's save keeps the other ranks at a barrier while rank 0 writes the model's states."""

# What torch's gloo and NCCL backends say when a peer left or did not come: such an error is the
# consequence of another rank's failure, not its cause.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Timed out waiting", "NCCL", "gloo", "Broken pipe")


@dataclass(frozen=True)
class RankFailure:
    """What one rank saw go wrong first: in which trainer call, the error, and whether it is a
    collective that broke because of another rank (``peer_gone``)."""

    rank: int
    call: str
    error: str
    peer_gone: bool
    at: float
    """time.time() of the failure (the first failure of a group comes before its consequences)."""


_first: RankFailure | None = None


def first_failure() -> RankFailure | None:
    """The failure this process's trainers recorded first (None: none failed)."""
    return _first


def init_distributed(port: int | None = None, timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
    """Start torch.distributed if no launcher did (gloo on CPU, NCCL on GPU); a single process
    unless RANK/WORLD_SIZE/MASTER_* are set (a worker group's actor sets them)."""
    import deepspeed
    import torch
    import torch.distributed as dist

    from grm.process import free_port

    if dist.is_initialized():
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port or free_port()))
    backend = "gloo" if not torch.cuda.is_available() else "nccl"
    deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(seconds=timeout_s))


def abort_collectives() -> None:
    """Tear down this process's process groups: the peers' pending and later collectives with it
    fail now. NCCL is aborted (destroying a group with kernels in flight can hang)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    with contextlib.suppress(Exception):  # a group already broken has nothing left to tear down
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if dist.get_backend() == "nccl" and abort is not None:
            abort()
        else:
            dist.destroy_process_group()


def peer_gone(error: BaseException) -> bool:
    """Whether ``error`` is a collective that broke because another rank left or never came."""
    import torch.distributed as dist

    return isinstance(error, getattr(dist, "DistError", ())) or any(m in str(error) for m in _PEER_GONE)


@contextlib.contextmanager
def failing_together(rank: int, world: int, call: str) -> Iterator[None]:
    """Around a trainer call with collectives: a failure is recorded (the first one of this process)
    and, with several ranks, tears the group down so the others do not wait for this one."""
    global _first
    try:
        yield
    except BaseException as e:
        if _first is None:
            text = str(e).strip().splitlines()
            _first = RankFailure(rank, call, f"{type(e).__name__}: {text[0][:300] if text else ''}", peer_gone(e), time.time())
        if world > 1:
            abort_collectives()
        raise
