"""Episodes run by the user's own agent code through the policy endpoint (``grm.envs.endpoint``): any
agent loop that takes an OpenAI base URL becomes an environment, and its episodes train on exactly
the tokens the policy sampled.

An agent is a function ``agent(row, base_url, model)`` (plain or ``async def``), named in a
pipeline's ``env: {type: agent, path: FILE.py:function}``. It runs one episode for the data ``row``,
talking to the policy at ``base_url`` (``openai.OpenAI(base_url=base_url, api_key="none")``), and
returns None or a mapping with ``signals`` (names to numbers, e.g. ``success``; judges and rewards
read them) and ``final_answer`` (default: the last assistant turn's text). A plain agent runs in a
daemon thread of its own, an ``async def`` one on the runner's event loop (it must not block).

How an episode ends: ``done`` when the agent returns; ``env_error`` when it raises (the exception
named; anything but ``KeyboardInterrupt``, ``SystemExit`` included), returns something malformed,
never asks the policy, or sends a request that does not extend its history; ``wall_time`` when it is
still running after ``limits.wall_time_s`` (its later requests are answered 400); and the
endpoint's limits (``max_turns``, ``max_tokens``, ``bad_tool_call``).
``limits.tool_time_s`` does not apply: the endpoint cannot see where the agent spends its time.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from grm.data.trajectory import Trajectory
from grm.engines.base import GenerationEngine, SamplingParams
from grm.envs.base import EnvError, call_maybe_async, load_target
from grm.envs.bounded import is_async, with_deadline
from grm.envs.endpoint import PolicyEndpoint
from grm.envs.episodes import PASSED_ON, EpisodeLimits

Agent = Callable[[dict[str, Any], str, str], Any]
"""``agent(row, base_url, model) -> Mapping | None`` (or an awaitable of it)."""


def load_agent(spec: str, base_dir: str | Path | None = None) -> Agent:
    """The agent function ``spec`` names: ``path/to/file.py:function`` (relative to ``base_dir``) or
    ``package.module:function``; ``EnvError`` naming the spec when it is missing or no function of
    ``(row, base_url, model)``."""
    fn, name = load_target(spec, base_dir, "function")
    if isinstance(fn, type) or not callable(fn):
        raise EnvError(f"env {spec!r}: {name} is a {type(fn).__name__}, not an agent function")
    try:
        inspect.signature(fn).bind({}, "", "")
    except (TypeError, ValueError):
        raise EnvError(f"env {spec!r}: {name} must take (row, base_url, model)") from None
    return fn


def run_agent_episodes(
    engine: GenerationEngine,
    tokenizer: Any,
    agent: Agent,
    rows: Sequence[dict[str, Any]],
    sampling: SamplingParams,
    limits: EpisodeLimits | None = None,
    *,
    seeds: Sequence[int | None] | None = None,
    ids: Sequence[str] | None = None,
) -> list[Trajectory]:
    """``arun_agent_episodes`` from synchronous code (not from inside a running event loop)."""
    return asyncio.run(arun_agent_episodes(engine, tokenizer, agent, rows, sampling, limits, seeds=seeds, ids=ids))


async def arun_agent_episodes(
    engine: GenerationEngine,
    tokenizer: Any,
    agent: Agent,
    rows: Sequence[dict[str, Any]],
    sampling: SamplingParams,
    limits: EpisodeLimits | None = None,
    *,
    seeds: Sequence[int | None] | None = None,
    ids: Sequence[str] | None = None,
) -> list[Trajectory]:
    """One finished ``Trajectory`` per row, in order (the shape of ``EpisodeRunner.run``): the agent
    run once per row, all concurrently, on one ``PolicyEndpoint``; episode i is sampled with
    ``seeds[i]`` and identified by ``ids[i]`` (default ``e<i>``). An engine failure is the run's
    and raises once every agent has finished."""
    if not callable(agent):
        raise ValueError(f"agent must be a function (row, base_url, model), got {type(agent).__name__}")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, Mapping)), None)
    if bad is not None:
        raise ValueError(f"rows[{bad}]: expected a mapping (the data row the agent gets), got {type(rows[bad]).__name__}")
    given = [(name, len(v)) for name, v in (("seeds", seeds), ("ids", ids)) if v is not None and len(v) != len(rows)]
    if given:
        raise ValueError(f"{given[0][0]}: {given[0][1]} given for {len(rows)} rows")
    limits = limits or EpisodeLimits()
    names = list(ids) if ids is not None else [f"e{i}" for i in range(len(rows))]
    with PolicyEndpoint(engine, tokenizer, sampling, limits) as endpoint:
        urls = [endpoint.open(eid, seeds[i] if seeds else None, dict(rows[i])) for i, eid in enumerate(names)]
        trajectories = await asyncio.gather(
            *(_episode(endpoint, agent, eid, dict(row), url, limits) for eid, row, url in zip(names, rows, urls, strict=True))
        )
    if endpoint.failure is not None:
        raise endpoint.failure
    return list(trajectories)


class _Raised:
    """The agent's own exception, told apart from the deadline's ``TimeoutError``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


async def _episode(
    endpoint: PolicyEndpoint, agent: Agent, eid: str, row: dict[str, Any], url: str, limits: EpisodeLimits
) -> Trajectory:
    async def call() -> Any:
        try:
            return await call_maybe_async(agent, row, url, endpoint.model)
        except PASSED_ON:
            raise
        except BaseException as x:  # noqa: BLE001 - the agent's failure (SystemExit too) ends its own episode only
            return _Raised(x)

    try:
        out = await with_deadline(call, is_async(agent), limits.wall_time_s)
    except TimeoutError:
        return endpoint.close(eid, "wall_time", f"the agent was still running after {limits.wall_time_s:g} s")
    if isinstance(out, _Raised):
        return endpoint.close(eid, "env_error", f"the agent raised {type(out.error).__name__}: {str(out.error)[:300]}")
    try:
        signals, final_answer = _outcome(out)
    except EnvError as x:
        return endpoint.close(eid, "env_error", str(x))
    traj = endpoint.close(eid)
    traj.signals.update(signals)
    last = next((t.content for t in reversed(traj.turns) if t.role == "assistant"), None)
    traj.final_answer = final_answer if final_answer is not None else last
    return traj


def _outcome(out: Any) -> tuple[dict[str, float], str | None]:
    """The agent's ``signals`` (finite numbers) and ``final_answer`` (a string or None)."""
    if out is None:
        return {}, None
    if not isinstance(out, Mapping):
        raise EnvError(f"the agent returned {type(out).__name__}, not a mapping (signals, final_answer) or None")
    signals = out.get("signals") or {}
    if not isinstance(signals, Mapping):
        raise EnvError(f"the agent's signals must be a mapping of names to numbers, got {type(signals).__name__}")
    for k, v in signals.items():
        if not isinstance(k, str) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise EnvError(f"the agent's signal {k!r} = {v!r} is not a finite number")
    final = out.get("final_answer")
    if final is not None and not isinstance(final, str):
        raise EnvError(f"the agent's final_answer must be a string, got {type(final).__name__}")
    return {k: float(v) for k, v in signals.items()}, final
