"""Policy weights to served rollout engines (``engine: sglang``, ``weight_sync: broadcast``) over a
process group: the policy actor's rank 0 hosts the group, the servers join it on the first sync,
and every sync then broadcasts the trainer's weights bucket by bucket while the servers receive
them (``SGLangEngine.update_weights_by_broadcast``; ``grm.training.weight_group``). Engines never
import the trainer and the trainer never imports engines: this module joins the two.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from grm.process import free_port
from grm.training.weight_group import WeightGroup

GROUP = "grm_weight_update"
"""The group's name (the servers' ``group_name``)."""
FORM_TIMEOUT_S = 120.0
"""Seconds the servers have to join the group on the first sync."""


class Broadcaster:
    """The weight-update group of one policy actor and its served engine."""

    def __init__(self, engine: Any, backend: str, address: str) -> None:
        """``backend``: nccl (trainer on a GPU) or gloo; ``address``: this node's, which the servers
        connect to."""
        self.engine, self.backend, self.address = engine, backend, address
        self.group: WeightGroup | None = None
        self.mode = "broadcast"
        """``broadcast``, or ``disk`` once the group could not form (``fallback`` says why)."""
        self.fallback: str | None = None

    def push(self, buckets: Iterable[list[tuple[str, Any]]], version: int) -> float:
        """Broadcast every bucket to the servers, which then hold ``version``; the seconds it took
        (the first call forms the group too). When the servers cannot join the group (a refusal, or
        no group within ``FORM_TIMEOUT_S``), this and every later push goes by disk: the buckets are
        gathered into one state dict (every rank still iterates them alike) and the engine loads
        it from safetensors. A failure once the group has formed is the run's."""
        start = time.perf_counter()
        if self.mode == "broadcast" and self.group is None:
            try:
                self._form()
            except Exception as x:  # noqa: BLE001 - any failure to form the group falls back to disk
                self.mode, self.fallback = "disk", f"{type(x).__name__}: {str(x)[:300]}"
                print(f"weight sync: the servers did not join the broadcast group ({self.fallback}); using disk", flush=True)
        if self.mode == "disk":
            state = {name: t.detach().cpu().clone() for bucket in buckets for name, t in bucket}
            self.engine.update_weights(state, version)
        else:
            assert self.group is not None
            self.engine.update_weights_by_broadcast(buckets, version, self.group.broadcast, GROUP)
        return time.perf_counter() - start

    def _form(self) -> WeightGroup:
        port = free_port()
        world = 1 + self.engine.group_ranks
        side = ThreadPoolExecutor(max_workers=2)  # the servers' join and ours must overlap
        try:
            joined = side.submit(self.engine.init_weight_group, self.address, port, world, GROUP, self.backend)
            formed = side.submit(WeightGroup, self.address, port, world, GROUP, self.backend, FORM_TIMEOUT_S)
            wait([joined, formed], timeout=FORM_TIMEOUT_S + 30, return_when=FIRST_EXCEPTION)
            for f in (joined, formed):  # a server's refusal ends the wait at once, and says why
                if f.done() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
            joined.result(timeout=0)
            self.group = formed.result(timeout=0)
        finally:
            side.shutdown(wait=False)  # a group still forming gives up at its own timeout
        return self.group
