"""Lost roles: a role's actor that died for good, or a node hosting roles that left the cluster.

Ray reports an actor's death on the next ``ray.get`` of its work, but a node that vanishes under a
restartable judge (or a reference hosted in it) leaves its calls pending forever: the actor waits to
be re-placed on a bundle that no longer exists. ``NodeWatch`` turns both into one ``RoleLost``
naming the role, its pool and node, which the driver reports (after checkpointing the trained steps
when the policy survived) so ``--resume`` continues once the cluster can hold the pools again.
"""

from __future__ import annotations

import time
from typing import Any

from grm.orchestrator.errors import RunError


class RoleLost(RunError):
    """A role's process or node is gone; ``policy_lost`` says whether the policy went with it."""

    def __init__(self, roles: list[str], detail: str, policy_lost: bool) -> None:
        super().__init__(f"{', '.join(roles)} lost: {detail}")
        self.roles, self.detail, self.policy_lost = roles, detail, policy_lost


class NodeWatch:
    """Checks, at most every ``every_s`` seconds, that every node a role was placed on is alive."""

    def __init__(self, ray: Any, placement: dict[str, dict[str, Any]], every_s: float = 5.0) -> None:
        self.ray, self.placement, self.every_s = ray, placement, every_s
        self.last = time.monotonic()

    def check(self) -> None:
        if time.monotonic() - self.last < self.every_s:
            return
        self.last = time.monotonic()
        lost = self.lost()
        if lost is not None:
            raise lost

    def lost(self) -> RoleLost | None:
        """The roles on nodes that are no longer alive, if any."""
        alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
        lost = [role for role, info in self.placement.items() if info["node_id"] not in alive]
        if not lost:
            return None
        where = sorted({f"node {self.placement[r]['node_id'][:12]} (pool '{self.placement[r]['pool']}')" for r in lost})
        return RoleLost(lost, f"{', '.join(where)} left the Ray cluster", any(r.startswith("policy") for r in lost))

    def get(self, ref: Any, wait_s: float = 5.0) -> Any:
        """``ray.get(ref)`` that gives up with ``RoleLost`` when a node hosting roles dies meanwhile."""
        self.wait(ref, wait_s)
        return self.ray.get(ref)

    def wait(self, ref: Any, wait_s: float = 5.0) -> None:
        """Until ``ref`` is ready (an actor's error included), neither fetched nor copied to this
        node; ``RoleLost`` when a node hosting roles dies meanwhile."""
        while not self.ray.wait([ref], timeout=wait_s, fetch_local=False)[0]:
            self.check()


def actor_lost(error: Exception, roles: Any, placement: dict[str, dict[str, Any]]) -> RoleLost:
    """The ``RoleLost`` for Ray's ``RayActorError`` ``error``: which role's actor it was."""
    actor_id = getattr(error, "actor_id", None)
    handles = {**roles.policy.actor_roles(), "reference": roles.reference}
    handles.update({j.role(i): a for j in roles.judges for i, a in enumerate(j.replicas)})  # judge:NAME#i per replica
    names = [name for name, h in handles.items() if h is not None and actor_id and h._actor_id.hex() == actor_id]
    # a reference hosted in the policy's or a judge's actor dies with it
    role = names[0] if names else "an actor"
    info = placement.get(role, {})
    where = f" (pool '{info['pool']}', pid {info['pid']})" if info else ""
    text = str(error).strip()
    cause = text.splitlines()[0].split(". The task may")[0][:240] if text else type(error).__name__
    return RoleLost([role], f"its actor{where} died ({type(error).__name__}: {cause})", role.startswith("policy"))
