"""The policy actor's rollout side: the engine its rollouts generate with, and how the trainer's new
weights reach it (``PolicyActor.sync``).

- ``hf``: an engine on every rank, generating with the trainer's own module when the dtypes agree
  (torch backend, fp32: nothing to copy) or with a second copy loaded in the engine's dtype;
- ``sglang``: servers on the pool's GPUs, driven by rank 0's engine: given ``urls``, or launched by
  every rank on its own bundle (``grm.orchestrator.policy_servers``) and connected once all have
  started. New weights reach them by broadcast over a weight-update group (every rank takes part:
  ZeRO-3 gathers bucket by bucket; ``grm.orchestrator.weight_broadcast``) or from disk.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grm.config.policy import PolicySpec
from grm.orchestrator.policy_servers import ServerInfo, launches_servers, start_rank_servers
from grm.orchestrator.role_actor import engine_dtype

if TYPE_CHECKING:
    import torch

    from grm.training import TrainerBackend


class RolloutEngine:
    """The rollout engine of one policy rank (None on ranks other than 0 of an sglang policy) and
    its weight routing."""

    def __init__(
        self, policy: PolicySpec, rank: int, ranks: int, device: torch.device, tok: Any, train_model: Any, shared: bool
    ) -> None:
        from grm.engines import build_engine
        from grm.models.dtype import resolve_dtype
        from grm.models.loading import load_model

        self.policy, self.device, self.tok, self.shared = policy, device, tok, shared
        hf = policy.engine.type == "hf"
        has_engine = hf or rank == 0  # sglang: rank 0 drives the servers of the whole pool
        own: dict[str, Any] = {}
        if hf and has_engine:
            dtype = resolve_dtype(policy.engine.dtype, device)
            own = {"model_obj": train_model if shared else load_model(policy.model, dtype or "fp32")[0], "device": device}
        self.launched, self.servers = start_rank_servers(policy, rank, ranks) if launches_servers(policy) else ([], [])
        """(sglang, no urls) The servers this rank started and what rank 0 is told of them."""
        now = has_engine and not launches_servers(policy)
        self.engine: Any = build_engine(policy.engine, policy.model, tokenizer=tok, **own) if now else None
        self.weight_sync: str | None = getattr(policy.engine, "weight_sync", None)
        self.broadcaster: Any = None
        if now:
            self._broadcast_to(self.engine)

    def _broadcast_to(self, engine: Any) -> None:
        """With ``weight_sync: broadcast``, the group that carries new weights to ``engine``'s servers."""
        import ray

        if self.weight_sync == "broadcast" and engine is not None:
            from grm.orchestrator.weight_broadcast import Broadcaster

            backend = "nccl" if self.device.type == "cuda" else "gloo"
            self.broadcaster = Broadcaster(engine, backend, ray.util.get_node_ip_address())

    def connect(self, servers: Sequence[ServerInfo]) -> None:
        """(rank 0) The engine over every rank's launched servers, in replica order."""
        from grm.engines import build_engine

        urls = [s["url"] for s in servers]
        self.engine = build_engine(self.policy.engine, self.policy.model, tokenizer=self.tok, launched=urls)
        self._broadcast_to(self.engine)

    def placement(self) -> dict[str, Any]:
        """placement.json's engine fields: its dtype, the weight-sync mode, the servers this rank launched."""
        sync = {"weight_sync": self.weight_sync} if self.weight_sync else {}
        servers = {"servers": self.servers} if self.servers else {}
        return {**engine_dtype(self.engine), **sync, **servers}

    def push(self, trainer: TrainerBackend, version: int) -> tuple[float, bool | None]:
        """The trainer's weights into the engine, which then serves ``version``: (seconds, whether
        they went by disk; None for an in-process engine). Every rank calls it (ZeRO-3 gathers)."""
        from grm.training.sync import push_weights

        if self.shared:  # the engine generates with the trainer's own module
            self.engine.version = version
            return 0.0, None
        if self.weight_sync == "broadcast":
            from grm.training.weight_group import BUCKET_BYTES

            buckets = trainer.weight_buckets(BUCKET_BYTES)
            if self.broadcaster is not None:
                secs = self.broadcaster.push(buckets, version)
                return secs, self.broadcaster.mode == "disk"
            start = time.perf_counter()  # a rank without the engine takes part in the gathers
            for _ in buckets:
                pass
            return time.perf_counter() - start, None
        state = trainer.state_dict()
        secs = push_weights(self.engine, state, version) if self.engine is not None else 0.0
        return secs, True if self.weight_sync == "disk" else None
