"""Roles: which actor runs each role in its pool's placement group (``place_roles`` starts them),
and the handles the scheduler calls them through (``Roles``, ``JudgeHandle``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from grm.config.judge import JudgeSpec
from grm.config.pipeline import PipelineSpec
from grm.config.resolve import LoadedPipeline
from grm.judges.limits import CallLimits, call_limits
from grm.judges.types import Sample
from grm.orchestrator.cores import CoreShares
from grm.orchestrator.handles import Placement, PolicyHandle, ReferenceHandle
from grm.orchestrator.pools import Pool, bundles_of, create_pools, judge_roles, phase_threads
from grm.orchestrator.ray_head import start_ray
from grm.orchestrator.types import Judged

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

    from grm.judges.base import Judge
    from grm.orchestrator.policy_group import PolicyGroup


@dataclass
class JudgeHandle:
    """A judge as the scheduler sees it, wherever it runs: actors on its pool (model judges, one
    per replica) or this process (rule verifiers without a pool). ``submit`` returns a Ray ref or
    the results."""

    name: str
    weight: float
    required: bool
    actor: ActorHandle | None = None
    """Its first replica's actor (the one hosting a reference placed on the judge's pool)."""
    local: Judge | None = None
    """A judge without a pool, built in this process."""
    limits: CallLimits = CallLimits()
    """Deadline and concurrency cap of the judge's calls (from its spec's ``limits``; the cap is
    per replica); a local judge's calls run at once in this process and are not timed."""
    replicas: list[ActorHandle] = field(default_factory=list)
    """Every actor of the judge (``replicas: R`` in the pipeline), ``actor`` first."""

    def __post_init__(self) -> None:
        if self.actor is not None and not self.replicas:
            self.replicas = [self.actor]
        if self.replicas:
            self.actor = self.replicas[0]

    def role(self, replica: int) -> str:
        """Replica ``replica``'s role name (placement.json, lost-role messages)."""
        return judge_roles(self.name, len(self.replicas))[replica]

    def submit(self, groups: list[list[Sample]], replica: int = 0) -> Judged | ObjectRef[Judged]:
        """A local judge's ``Judged`` answer (results, cost), or a Ray ref to an actor's."""
        if self.local is not None:
            from grm.judges.cost import costed

            return costed(self.local, self.local.score_groups, groups)
        return self.replicas[replica].score_groups.remote(groups)

    def probe(self, replica: int) -> ObjectRef[int]:
        """A ref that resolves once replica ``replica`` is up again (Ray queues calls to a
        restarting actor), or fails with ``RayActorError`` when its restarts are spent."""
        return self.replicas[replica].pid.remote()


@dataclass
class Roles:
    """Every placed role: the policy actor, the reference (its own actor, hosted in a judge's
    actor, colocated in the policy's, or none) and the judges."""

    pools: dict[str, Pool]
    policy: PolicyHandle
    reference: ReferenceHandle | None
    """A reference on a pool of its own or hosted in a judge's actor; None when colocated in the
    policy's actor (its log-probs come with the batch pass) or when the pipeline has none."""
    judges: list[JudgeHandle]
    cores_key: str | None = None
    """The run's core ledger (``grm.orchestrator.cores``), when its processes lend idle cores."""
    envs: list[ActorHandle] = field(default_factory=list)
    """The environment workers (``env: {pool: ...}``), role ``env#i`` each."""

    def placement(self) -> dict[str, Placement]:
        """Node, pid, resources and pool of every role, reported from inside its actor."""
        import ray

        refs = {role: actor.where.remote() for role, actor in self.policy.actor_roles().items()}
        if self.reference is not None:
            refs["reference"] = self.reference.where.remote("reference")
        refs.update({j.role(i): a.where.remote() for j in self.judges for i, a in enumerate(j.replicas)})
        refs.update({f"env#{i}": w.where.remote() for i, w in enumerate(self.envs)})
        info = started(ray, refs)
        for k, v in info.items():
            v["pool"] = next(p.name for p in self.pools.values() if k in p.roles or k.split("#")[0] in p.roles)
            v["bundle"] = self.pools[v["pool"]].bundle_of(k)
            if k.startswith("policy"):
                v["rank"] = v["bundle"]
        return info


