"""Why Ray has not reserved a pool: its scheduling state and, per resource, who holds it, read
from Ray's own tables (``create_pools`` reports it when a pool's ``place_wait_s`` runs out)."""

from __future__ import annotations

from typing import Any


def placement_wait_reason(
    table: dict[str, dict[str, Any]],
    waiting: str,
    bundles: list[dict[str, float]],
    total: dict[str, float],
    free: dict[str, float],
) -> str:
    """Why Ray has not reserved the placement group ``waiting``, in words, from Ray's
    ``placement_group_table()``, ``cluster_resources()`` and ``available_resources()``: its
    scheduling state, and for each resource its bundles ask for, how much the cluster has, has free
    and lends to placement groups (naming them). What neither a group nor the free amount accounts
    for is taken by tasks or actors outside any group, or lost in Ray's books: a node restarted at
    the address (host and node-manager port) of one that died can stay booked as full (measured
    with Ray 2.60: the first reservation on it fails to connect and its resources never return)."""
    own = table.get(waiting, {})
    stats = own.get("stats") or {}
    state = stats.get("scheduling_state") or own.get("state", "unknown")
    parts = [f"Ray's state {state} after {stats.get('scheduling_attempt', '?')} attempt(s)"]
    held: dict[str, float] = {}
    holders: dict[str, list[str]] = {}
    for pg_id, info in table.items():
        if pg_id == waiting or info.get("state") == "REMOVED":
            continue
        placed = info.get("bundles_to_node_id") or {}
        for i, bundle in (info.get("bundles") or {}).items():
            if not placed.get(i):
                continue
            for key, amount in bundle.items():
                held[key] = held.get(key, 0.0) + amount
                who = f"'{info.get('name') or pg_id[:12]}' ({info.get('state', '?')}, node {placed[i][:12]})"
                if who not in holders.setdefault(key, []):
                    holders[key].append(who)
    outside = False
    for key in sorted({k for b in bundles for k in b}):
        need = sum(b.get(key, 0.0) for b in bundles)
        have, spare, lent = total.get(key, 0.0), free.get(key, 0.0), held.get(key, 0.0)
        if spare + 1e-9 >= need:
            continue
        line = f"{key}: {need:g} needed, {have:g} in the cluster, {spare:g} free, {lent:g} held by placement groups"
        if holders.get(key):
            line += f" ({', '.join(holders[key])})"
        gone = have - spare - lent
        if gone > 1e-9:
            outside = True
            line += f", {gone:g} taken outside any placement group"
        parts.append(line)
    if outside:
        parts.append(
            "resources taken outside placement groups are held by tasks or actors without a pool, or lost in "
            "Ray's books when a node rejoined at the address of a dead one: restart that node on another "
            "--node-manager-port, or restart the cluster"
        )
    return "; ".join(parts)
