"""``grm run --dry-run``: the placement a pipeline needs, checked against a real Ray cluster (local
or ``--address``) without loading a model.

Prints roles -> pools -> bundles -> nodes with the threads and GPUs each process gets. When the
cluster can hold every pool, the placement groups are reserved (so the node of every bundle is
Ray's real answer) and released again; when it cannot, the plan is printed with what is missing and
the command fails with a ``PlacementError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grm.config.resolve import LoadedPipeline, load_pipeline
from grm.orchestrator.canary import describe as judge_checks
from grm.orchestrator.pools import (
    PlacementError,
    Pool,
    bundles_of,
    create_pools,
    missing_resources,
    phase_threads,
    role_pools,
)
from grm.orchestrator.ray_head import start_ray, stop_ray


def describe(loaded: LoadedPipeline, pools: dict[str, Pool]) -> list[str]:
    """One line per pool, then one per process placed on it (bundle, node, threads, GPUs); in sync
    mode also the threads a process takes while its phase runs alone (``schedule.sync_threads``); in
    async mode that it borrows the cores of processes that wait (``schedule.overlap_threads``)."""
    cfg = loaded.spec
    solo = phase_threads(cfg, pools)

    def alone(role: str) -> str:
        if cfg.schedule.lends_cores:
            return " (more while others on its node wait)"
        return f" ({solo[role]} while its phase runs alone)" if role in solo else ""

    lines = []
    for name, pool in pools.items():
        bundles = bundles_of(pool.spec, pool.ranks)
        b = ", ".join(f"{k}={v:g}" for k, v in bundles[0].items())
        lines.append(f"pool '{name}': {len(bundles)} bundle(s) of {{{b}}} over {pool.spec.nodes} node(s)")
        for role in pool.processes:
            if role == "policy":
                n, each = pool.ranks, bundles[0]
                for r in range(n):
                    node = _node(pool, r if n > 1 else 0)
                    label = "policy" if n == 1 else f"policy rank {r}"
                    bundle = r if n > 1 else 0
                    cpus, gpus = (each["CPU"], each.get("GPU", 0)) if n > 1 else _share(pool, "policy")
                    extra = " + reference" if cfg.reference is not None and cfg.reference.pool == name else ""
                    role = "policy" if n == 1 else f"policy#{r}"
                    lines.append(
                        f"  {label}{extra}: bundle {bundle}, node {node}, {_threads(cpus)} thread(s){alone(role)}, {gpus:g} GPU"
                    )
                lines += server_lines(loaded, pool)
                continue
            cpus, gpus = _share(pool, role)
            hosted = (
                " + reference"
                if role.startswith("judge:") and "reference" in pool.roles and "reference" not in pool.processes
                else ""
            )
            b = pool.bundle_of(role)  # judge replicas (judge:NAME#i) each have a line of their own
            lines.append(
                f"  {role}{hosted}: bundle {b}, node {_node(pool, b)}, {_threads(cpus)} thread(s){alone(role)}, {gpus:g} GPU"
            )
        envs = [r for r in pool.roles if r.startswith("env#")]
        if envs:
            lines.append(
                f"  environment workers {', '.join(envs)}: the pool's cores for their tools "
                f"({'shared with the roles above' if pool.processes else 'their own'}), no torch threads"
            )
    local = [j.name for j in loaded.judges if j.role.pool is None]
    if local:
        lines.append(f"in the driver process: {', '.join(local)} (rule judges, no pool)")
    return lines + judge_checks(loaded)


def server_lines(loaded: LoadedPipeline, pool: Pool) -> list[str]:
    """Where each SGLang server the policy's ranks launch sits (``grm.engines.sglang_launch.server_plan``)."""
    from grm.engines.base import EngineError
    from grm.engines.sglang_launch import server_plan
    from grm.orchestrator.policy_servers import launches_servers

    if not launches_servers(loaded.policy):
        return []
    eng, ranks = loaded.policy.engine, pool.ranks
    gpus = int(bundles_of(pool.spec, ranks)[0].get("GPU", 0))
    try:
        plan = server_plan(eng.replicas, eng.tp, ranks, gpus)
    except EngineError as e:
        return [f"  sglang servers: cannot be placed: {e}"]
    out = []
    for s in plan:
        on = f"GPU(s) {', '.join(map(str, s.gpus))} of the bundle" if s.gpus else "no GPU (a CPU pool: only a stand-in runs)"
        who = "policy" if ranks == 1 else f"policy rank {s.rank}"
        where = f"bundle {s.rank}, node {_node(pool, s.rank)}"
        out.append(f"  sglang server {s.replica} (tp {eng.tp}): launched by {who}, {where}, {on}")
    return out


def _share(pool: Pool, role: str) -> tuple[float, float]:
    n = len(pool.peers(role))
    return pool.spec.cpus / n, pool.spec.gpus / n


def _threads(cpus: float) -> int:
    return max(1, int(cpus))


def _node(pool: Pool, bundle: int) -> str:
    return pool.nodes[bundle][:12] if pool.nodes else "?"


def dry_run(path: str, overrides: Sequence[str] = (), address: str | None = None) -> list[str]:
    """Validate, connect to Ray, print the placement; raise ``PlacementError`` if it cannot hold it."""
    import ray

    loaded = load_pipeline(path, overrides)
    cfg = loaded.spec
    names = [j.name for j in loaded.judges]
    roles = role_pools(cfg, names)
    start_ray(address, cfg.pools)
    try:
        total = ray.cluster_resources()
        used = [n for n in cfg.pools if roles[n]]
        missing = missing_resources(cfg, total, used)
        where = f"the Ray cluster at {address}" if address else "a local Ray (this machine)"
        if missing:
            plan = {n: Pool(n, cfg.pools[n], None, roles[n], _ranks(cfg, n)) for n in used}
            lines = [f"placement of {cfg.name} (not placeable on {where}):", *describe(loaded, plan)]
            print("\n".join(lines), flush=True)
            raise PlacementError("missing resources:\n  " + "\n  ".join(missing))
        pools = create_pools(cfg, names)
        try:
            lines = [f"placement of {cfg.name} on {where} ({len(ray.nodes())} node(s)):", *describe(loaded, pools)]
        finally:
            for p in pools.values():
                ray.util.remove_placement_group(p.group)
        print("\n".join(lines), flush=True)
        return lines
    finally:
        stop_ray(address)


def _ranks(cfg: Any, pool: str) -> int:
    return cfg.train.backend.ranks if pool == cfg.policy.pool else 1
