"""Run episodes of a policy in an environment, turn by turn, with exact token accounting.

Each engine call generates the next turn of every episode that is ready for one (just reset, or
its last step answered), its prompt the episode's context as token ids
(``GenerationRequest(token_ids=...)``), never re-tokenised text. The turns are scheduled by the
runner's ``TurnLoop`` (``grm.envs.turn_loop``), one per event loop, which serves every ``arun`` in
flight at once: the episodes of a later call take turns while an earlier call's wait on their
tools. With ``turn_wait_s`` None the episodes advance in lockstep (every live episode's step, then
one call for all of them); with a number, the engine starts the next call as soon as one episode
is ready and the steps still running have had ``turn_wait_s`` seconds more to join it, so the
engine generates while slow tools run and fast ones still batch together; with ``"auto"`` that
wait is the last engine call's own seconds: a straggler is left behind only when waiting for it
would cost more than a turn (on a CPU engine a call for part of the episodes costs about what one
for all of them does, so splitting a batch for a short tool is a loss). Each episode is sampled
with its own seed, so which episodes share a call changes only the last digits of the log-probs
(and so, rarely, a sampled token).

The context is the prompt's ids, each assistant turn's sampled ids as the engine returned them
(recorded with their log-probs and the engine's version: the only tokens
``Trajectory.training_view`` trains on), and each step's observation ids (``ChatTokens``: the
chat-template delta, plus the end of the assistant message the policy did not sample). So the
trainer recomputes its log-probs on exactly the sequence the policy sampled from.

The environments' steps run concurrently, beside the engine's calls: an ``async def`` environment
on the runner's event loop (it must not block), any other in a daemon thread of its own (its tools
run in sandbox subprocesses); an environment with a ``close()`` has it called when the call's
episodes are over. Every way an episode ends is recorded in ``Trajectory.end_reason``:

- ``done``: the environment said so;
- ``max_turns``: the policy's turn limit was reached and the environment was not done;
- ``max_tokens``: the context could not take another full turn (``max_new_tokens``) within
  ``max_total_tokens``, so the total never passes it;
- ``wall_time`` / ``tool_time``: the episode's own seconds (its reset, its steps, the generate
  calls it was in, the reading of its turns' tool calls: not the wait for other episodes' steps)
  or its seconds inside ``env.step`` ran out, checked between turns and bounding each step (a step
  still running is abandoned: an async step is cancelled, a thread left to finish on its own);
- ``env_error``: making the environment raised, or its reset or step did, or returned something
  malformed, or no observation without being done; or the chat template cannot extend the
  conversation. "Raised" is anything the environment's code raises but ``KeyboardInterrupt``
  (and the runtime's ``GeneratorExit`` and cancellation): ``SystemExit`` (a ``sys.exit()`` in a
  tool) or a ``BaseException`` of its own ends that one episode, not the run;
- ``bad_tool_call``: more than ``max_bad_tool_calls`` malformed tool calls (the earlier ones go to
  the environment, which answers each with an error observation the policy can fix).

One episode's failure never reaches another, nor the caller; an engine failure is the run's and
propagates. Observations longer than ``observation_tokens`` are cut (head and tail kept, counted
in ``metadata["observations_cut"]``). Observations of the step that ended an episode are recorded
without tokens: nothing follows them in the context. ``Trajectory.metadata`` also holds the
episode's ``turns``, ``bad_tool_calls``, ``tool_seconds``, ``wall_seconds`` and ``context_tokens``, and
``engine_busy``: the share of the call's wall time the engine spent generating, for this call or
any other in flight (the rest it waited on environments: resets and the steps no turn could overlap).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, TypeVar

from grm.data.trajectory import EndReason, Task, Trajectory
from grm.engines.base import GenerationEngine, SamplingParams
from grm.envs.base import (
    AssistantMessage,
    EnvError,
    Environment,
    Reset,
    Step,
    call_maybe_async,
    reset_env,
    step_env,
)
from grm.envs.bounded import is_async, with_deadline
from grm.envs.chat_tokens import ChatTokens
from grm.envs.episode_state import Episode, EpisodeLimits, EpisodeTurns, describe
from grm.envs.turn_loop import TurnLoop

T = TypeVar("T")

CLOSE_S = 5.0
"""Seconds an environment's ``close()`` may take."""

PASSED_ON = (KeyboardInterrupt, GeneratorExit, asyncio.CancelledError)
"""What an environment's code raises that is not its own failure but the process's or the runtime's:
passed on. Anything else it raises, ``SystemExit`` included, ends its own episode."""


