"""The SGLang servers a policy launches (``engine: {type: sglang}`` without ``urls``): every rank
starts its own share on the GPUs Ray gave its bundle (``grm.engines.sglang_launch.server_plan``: server
``j`` on rank ``j % ranks``), listening on its node's address when the policy spans bundles; rank 0,
which drives them, is then connected to all of them (``PolicyActor.connect_servers``). Before, rank 0
launched every server, and Ray shows a rank only its own bundle's GPUs.
"""

from __future__ import annotations

from typing import Any

from grm.config.policy import PolicySpec

ServerInfo = dict[str, Any]
"""One launched server: ``replica``, ``rank``, ``url``, ``gpus`` (CUDA's names for them)."""


def launches_servers(policy: PolicySpec) -> bool:
    """The policy's ranks launch its rollout servers (an sglang engine given no ``urls``)."""
    return policy.engine.type == "sglang" and not policy.engine.urls


def start_rank_servers(policy: PolicySpec, rank: int, ranks: int) -> tuple[list[Any], list[ServerInfo]]:
    """This rank's servers, started and healthy, and what to tell rank 0 of them."""
    import ray

    from grm.engines.sglang_launch import launch_servers, server_plan, visible_gpus
    from grm.models import resolve_model

    spec = policy.engine
    gpus = visible_gpus()
    slots = [s for s in server_plan(spec.replicas, spec.tp, ranks, len(gpus)) if s.rank == rank]
    host = "127.0.0.1" if ranks == 1 else ray.util.get_node_ip_address()  # rank 0 may be on another node
    servers = launch_servers(spec, resolve_model(policy.model), slots, host) if slots else []
    info = [
        {"replica": s.replica, "rank": rank, "url": p.base_url, "gpus": [gpus[g] for g in s.gpus]}
        for s, p in zip(slots, servers, strict=True)
    ]
    return servers, info


def servers_in_order(per_rank: list[list[ServerInfo]]) -> list[ServerInfo]:
    """Every rank's servers, by replica index."""
    return sorted((s for rank in per_rank for s in rank), key=lambda s: s["replica"])
