"""Environment workers (a pipeline's ``env: {pool: NAME, workers: N}``): Ray actors on their own pool
that hold the episodes' environments and run their resets and steps, tools included, many episodes
in flight per worker; the policy's actor runs the turns (``grm.envs.episodes``) and reaches each
episode's environment through a ``RemoteEnv``, which any episode runner takes as an environment.

A worker runs a plain (sync) environment's calls each in a daemon thread of its own and an
``async def`` one on its event loop, so one slow tool holds up no other episode. An environment's
exception comes back as an ``EnvError`` naming its class (that episode ends ``env_error``); a worker
that dies ends the episodes it held the same way, and Ray restarts it for the next ones.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from grm.envs.base import AssistantMessage, EnvError, Environment, Reset, Step, env_factory, reset_env, step_env
from grm.envs.bounded import in_daemon_thread, is_async
from grm.envs.episodes import PASSED_ON, contained
from grm.orchestrator.handles import Placement

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from grm.config.env import EnvSpec
    from grm.orchestrator.pools import Pool

RESTARTS = 3
"""Times Ray restarts a dead environment worker (its episodes then in flight end ``env_error``)."""


@dataclass(frozen=True)
class Failed:
    """A worker's answer when the environment failed: why, in one line."""

    detail: str


class EnvWorker:
    """Many episodes' environments, by episode id; made from the pipeline's ``env:`` spec."""

    def __init__(self, target: str, kwargs: Mapping[str, Any]) -> None:
        self.make = env_factory(target, kwargs)
        self.envs: dict[str, Environment] = {}

    async def reset(self, eid: str, row: dict[str, Any]) -> Reset | Failed:
        try:
            env = self.envs[eid] = self.make()
            return await contained(_call(env.reset, lambda: reset_env(env, row)), env.reset)
        except PASSED_ON:
            raise
        except BaseException as x:  # noqa: BLE001 - one environment's failure (SystemExit too) ends its own episode only
            return Failed(_line(x))

    async def step(self, eid: str, message: AssistantMessage) -> Step | Failed:
        env = self.envs.get(eid)
        if env is None:
            return Failed(f"episode {eid} is not on this environment worker (it was restarted)")
        try:
            return await contained(_call(env.step, lambda: step_env(env, message)), env.step)
        except PASSED_ON:
            raise
        except BaseException as x:  # noqa: BLE001 - see reset
            return Failed(_line(x))

    async def close(self, eid: str) -> None:
        env = self.envs.pop(eid, None)
        close = getattr(env, "close", None)
        if callable(close):
            try:
                await contained(_call(close, close), close)
            except PASSED_ON:
                raise
            except BaseException:  # noqa: BLE001 - cleanup: the episode's outcome is recorded
                pass

    def held(self) -> int:
        """Environments held now (episodes started and not closed)."""
        return len(self.envs)

    def where(self) -> Placement:
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "pid": os.getpid(), "resources": ctx.get_assigned_resources()}


async def _call(method: Any, call: Callable[[], Any]) -> Any:
    """``call()`` (which calls ``method``): on this loop for an ``async def``, else in a thread."""
    if is_async(method):
        return await call()
    import asyncio

    def run() -> Any:
        result = call()
        return asyncio.run(result) if asyncio.iscoroutine(result) else result

    return await in_daemon_thread(run)


def _line(x: BaseException) -> str:
    return str(x) if isinstance(x, EnvError) else f"{type(x).__name__}: {str(x)[:300]}"


class RemoteEnv:
    """One episode's environment on a worker: ``reset`` and ``step`` as async calls to it."""

    def __init__(self, worker: ActorHandle, eid: str) -> None:
        self.worker, self.eid = worker, eid

    async def reset(self, row: dict[str, Any]) -> Reset:
        return _answer(await self._ask(self.worker.reset.remote(self.eid, row)))

    async def step(self, message: AssistantMessage) -> Step:
        return _answer(await self._ask(self.worker.step.remote(self.eid, message)))

    async def close(self) -> None:
        self.worker.close.remote(self.eid)  # not awaited: nothing waits on cleanup

    async def _ask(self, ref: Any) -> Any:
        try:
            return await ref
        except ray.exceptions.RayActorError as x:
            raise EnvError(f"environment worker lost: {str(x).strip().splitlines()[0][:200]}") from None


def _answer(out: Any) -> Any:
    if isinstance(out, Failed):
        raise EnvError(out.detail)
    return out


def remote_envs(workers: Sequence[ActorHandle]) -> Callable[[], Environment]:
    """An environment factory for the episode runner: each call a new episode on the next worker."""
    run = uuid.uuid4().hex[:8]
    counter = itertools.count()

    def make() -> Environment:
        k = next(counter)
        return RemoteEnv(workers[k % len(workers)], f"{run}-{k}")

    return make


def env_roles(spec: EnvSpec) -> list[str]:
    """Role names of the environment workers: ``env#0`` ... (none without ``env.pool``)."""
    return [f"env#{i}" for i in range(spec.workers)] if spec.pool is not None else []


def start_env_workers(spec: EnvSpec, pool: Pool) -> list[ActorHandle]:
    """The ``env.workers`` actors on ``pool``, each asking no CPU of it (see ``EnvSpec.pool``)."""
    actor = ray.remote(EnvWorker)
    return [
        actor.options(**{**pool.options(role), "num_cpus": 0}, max_restarts=RESTARTS, max_concurrency=1000).remote(
            spec.target, spec.kwargs
        )
        for role in env_roles(spec)
    ]