class EpisodeRunner:
    """Runs episodes with one policy engine and its tokenizer (see the module docstring)."""

    def __init__(
        self,
        engine: GenerationEngine,
        tokenizer: Any,
        limits: EpisodeLimits | None = None,
        turn_wait_s: float | Literal["auto"] | None = None,
    ) -> None:
        """``turn_wait_s``: None, lockstep; else how long the engine waits, once an episode is
        ready for its next turn, for the steps still running: seconds, or ``"auto"`` (the last
        engine call's seconds; see the module docstring)."""
        self.engine = engine
        self._turn_loop: tuple[asyncio.AbstractEventLoop, TurnLoop] | None = None
        self.chat = ChatTokens(tokenizer)
        self.limits = limits or EpisodeLimits()
        self.turns = EpisodeTurns(self.chat, self.limits)
        if turn_wait_s is not None and turn_wait_s != "auto" and not (isinstance(turn_wait_s, (int, float)) and turn_wait_s >= 0):
            raise ValueError(f"turn_wait_s must be >= 0, 'auto' or None, got {turn_wait_s!r}")
        self.turn_wait_s = turn_wait_s

    def run(
        self,
        make_env: Callable[[], Environment],
        rows: Sequence[dict[str, Any]],
        sampling: SamplingParams,
        *,
        seeds: Sequence[int | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Trajectory]:
        """``arun`` from synchronous code (not from inside a running event loop)."""
        return asyncio.run(self.arun(make_env, rows, sampling, seeds=seeds, ids=ids))

    async def arun(
        self,
        make_env: Callable[[], Environment],
        rows: Sequence[dict[str, Any]],
        sampling: SamplingParams,
        *,
        seeds: Sequence[int | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Trajectory]:
        """One finished ``Trajectory`` per row, in order: a fresh ``make_env()`` each, sampled with
        ``seeds[i]`` (None: ``sampling.seed``) and identified by ``ids[i]`` (default ``e<i>``)."""
        if sampling.n != 1:
            raise ValueError(f"episodes sample one continuation per context (sampling.n = 1), got n={sampling.n}")
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise ValueError(f"rows[{i}]: expected a mapping (the data row for env.reset), got {type(row).__name__}")
        for name, given in (("seeds", seeds), ("ids", ids)):
            if given is not None and len(given) != len(rows):
                raise ValueError(f"{name}: {len(given)} given for {len(rows)} rows")
        episodes = [
            Episode(Trajectory(ids[i] if ids else f"e{i}", Task(dict(row), [])), seeds[i] if seeds else None)
            for i, row in enumerate(rows)
        ]
        loop = self._loop()
        start, busy = time.monotonic(), loop.busy_s
        try:
            await asyncio.gather(*(self._reset(e, make_env) for e in episodes))
            await loop.run(episodes, sampling)
        finally:
            await asyncio.shield(asyncio.gather(*(_close(e.env) for e in episodes if e.env is not None)))
        took = time.monotonic() - start
        share = min(1.0, (loop.busy_s - busy) / took) if took > 0 else 0.0
        for e in episodes:  # the engine's share of the call's wall time (the rest it waited on environments)
            e.traj.metadata["engine_busy"] = round(share, 4)
        return [e.traj for e in episodes]

    def _loop(self) -> TurnLoop:
        """This event loop's ``TurnLoop`` (``run`` starts a fresh event loop each time)."""
        running = asyncio.get_running_loop()
        if self._turn_loop is None or self._turn_loop[0] is not running:
            self._turn_loop = (running, TurnLoop(self.engine.generate, self.turns, self._step, self.turn_wait_s))
        return self._turn_loop[1]

    # ------------------------------------------------------------------ one episode

    async def _reset(self, e: Episode, make_env: Callable[[], Environment]) -> None:
        try:
            e.env = make_env()
            reset: Reset = await self._bounded(e, lambda: reset_env(e.env, e.traj.task.row), e.env.reset)
        except _OutOfTime as t:
            return e.end(t.reason, f"env.reset still running after {t.seconds:.1f} s")
        except PASSED_ON:
            raise
        except BaseException as x:  # noqa: BLE001 - an environment's failure of any kind ends its own episode only
            return e.end("env_error", describe(x))
        e.traj.task.messages, e.traj.task.tools = reset.messages, reset.tools
        e.tools, e.history = list(reset.tools), [dict(m) for m in reset.messages]
        try:
            e.context = self.chat.prompt_ids(e.history, e.tools)
        except Exception as x:  # noqa: BLE001 - a template that cannot render this task ends it
            return e.end("env_error", f"rendering the task: {describe(x)}")
        e.traj.prompt_ids = list(e.context)

    async def _step(self, e: Episode, message: AssistantMessage) -> Step | None:
        """The environment's answer, or None when the step ended the episode (recorded)."""
        try:
            return await self._bounded(e, lambda: step_env(e.env, message), e.env.step, tools=True)
        except _OutOfTime as t:
            e.end(t.reason, f"env.step still running after {t.seconds:.1f} s")
        except PASSED_ON:
            raise
        except BaseException as x:  # noqa: BLE001 - see _reset
            e.end("env_error", describe(x))
        return None

    async def _bounded(self, e: Episode, call: Callable[[], Coroutine[Any, Any, T]], method: Any, *, tools: bool = False) -> T:
        """``call()`` (which calls the env's ``method``) within the episode's remaining wall time
        and, for steps, tool time; the seconds it took are the episode's."""
        lim = self.limits
        budgets = []
        if lim.wall_time_s is not None:
            budgets.append(("wall_time", lim.wall_time_s - e.seconds))
        if tools and lim.tool_time_s is not None:
            budgets.append(("tool_time", lim.tool_time_s - e.tool_seconds))
        reason, timeout = min(budgets, key=lambda b: b[1]) if budgets else ("wall_time", None)
        if timeout is not None and timeout <= 0:
            raise _OutOfTime(reason, 0.0)
        start = time.monotonic()
        try:
            return await with_deadline(lambda: contained(call(), method), is_async(method), timeout)
        except TimeoutError:
            raise _OutOfTime(reason, timeout or 0.0) from None
        finally:
            took = time.monotonic() - start
            e.seconds += took
            e.tool_seconds += took if tools else 0.0


def run_episodes(
    engine: GenerationEngine,
    tokenizer: Any,
    make_env: Callable[[], Environment],
    rows: Sequence[dict[str, Any]],
    sampling: SamplingParams,
    limits: EpisodeLimits | None = None,
    *,
    seeds: Sequence[int | None] | None = None,
    ids: Sequence[str] | None = None,
) -> list[Trajectory]:
    """One trajectory per row (``EpisodeRunner.run``)."""
    return EpisodeRunner(engine, tokenizer, limits).run(make_env, rows, sampling, seeds=seeds, ids=ids)


def episode_counts(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """``end_<reason>`` per end reason, and the episodes' ``turns``, ``bad_tool_calls`` and
    ``observations_cut`` summed: what a step's metrics line reports."""
    out: Counter[str] = Counter(f"end_{t.end_reason}" for t in trajectories)
    for t in trajectories:
        for k in ("turns", "bad_tool_calls", "observations_cut"):
            out[k] += int(t.metadata.get(k, 0))
    return dict(out)


async def _close(env: Any) -> None:
    """An environment's ``close()`` (sync or async), when it has one, once its episode is over; it
    gets a few seconds and its failure is ignored (the episode's outcome is already recorded)."""
    close = getattr(env, "close", None)
    if not callable(close):
        return
    try:
        await with_deadline(lambda: contained(call_maybe_async(close), close), is_async(close), CLOSE_S)
    except PASSED_ON:
        raise
    except BaseException:  # noqa: BLE001 - cleanup: nothing depends on it
        pass


async def contained(coro: Coroutine[Any, Any, T], method: Any) -> T:
    """``await coro`` (environment code: ``method`` is what it calls), with what it raises past
    ``Exception`` but not ``PASSED_ON`` (``SystemExit``, an exception class of its own) as an
    ``EnvError`` naming it. Inside the coroutine, before any task sees it: an asyncio task re-raises
    ``SystemExit`` out of the event loop itself (a deadline wraps an ``async def`` step in one, and
    a plain step runs in a thread's ``asyncio.run``), where no handler of the episode's can catch it."""
    try:
        return await coro
    except (Exception, *PASSED_ON):
        raise
    except BaseException as x:  # noqa: BLE001 - the environment's own failure, ended as its episode's
        name = getattr(method, "__qualname__", type(method).__name__)
        raise EnvError(f"{name} raised {type(x).__name__}: {str(x)[:300]}") from None


class _OutOfTime(Exception):
    def __init__(self, reason: EndReason, seconds: float) -> None:
        self.reason, self.seconds = reason, seconds
