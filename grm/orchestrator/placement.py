"""Placement: pools -> Ray placement groups; roles -> actors placed in their pool's group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grm.base import GrmError
from grm.config.pipeline import PipelineSpec, PoolSpec
from grm.config.resolve import LoadedPipeline
from grm.judges.limits import CallLimits, call_limits
from grm.judges.types import Sample
from grm.orchestrator.cores import CoreShares
from grm.orchestrator.pool_wait import placement_wait_reason
from grm.orchestrator.ray_head import start_ray


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
        of competing with them for the same cores."""
        hosted = "reference" in self.roles and any(r.startswith("judge:") for r in self.roles)
        return [r for r in self.roles if not (hosted and r == "reference")]

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


def role_pools(cfg: PipelineSpec, judge_names: list[str]) -> dict[str, list[str]]:
    """Pool name -> roles placed on it (roles sharing a pool are colocated)."""
    out: dict[str, list[str]] = {name: [] for name in cfg.pools}
    out[cfg.policy.pool].append("policy")
    if cfg.reference and cfg.reference.pool != cfg.policy.pool:
        out[cfg.reference.pool].append("reference")
    for jr, name in zip(cfg.judges, judge_names, strict=True):
        if jr.pool:
            out[jr.pool] += judge_roles(name, jr.replicas)
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


# --------------------------------------------------------------------------- roles -> actors


def judge_roles(name: str, replicas: int) -> list[str]:
    """Role names of a judge's actors: ``judge:NAME``, or ``judge:NAME#i`` for each of several replicas."""
    return [f"judge:{name}"] if replicas == 1 else [f"judge:{name}#{i}" for i in range(replicas)]


@dataclass
class JudgeHandle:
    """A judge as the scheduler sees it, wherever it runs: actors on its pool (model judges, one
    per replica) or this process (rule verifiers without a pool). ``submit`` returns a Ray ref or
    the results."""

    name: str
    weight: float
    required: bool
    actor: Any = None
    """Its first replica's actor (the one hosting a reference placed on the judge's pool)."""
    local: Any = None
    limits: CallLimits = CallLimits()
    """Deadline and concurrency cap of the judge's calls (from its spec's ``limits``; the cap is
    per replica); a local judge's calls run at once in this process and are not timed."""
    replicas: list[Any] = field(default_factory=list)
    """Every actor of the judge (``replicas: R`` in the pipeline), ``actor`` first."""

    def __post_init__(self) -> None:
        if self.actor is not None and not self.replicas:
            self.replicas = [self.actor]
        if self.replicas:
            self.actor = self.replicas[0]

    def role(self, replica: int) -> str:
        """Replica ``replica``'s role name (placement.json, lost-role messages)."""
        return judge_roles(self.name, len(self.replicas))[replica]

    def submit(self, groups: list[list[Sample]], replica: int = 0) -> Any:
        """A local judge's ``Judged`` answer (results, cost), or a Ray ref to an actor's."""
        if self.local is not None:
            from grm.judges.cost import costed

            return costed(self.local, self.local.score_groups, groups)
        return self.replicas[replica].score_groups.remote(groups)

    def probe(self, replica: int) -> Any:
        """A ref that resolves once replica ``replica`` is up again (Ray queues calls to a
        restarting actor), or fails with ``RayActorError`` when its restarts are spent."""
        return self.replicas[replica].pid.remote()


@dataclass
class Roles:
    """Every placed role: the policy actor, the reference (its own actor, hosted in a judge's
    actor, colocated in the policy's, or none) and the judges."""

    pools: dict[str, Pool]
    policy: Any
    reference: Any
    judges: list[JudgeHandle]
    cores_key: str | None = None
    """The run's core ledger (``grm.orchestrator.cores``), when its processes lend idle cores."""

    def placement(self) -> dict[str, dict[str, Any]]:
        """Node, pid, resources and pool of every role, reported from inside its actor."""
        import ray

        refs = {role: actor.where.remote() for role, actor in self.policy.actor_roles().items()}
        if self.reference is not None:
            refs["reference"] = self.reference.where.remote("reference")
        refs.update({j.role(i): a.where.remote() for j in self.judges for i, a in enumerate(j.replicas)})
        info = started(ray, refs)
        for k, v in info.items():
            v["pool"] = next(p.name for p in self.pools.values() if k in p.roles or k.split("#")[0] in p.roles)
            v["bundle"] = self.pools[v["pool"]].bundle_of(k)
            if k.startswith("policy"):
                v["rank"] = v["bundle"]
        return info