def started(ray: ModuleType, refs: dict[str, ObjectRef[Placement]]) -> dict[str, Placement]:
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
    pool: Pool,
    with_reference: bool,
    solo: dict[str, int],
    shares: CoreShares,
    env_workers: Sequence[ActorHandle] = (),
) -> PolicyHandle:
    """The policy's worker group: one PolicyActor, or ``ranks`` of them (one per bundle of its pool)
    joined in one torch.distributed group whose rendezvous is on rank 0's node."""
    from grm.orchestrator.actors import PolicyActor
    from grm.orchestrator.policy_group import PolicyGroup, RankOf, rendezvous

    args = (cfg, loaded.policy)
    hf = loaded.policy.engine.type == "hf"
    if pool.ranks == 1:
        threads = solo.get("policy", pool.threads)
        actor = PolicyActor.options(**pool.options("policy")).remote(
            *args, threads, with_reference, lend=shares(threads), env_workers=env_workers
        )
        return connected(PolicyGroup([actor], hf), loaded)
    import ray

    addr, port = ray.get(rendezvous.options(**{**pool.rank_options(0), "num_cpus": 0}).remote())
    threads = max(1, int(bundles_of(pool.spec, pool.ranks)[0]["CPU"]))
    actors = [
        PolicyActor.options(**pool.rank_options(r)).remote(
            *args,
            solo.get(f"policy#{r}", threads),
            with_reference,
            RankOf(r, pool.ranks, addr, port),
            lend=shares(threads),
            env_workers=env_workers,
        )
        for r in range(pool.ranks)
    ]
    return connected(PolicyGroup(actors, hf), loaded)


def connected(group: PolicyGroup, loaded: LoadedPipeline) -> PolicyGroup:
    """``group``, its rank 0 connected to the sglang servers its ranks launched (if they launch any)."""
    from grm.orchestrator.policy_servers import launches_servers, servers_in_order

    if launches_servers(loaded.policy):
        import ray

        names = ["policy"] if group.ranks == 1 else [f"policy#{r}" for r in range(group.ranks)]
        got = started(ray, {n: a.launched_servers.remote() for n, a in zip(names, group.actors, strict=True)})
        ray.get(group.actors[0].connect_servers.remote(servers_in_order([got[n] for n in names])))
    return group


def place_roles(loaded: LoadedPipeline, address: str | None) -> Roles:
    """Start (or join) Ray, reserve every pool and start each role's actor in its pool."""
    from grm.judges import build_judge
    from grm.orchestrator.env_workers import start_env_workers
    from grm.orchestrator.frozen_actors import JudgeActor, ReferenceActor

    cfg = loaded.spec
    start_ray(address, cfg.pools)
    pools = create_pools(cfg, [j.name for j in loaded.judges])
    solo = phase_threads(cfg, pools)  # sync mode: a phase takes the idle pools' cores too
    shares = CoreShares(cfg.schedule.lends_cores)  # async mode: a busy process takes the cores of those that wait
    remote_ref = cfg.reference is not None and cfg.reference.pool != cfg.policy.pool
    with_ref = cfg.reference is not None and not remote_ref
    envs = start_env_workers(cfg.env, pools[cfg.env.pool]) if cfg.env is not None and cfg.env.pool is not None else []
    policy = start_policy(cfg, loaded, pools[cfg.policy.pool], with_ref, solo, shares, envs)
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
                        replica_spec(j.spec, i), str(j.path.parent), threads, hosted, lend=shares(threads)
                    )
                )
            handle.actor = handle.replicas[0]
            if j is host:
                reference = handle.actor
        judges.append(handle)
    return Roles(pools, policy, reference, judges, shares.key, envs)


def replica_spec(spec: JudgeSpec, index: int) -> JudgeSpec:
    """``spec`` as replica ``index`` runs it: a served judge with ``engine.urls`` talks to its own server."""
    for_replica = getattr(spec.engine, "for_replica", None)
    return spec if for_replica is None else spec.model_copy(update={"engine": for_replica(index)})
