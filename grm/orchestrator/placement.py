"""Placement: pools -> Ray placement groups; roles -> actors placed in their pool's group."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from grm.base import GrmError
from grm.config.pipeline import PipelineSpec, PoolSpec
from grm.config.resolve import LoadedPipeline
from grm.judges.limits import CallLimits, call_limits
from grm.judges.types import Sample


class PlacementError(GrmError):
    """A pool cannot be placed on the cluster; the message says what is missing."""


def start_ray(address: str | None, pools: dict[str, PoolSpec]) -> None:
    """Join ``address`` or start a local Ray sized for the pools (dashboard off, capped object store)."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if address:
        ray.init(address=address, log_to_driver=True)
        return
    cpus = os.cpu_count() or 1
    custom: dict[str, float] = {}
    for p in pools.values():
        for k, v in p.resources.items():
            custom[k] = custom.get(k, 0) + v * p.nodes
    ray.init(
        num_cpus=cpus, resources=custom or None, object_store_memory=1_000_000_000, include_dashboard=False, log_to_driver=True
    )


@dataclass
class Pool:
    name: str
    spec: PoolSpec
    group: Any
    roles: list[str]

    @property
    def processes(self) -> list[str]:
        """Roles with an actor process of their own: a reference placed on a judge's pool is
        hosted inside that judge's actor, so its passes queue behind the judge's calls instead
        of competing with them for the same cores."""
        hosted = "reference" in self.roles and any(r.startswith("judge:") for r in self.roles)
        return [r for r in self.roles if not (hosted and r == "reference")]

    @property
    def threads(self) -> int:
        """torch threads for each actor on this pool (the pool's CPUs shared by its processes)."""
        return max(1, self.spec.cpus // max(1, len(self.processes)))

    def options(self, role: str) -> dict[str, Any]:
        """Ray actor options placing ``role`` in this pool's first bundle with its share of CPUs."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        share = 1.0 / max(1, len(self.processes))
        opts: dict[str, Any] = {
            "num_cpus": self.spec.cpus * share,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=0),
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
            out[jr.pool].append(f"judge:{name}")
    return out


def create_pools(cfg: PipelineSpec, judge_names: list[str], timeout_s: float = 60.0) -> dict[str, Pool]:
    """One placement group per pool that has roles; a clear error if the cluster cannot hold it."""
    import ray
    from ray.util.placement_group import placement_group

    total = ray.cluster_resources()
    roles = role_pools(cfg, judge_names)
    pools = {}
    for name, spec in cfg.pools.items():
        if not roles[name]:
            continue
        bundle: dict[str, float] = {"CPU": float(spec.cpus)}
        if spec.gpus:
            bundle["GPU"] = float(spec.gpus)
        bundle.update({k: float(v) for k, v in spec.resources.items()})
        for key, amount in bundle.items():
            have = total.get(key, 0.0)
            if amount * spec.nodes > have:
                raise PlacementError(
                    f"pool '{name}' needs {amount * spec.nodes:g} {key} but the Ray cluster has {have:g}"
                    f" (cluster resources: {', '.join(f'{k}={v:g}' for k, v in sorted(total.items()) if not k.startswith('node:'))})"  # noqa: E501
                )
        strategy = "STRICT_SPREAD" if spec.nodes > 1 else "STRICT_PACK"
        pg = placement_group([dict(bundle) for _ in range(spec.nodes)], strategy=strategy, name=f"grm-{name}")
        ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
        if not ready:
            ray.util.remove_placement_group(pg)
            raise PlacementError(
                f"pool '{name}' ({bundle} x {spec.nodes} node(s)) could not be placed within {timeout_s:.0f} s;"
                " other pools or jobs may hold the resources"
            )
        pools[name] = Pool(name, spec, pg, roles[name])
    return pools


# --------------------------------------------------------------------------- roles -> actors


@dataclass
class JudgeHandle:
    """A judge as the scheduler sees it, wherever it runs: an actor on its pool (model judges) or
    this process (rule verifiers without a pool). ``submit`` returns a Ray ref or the results."""

    name: str
    weight: float
    required: bool
    actor: Any = None
    local: Any = None
    limits: CallLimits = CallLimits()
    """Deadline and concurrency cap of the judge's calls (from its spec's ``limits``); a local
    judge's calls run at once in this process and are not timed."""

    def submit(self, groups: list[list[Sample]]) -> Any:
        if self.local is not None:
            return self.local.score_groups(groups)
        return self.actor.score_groups.remote(groups)


@dataclass
class Roles:
    """Every placed role: the policy actor, the reference (its own actor, hosted in a judge's
    actor, colocated in the policy's, or none) and the judges."""

    pools: dict[str, Pool]
    policy: Any
    reference: Any
    judges: list[JudgeHandle]

    def placement(self) -> dict[str, dict[str, Any]]:
        """Node, pid, resources and pool of every role, reported from inside its actor."""
        import ray

        refs = {"policy": self.policy.where.remote()}
        if self.reference is not None:
            refs["reference"] = self.reference.where.remote()
        refs.update({f"judge:{j.name}": j.actor.where.remote() for j in self.judges if j.actor is not None})
        info = {k: ray.get(v) for k, v in refs.items()}
        for k, v in info.items():
            v["pool"] = next(p.name for p in self.pools.values() if k in p.roles)
        return info


def place_roles(loaded: LoadedPipeline, algorithm: Any, address: str | None) -> Roles:
    """Start (or join) Ray, reserve every pool and start each role's actor in its pool."""
    from grm.judges import build_judge
    from grm.orchestrator.actors import JudgeActor, PolicyActor, ReferenceActor

    cfg = loaded.spec
    start_ray(address, cfg.pools)
    pools = create_pools(cfg, [j.name for j in loaded.judges])
    remote_ref = cfg.reference is not None and cfg.reference.pool != cfg.policy.pool
    pp = pools[cfg.policy.pool]
    policy = PolicyActor.options(**pp.options("policy")).remote(
        cfg, loaded.policy, algorithm, pp.threads, cfg.reference is not None and not remote_ref
    )
    ref_args = (loaded.policy.model, cfg.train.micro_batch_size)
    # a reference on a judge's pool lives in that judge's actor (see Pool.processes)
    host = next((j for j in loaded.judges if remote_ref and j.spec.mode != "rule" and j.role.pool == cfg.reference.pool), None)  # type: ignore[union-attr]
    reference = None
    if remote_ref and host is None:
        rp = pools[cfg.reference.pool]  # type: ignore[union-attr]
        reference = ReferenceActor.options(**rp.options("reference")).remote(*ref_args, rp.threads)
    judges = []
    for j in loaded.judges:
        handle = JudgeHandle(j.name, j.role.weight, j.role.required, limits=call_limits(j.spec))
        if j.role.pool is None:
            handle.local = build_judge(j.spec, j.path.parent)
        else:
            jp = pools[j.role.pool]
            handle.actor = JudgeActor.options(
                max_restarts=cfg.faults.judge_restarts, max_task_retries=2, **jp.options(f"judge:{j.name}")
            ).remote(j.spec, str(j.path.parent), jp.threads, ref_args if j is host else None)
            if j is host:
                reference = handle.actor
        judges.append(handle)
    return Roles(pools, policy, reference, judges)
