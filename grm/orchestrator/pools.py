"""Pools: each becomes one Ray placement group (its bundles reserved before any actor starts), holds
the roles the pipeline places on it, and shares its CPUs among their processes as torch threads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grm.base import GrmError
from grm.config.pipeline import PipelineSpec, PoolSpec
from grm.orchestrator.pool_wait import placement_wait_reason


class PlacementError(GrmError):
    """A pool cannot be placed on the cluster; the message says what is missing."""


def bundles_of(spec: PoolSpec, ranks: int = 1) -> list[dict[str, float]]:
    """The pool's placement bundles: one per node, or for a pool holding a ``ranks``-rank policy
    one per rank (``ranks / nodes`` per node, each with that share of a node's resources)."""
    per_node = ranks // spec.nodes if ranks > 1 else 1
    bundle: dict[str, float] = {"CPU": spec.cpus / per_node}
    if spec.gpus:
        bundle["GPU"] = spec.gpus / per_node
    bundle.update({k: v / per_node for k, v in spec.resources.items()})
    return [dict(bundle) for _ in range(spec.nodes * per_node)]


def strategy_of(spec: PoolSpec, bundles: int) -> str:
    """One node: every bundle on it; one bundle per node: each on another node; several per node:
    spread (Ray's best effort, so ``create_pools`` checks the nodes it got)."""
    if spec.nodes == 1:
        return "STRICT_PACK"
    return "STRICT_SPREAD" if bundles == spec.nodes else "SPREAD"


@dataclass
class Pool:
    name: str
    spec: PoolSpec
    group: Any
    roles: list[str]
    ranks: int = 1
    """Policy ranks on this pool: with more than one, each rank has a bundle (and the pool) to itself."""
    nodes: tuple[str, ...] = ()
    """Node id of each bundle, as Ray placed them."""

    def rank_options(self, rank: int) -> dict[str, Any]:
        """Ray actor options for policy rank ``rank``: its bundle, all of it."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        b = bundles_of(self.spec, self.ranks)[rank]
        opts: dict[str, Any] = {
            "num_cpus": b["CPU"],
            "scheduling_strategy": PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=rank),
        }
        if "GPU" in b:
            opts["num_gpus"] = b["GPU"]
        extra = {k: v for k, v in b.items() if k not in ("CPU", "GPU")}
        if extra:
            opts["resources"] = extra
        return opts

    @property
    def processes(self) -> list[str]:
        """Roles with an actor process of their own: a reference placed on a judge's pool is
        hosted inside that judge's actor, so its passes queue behind the judge's calls instead
        of competing with them for the same cores. Environment workers (``env#i``) take no share:
        their tools run in subprocesses of their own."""
        hosted = "reference" in self.roles and any(r.startswith("judge:") for r in self.roles)
        return [r for r in self.roles if not (hosted and r == "reference") and not r.startswith("env#")]

    @property
    def threads(self) -> int:
        """torch threads for each actor in this pool's first bundle (its CPUs shared by its processes)."""
        return self.threads_of("")

    def bundle_of(self, role: str) -> int:
        """The bundle (node) of a role on a pool of one bundle per node: replica ``i`` of a judge
        (``judge:NAME#i``) on bundle ``i mod nodes``, every other role on the first."""
        if "#" not in role or role.startswith("policy"):
            return int(role.split("#")[1]) if role.startswith("policy#") else 0
        return int(role.split("#")[1]) % len(bundles_of(self.spec, self.ranks))

    def peers(self, role: str) -> list[str]:
        """The processes sharing ``role``'s bundle (itself included)."""
        return [r for r in self.processes if self.bundle_of(r) == self.bundle_of(role)] or [role]

    def threads_of(self, role: str) -> int:
        return max(1, self.spec.cpus // len(self.peers(role)))

    def options(self, role: str) -> dict[str, Any]:
        """Ray actor options placing ``role`` in its bundle with its share of the bundle's CPUs."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        share = 1.0 / len(self.peers(role))
        opts: dict[str, Any] = {
            "num_cpus": self.spec.cpus * share,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=self.bundle_of(role)
            ),
        }
        if self.spec.gpus:
            opts["num_gpus"] = self.spec.gpus * share
        if self.spec.resources:
            opts["resources"] = {k: v * share for k, v in self.spec.resources.items()}
        return opts


def judge_roles(name: str, replicas: int) -> list[str]:
    """Role names of a judge's actors: ``judge:NAME``, or ``judge:NAME#i`` for each of several replicas."""
    return [f"judge:{name}"] if replicas == 1 else [f"judge:{name}#{i}" for i in range(replicas)]


def role_pools(cfg: PipelineSpec, judge_names: list[str]) -> dict[str, list[str]]:
    """Pool name -> roles placed on it (roles sharing a pool are colocated)."""
    out: dict[str, list[str]] = {name: [] for name in cfg.pools}
    out[cfg.policy.pool].append("policy")
    if cfg.reference and cfg.reference.pool != cfg.policy.pool:
        out[cfg.reference.pool].append("reference")
    for jr, name in zip(cfg.judges, judge_names, strict=True):
        if jr.pool:
            out[jr.pool] += judge_roles(name, jr.replicas)
    if cfg.env is not None and cfg.env.pool is not None:
        out[cfg.env.pool] += [f"env#{i}" for i in range(cfg.env.workers)]
    return out


def missing_resources(cfg: PipelineSpec, total: dict[str, float], used: list[str]) -> list[str]:
    """What the cluster (``ray.cluster_resources()``) lacks to hold the ``used`` pools, in words."""
    need: dict[str, dict[str, float]] = {}
    for name in used:
        ranks = cfg.train.backend.ranks if name == cfg.policy.pool else 1
        for b in bundles_of(cfg.pools[name], ranks):
            for key, amount in b.items():
                need.setdefault(key, {}).setdefault(name, 0.0)
                need[key][name] += amount
    have = ", ".join(f"{k}={v:g}" for k, v in sorted(total.items()) if not k.startswith(("node:", "object_store", "memory")))
    out = []
    for key, by_pool in sorted(need.items()):
        if sum(by_pool.values()) > total.get(key, 0.0) + 1e-9:
            pools = ", ".join(f"pool '{p}' needs {v:g} {key}" for p, v in by_pool.items())
            out.append(f"{pools}: {sum(by_pool.values()):g} {key} in all, the cluster has {total.get(key, 0.0):g}")
    return [f"{m} (cluster resources: {have})" for m in out]


def create_pools(cfg: PipelineSpec, judge_names: list[str]) -> dict[str, Pool]:
    """One placement group per pool that has roles; a clear error if the cluster cannot hold it,
    or if Ray has not reserved a pool within its ``place_wait_s`` (naming what holds the resources)."""
    import ray
    from ray.util.placement_group import placement_group

    total = ray.cluster_resources()
    roles = role_pools(cfg, judge_names)
    missing = missing_resources(cfg, total, [n for n in cfg.pools if roles[n]])
    if missing:
        raise PlacementError(f"the Ray cluster cannot hold the pools: {'; '.join(missing)}")
    pools = {}
    for name, spec in cfg.pools.items():
        if not roles[name]:
            continue
        ranks = cfg.train.backend.ranks if name == cfg.policy.pool else 1
        bundles = bundles_of(spec, ranks)
        pg = placement_group(bundles, strategy=strategy_of(spec, len(bundles)), name=f"grm-{name}")
        ready, _ = ray.wait([pg.ready()], timeout=spec.place_wait_s)
        if not ready:
            why = placement_wait_reason(
                ray.util.placement_group_table(), pg.id.hex(), bundles, ray.cluster_resources(), ray.available_resources()
            )
            ray.util.remove_placement_group(pg)
            raise PlacementError(
                f"pool '{name}' ({len(bundles)} bundle(s) of {bundles[0]} over {spec.nodes} node(s)) could not be "
                f"placed within {spec.place_wait_s:g} s (pools.{name}.place_wait_s): {why}"
            )
        table = ray.util.placement_group_table(pg)["bundles_to_node_id"]
        nodes = tuple(table[i] for i in range(len(bundles)))
        if len(set(nodes)) != spec.nodes:
            ray.util.remove_placement_group(pg)
            raise PlacementError(f"pool '{name}' asks for {spec.nodes} nodes; Ray placed its bundles on {len(set(nodes))}")
        pools[name] = Pool(name, spec, pg, roles[name], ranks, nodes)
    return pools


def phase_threads(cfg: PipelineSpec, pools: dict[str, Pool]) -> dict[str, int]:
    """Role -> torch threads of its process while its phase runs, when phases run alone
    (``schedule.phases_alone``: sync mode): the CPUs of every pool's bundles on the role's node,
    shared by the processes of one phase there. The phases: the policy's ranks (rollout, batch
    pass, training, sync), the judges' actors (every judge of a step at once), a reference actor of
    its own (its pass follows the batch pass). Never fewer than the pool's own share; empty when
    phases overlap (async mode, ``stream_prompts``, ``sync_threads: pool``) or Ray's nodes are unknown."""
    if not cfg.schedule.phases_alone or any(not p.nodes for p in pools.values()):
        return {}
    cpus: dict[str, float] = {}
    own: dict[str, tuple[str, int]] = {}
    """role -> (node, its pool's share of threads)"""
    for p in pools.values():
        bundles = bundles_of(p.spec, p.ranks)
        for b, node in zip(bundles, p.nodes, strict=True):
            cpus[node] = cpus.get(node, 0.0) + b["CPU"]
        for role in p.processes:
            if role == "policy" and p.ranks > 1:
                for r in range(p.ranks):
                    own[f"policy#{r}"] = (p.nodes[r], max(1, int(bundles[r]["CPU"])))
            else:
                own[role] = (p.nodes[p.bundle_of(role)], p.threads_of(role))

    def phase(role: str) -> str:
        return role.split("#")[0] if role.startswith("policy") else role.split(":")[0]

    out = {}
    for role, (node, mine) in own.items():
        peers = sum(1 for r, (n, _) in own.items() if n == node and phase(r) == phase(role))
        out[role] = max(mine, int(cpus[node] // peers))
    return out
