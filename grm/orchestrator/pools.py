"""Pools -> Ray placement groups; roles -> actors placed in their pool's group."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from grm.base import GrmError
from grm.config.pipeline import PipelineSpec, PoolSpec


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
    ray.init(num_cpus=cpus, resources=custom or None, object_store_memory=1_000_000_000,
             include_dashboard=False, log_to_driver=True)


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
    for jr, name in zip(cfg.judges, judge_names):
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
                raise PlacementError(f"pool '{name}' needs {amount * spec.nodes:g} {key} but the Ray cluster has {have:g}"
                                     f" (cluster resources: {', '.join(f'{k}={v:g}' for k, v in sorted(total.items()) if not k.startswith('node:'))})")
        strategy = "STRICT_SPREAD" if spec.nodes > 1 else "STRICT_PACK"
        pg = placement_group([dict(bundle) for _ in range(spec.nodes)], strategy=strategy, name=f"grm-{name}")
        ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
        if not ready:
            ray.util.remove_placement_group(pg)
            raise PlacementError(f"pool '{name}' ({bundle} x {spec.nodes} node(s)) could not be placed within {timeout_s:.0f} s;"
                                 " other pools or jobs may hold the resources")
        pools[name] = Pool(name, spec, pg, roles[name])
    return pools