def started(ray: Any, refs: dict[str, Any]) -> dict[str, Any]:
    """``{role: ray.get(ref)}``, taking each answer as it comes: a role whose actor failed to start
    (a policy rank whose model would not load) stops the run now with ``RoleLost``, instead of
    after the roles before it, which may wait for it (rank 0 at the rendezvous, up to
    ``train.backend.collective_timeout_s``)."""
    from grm.orchestrator.health import RoleLost

    pending = {ref: role for role, ref in refs.items()}
    got = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        role = pending.pop(ready[0])
        try:
            got[role] = ray.get(ready[0])
        except ray.exceptions.RayActorError as e:
            lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
            why = lines[-1][:300] if lines else type(e).__name__  # a creation task's error ends its text
            raise RoleLost([role], f"its actor failed to start ({why})", role.startswith("policy")) from None
    return {role: got[role] for role in refs}


def start_policy(
    cfg: PipelineSpec,
    loaded: LoadedPipeline,
    algorithm: Any,
    pool: Pool,
    with_reference: bool,
    solo: dict[str, int],
    shares: CoreShares,
) -> Any:
    """The policy's worker group: one PolicyActor, or ``ranks`` of them (one per bundle of its pool)
    joined in one torch.distributed group whose rendezvous is on rank 0's node."""
    from grm.orchestrator.actors import PolicyActor, rendezvous
    from grm.orchestrator.policy_group import PolicyGroup

    args = (cfg, loaded.policy, algorithm)
    hf = loaded.policy.engine.type == "hf"
    if pool.ranks == 1:
        threads = solo.get("policy", pool.threads)
        actor = PolicyActor.options(**pool.options("policy")).remote(*args, threads, with_reference, lend=shares(threads))
        return PolicyGroup([actor], hf)
    import ray

    addr, port = ray.get(rendezvous.options(**{**pool.rank_options(0), "num_cpus": 0}).remote())
    threads = max(1, int(bundles_of(pool.spec, pool.ranks)[0]["CPU"]))
    actors = [
        PolicyActor.options(**pool.rank_options(r)).remote(
            *args, solo.get(f"policy#{r}", threads), with_reference, (r, pool.ranks, addr, port), lend=shares(threads)
        )
        for r in range(pool.ranks)
    ]
    return PolicyGroup(actors, hf)


def place_roles(loaded: LoadedPipeline, algorithm: Any, address: str | None) -> Roles:
    """Start (or join) Ray, reserve every pool and start each role's actor in its pool."""
    from grm.judges import build_judge
    from grm.orchestrator.frozen_actors import JudgeActor, ReferenceActor

    cfg = loaded.spec
    start_ray(address, cfg.pools)
    pools = create_pools(cfg, [j.name for j in loaded.judges])
    solo = phase_threads(cfg, pools)  # sync mode: a phase takes the idle pools' cores too
    shares = CoreShares(cfg.schedule.lends_cores)  # async mode: a busy process takes the cores of those that wait
    remote_ref = cfg.reference is not None and cfg.reference.pool != cfg.policy.pool
    with_ref = cfg.reference is not None and not remote_ref
    policy = start_policy(cfg, loaded, algorithm, pools[cfg.policy.pool], with_ref, solo, shares)
    ref_args = (loaded.policy.model, cfg.train.micro_batch_size)
    # a reference on a judge's pool lives in that judge's actor (see Pool.processes)
    host = next((j for j in loaded.judges if remote_ref and j.spec.mode != "rule" and j.role.pool == cfg.reference.pool), None)  # type: ignore[union-attr]
    reference = None
    if remote_ref and host is None:
        rp = pools[cfg.reference.pool]  # type: ignore[union-attr]
        threads = solo.get("reference", rp.threads)
        reference = ReferenceActor.options(**rp.options("reference")).remote(*ref_args, threads, lend=shares(threads))
    judges = []
    for j in loaded.judges:
        handle = JudgeHandle(j.name, j.role.weight, j.role.required, limits=call_limits(j.spec))
        if j.role.pool is None:
            handle.local = build_judge(j.spec, j.path.parent)
        else:
            jp = pools[j.role.pool]
            # Ray restarts a dead replica; its judge calls are not retried by Ray (see
            # JudgeActor.score_groups) but re-issued by the scheduler, to the other replicas first
            restarts = {"max_restarts": cfg.faults.judge_restarts, "max_task_retries": 2}
            handle.replicas = []
            for i, role in enumerate(judge_roles(j.name, j.role.replicas)):
                threads = solo.get(role, jp.threads_of(role))
                hosted = ref_args if j is host and i == 0 else None
                handle.replicas.append(
                    JudgeActor.options(**restarts, **jp.options(role)).remote(
                        j.spec, str(j.path.parent), threads, hosted, lend=shares(threads)
                    )
                )
            handle.actor = handle.replicas[0]
            if j is host:
                reference = handle.actor
        judges.append(handle)
    return Roles(pools, policy, reference, judges, shares.key)
