"""Run episodes of a policy in an environment, turn by turn, with exact token accounting.

All episodes of a call advance in lockstep: each turn is ONE ``engine.generate`` call for every
live episode, its prompt the episode's context as token ids (``GenerationRequest(token_ids=...)``),
never re-tokenised text. The context is the prompt's ids, each assistant turn's sampled ids as
the engine returned them (recorded with their log-probs and the engine's version: the only tokens
``Trajectory.training_view`` trains on), and each step's observation ids (``ChatTokens``: the
chat-template delta, plus the end of the assistant message the policy did not sample). So the
trainer recomputes its log-probs on exactly the sequence the policy sampled from.

Between generations the environments' steps run concurrently: an ``async def`` environment on the
runner's event loop (it must not block), any other in a daemon thread of its own (its tools run in
sandbox subprocesses). Every way an episode ends is recorded in ``Trajectory.end_reason``:

- ``done``: the environment said so;
- ``max_turns``: the policy's turn limit was reached and the environment was not done;
- ``max_tokens``: the context could not take another full turn (``max_new_tokens``) within
  ``max_total_tokens``, so the total never passes it;
- ``wall_time`` / ``tool_time``: the episode's own seconds (its reset, its steps, the generate
  calls it was in: not the wait for other episodes' steps) or its seconds inside ``env.step`` ran
  out, checked between turns and bounding each step (a step still running is abandoned: an async
  step is cancelled, a thread left to finish on its own);
- ``env_error``: making the environment raised, or its reset or step did, or returned something
  malformed, or no observation without being done; or the chat template cannot extend the
  conversation;
- ``bad_tool_call``: more than ``max_bad_tool_calls`` malformed tool calls (the earlier ones go to
  the environment, which answers each with an error observation the policy can fix).

One episode's failure never reaches another, nor the caller; an engine failure is the run's and
propagates. Observations longer than ``observation_tokens`` are cut (head and tail kept, counted
in ``metadata["observations_cut"]``). Observations of the step that ended an episode are recorded
without tokens: nothing follows them in the context. ``Trajectory.metadata`` also holds the
episode's ``turns``, ``bad_tool_calls``, ``tool_seconds``, ``wall_seconds`` and ``context_tokens``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from grm.data.trajectory import EndReason, Task, Trajectory, Turn, cut_text
from grm.engines.base import Generation, GenerationEngine, GenerationRequest, SamplingParams
from grm.envs.base import AssistantMessage, EnvError, Environment, Observation, Reset, Step, reset_env, step_env
from grm.envs.bounded import is_async, with_deadline
from grm.envs.chat_tokens import ChatTemplateError, ChatTokens
from grm.envs.tool_calls import ToolCallError, parse_tool_calls

T = TypeVar("T")


@dataclass(frozen=True)
class EpisodeLimits:
    """Limits of each episode (per-turn ``max_new_tokens`` is the ``SamplingParams``')."""

    max_turns: int = 8
    """Assistant turns."""
    max_total_tokens: int = 4096
    """Context tokens: prompt, every turn and observation. A turn starts only when a full
    ``max_new_tokens`` still fits."""
    wall_time_s: float | None = None
    """Seconds of the episode's own work: its reset and steps and the generate calls it was in
    (not the wait for other episodes' steps in the lockstep); None: no limit."""
    tool_time_s: float | None = None
    """Seconds the episode may spend inside ``env.step`` (its tools); None: no limit."""
    observation_tokens: int | None = 1024
    """Each observation's text is cut to this many tokens (its head and tail; the note saying
    what was cut, about a dozen tokens, comes on top); None: not cut."""
    max_bad_tool_calls: int = 2
    """Malformed tool calls passed to the environment; the next one ends the episode."""

    def __post_init__(self) -> None:
        bad = [k for k in ("max_turns", "max_total_tokens") if not (isinstance(getattr(self, k), int) and getattr(self, k) > 0)]
        bad += [
            k
            for k in ("wall_time_s", "tool_time_s", "observation_tokens")
            if getattr(self, k) is not None and not getattr(self, k) > 0
        ]
        bad += [] if isinstance(self.max_bad_tool_calls, int) and self.max_bad_tool_calls >= 0 else ["max_bad_tool_calls"]
        if bad:
            shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in bad)
            raise ValueError(f"episode limits: {shown} (counts and seconds must be > 0, max_bad_tool_calls >= 0)")


@dataclass
class _Episode:
    """One episode's state while it runs."""

    traj: Trajectory
    seed: int | None
    env: Any = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    """The chat so far as messages (assistant turns as the text the policy wrote)."""
    seconds: float = 0.0
    """Wall time of the episode's own work: its reset and steps, the generate calls it was in."""
    tool_seconds: float = 0.0
    bad_calls: int = 0
    cuts: int = 0
    turns: int = 0

    @property
    def live(self) -> bool:
        return self.traj.end_reason is None

    def end(self, reason: EndReason, detail: str | None = None) -> None:
        self.traj.end_reason, self.traj.end_detail = reason, detail
        self.traj.metadata.update(
            turns=self.turns,
            bad_tool_calls=self.bad_calls,
            observations_cut=self.cuts,
            tool_seconds=round(self.tool_seconds, 4),
            wall_seconds=round(self.seconds, 4),
            context_tokens=len(self.context),
        )


class EpisodeRunner:
    """Runs episodes with one policy engine and its tokenizer (see the module docstring)."""

    def __init__(self, engine: GenerationEngine, tokenizer: Any, limits: EpisodeLimits | None = None) -> None:
        self.engine = engine
        self.chat = ChatTokens(tokenizer)
        self.limits = limits or EpisodeLimits()

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
            _Episode(Trajectory(ids[i] if ids else f"e{i}", Task(dict(row), [])), seeds[i] if seeds else None)
            for i, row in enumerate(rows)
        ]
        await asyncio.gather(*(self._reset(e, make_env) for e in episodes))
        while True:
            live = [e for e in episodes if e.live and self._may_generate(e, sampling)]
            if not live:
                break
            requests = [GenerationRequest(token_ids=list(e.context), seed=e.seed) for e in live]
            start = time.monotonic()
            gens = await asyncio.to_thread(self.engine.generate, requests, sampling)
            for e in live:
                e.seconds += time.monotonic() - start
            if len(gens) != len(live):
                raise RuntimeError(f"engine returned {len(gens)} generations for {len(live)} requests")
            messages = [self._assistant_turn(e, g) for e, g in zip(live, gens, strict=True)]
            stepping = [(e, m) for e, m in zip(live, messages, strict=True) if e.live]
            steps = await asyncio.gather(*(self._step(e, m) for e, m in stepping))
            for (e, _), step in zip(stepping, steps, strict=True):
                if step is not None:
                    self._after_step(e, step, sampling)
        return [e.traj for e in episodes]

    # ------------------------------------------------------------------ one episode

    async def _reset(self, e: _Episode, make_env: Callable[[], Environment]) -> None:
        try:
            e.env = make_env()
            reset: Reset = await self._bounded(e, lambda: reset_env(e.env, e.traj.task.row), e.env.reset)
        except _OutOfTime as t:
            return e.end(t.reason, f"env.reset still running after {t.seconds:.1f} s")
        except Exception as x:  # noqa: BLE001 - an environment's failure of any kind ends its own episode only
            return e.end("env_error", _describe(x))
        e.traj.task.messages, e.traj.task.tools = reset.messages, reset.tools
        e.tools, e.history = list(reset.tools), [dict(m) for m in reset.messages]
        try:
            e.context = self.chat.prompt_ids(e.history, e.tools)
        except Exception as x:  # noqa: BLE001 - a template that cannot render this task ends it
            return e.end("env_error", f"rendering the task: {_describe(x)}")
        e.traj.prompt_ids = list(e.context)

    def _may_generate(self, e: _Episode, sampling: SamplingParams) -> bool:
        lim = self.limits
        if lim.wall_time_s is not None and e.seconds >= lim.wall_time_s:
            e.end("wall_time", f"{lim.wall_time_s:g} s of wall time used")
        elif len(e.context) + sampling.max_new_tokens > lim.max_total_tokens:
            e.end("max_tokens", f"{len(e.context)} context tokens + {sampling.max_new_tokens} new > {lim.max_total_tokens}")
        return e.live

    def _assistant_turn(self, e: _Episode, g: Generation) -> AssistantMessage:
        """Records the turn (its ids and log-probs exactly as sampled) and parses its tool calls."""
        e.turns += 1
        parsed: list | ToolCallError = parse_tool_calls(g.text, e.tools, turn=e.turns - 1) if e.tools else []
        calls, error = (parsed, None) if isinstance(parsed, list) else ([], parsed)
        e.traj.turns.append(
            Turn(
                "assistant",
                g.text,
                token_ids=list(g.token_ids),
                logprobs=list(g.logprobs),
                policy_version=g.version,
                finish_reason=g.finish_reason,
                tool_calls=calls,
                tool_call_error=error.message if error else None,
            )
        )
        e.context += g.token_ids
        e.history.append({"role": "assistant", "content": g.text})
        if error is not None:
            e.bad_calls += 1
            if e.bad_calls > self.limits.max_bad_tool_calls:
                e.end("bad_tool_call", f"{e.bad_calls} malformed tool calls; the last: {error.kind}: {error.message}")
        return AssistantMessage(g.text, calls, error, g.finish_reason)

    async def _step(self, e: _Episode, message: AssistantMessage) -> Step | None:
        """The environment's answer, or None when the step ended the episode (recorded)."""
        try:
            return await self._bounded(e, lambda: step_env(e.env, message), e.env.step, tools=True)
        except _OutOfTime as t:
            e.end(t.reason, f"env.step still running after {t.seconds:.1f} s")
        except Exception as x:  # noqa: BLE001 - see _reset
            e.end("env_error", _describe(x))
        return None

    def _after_step(self, e: _Episode, step: Step, sampling: SamplingParams) -> None:
        e.traj.signals.update(step.signals)
        if step.final_answer is not None:
            e.traj.final_answer = step.final_answer
        observations = [self._cut(e, o) for o in step.observations]
        lim = self.limits
        reason: tuple[EndReason, str | None] | None = None
        if step.done:
            reason = ("done", None)
        elif lim.tool_time_s is not None and e.tool_seconds >= lim.tool_time_s:
            reason = ("tool_time", f"{e.tool_seconds:.1f} s in env.step (limit {lim.tool_time_s:g} s)")
        elif e.turns >= lim.max_turns:
            reason = ("max_turns", None)
        elif not observations:
            reason = ("env_error", "env.step returned no observation and did not end the episode")
        ids: list[list[int]] = [[] for _ in observations]
        if reason is None:
            messages = [o.message() for o in observations]
            try:
                ids = self.chat.observation_ids(e.history, e.tools, messages, e.traj.turns[-1].token_ids)
            except Exception as x:  # noqa: BLE001 - a template that cannot render this step ends the episode
                reason = ("env_error", f"rendering the observations: {_describe(x)}")
            else:
                added = sum(map(len, ids))
                if len(e.context) + added + sampling.max_new_tokens > lim.max_total_tokens:
                    reason = (
                        "max_tokens",
                        f"{len(e.context)} + {added} observation + {sampling.max_new_tokens} new > {lim.max_total_tokens}",
                    )
                    ids = [[] for _ in observations]
                else:
                    e.history += messages
        for o, tok in zip(observations, ids, strict=True):
            e.traj.turns.append(
                Turn(
                    o.role,
                    o.content,
                    token_ids=tok,
                    tool_name=o.name,
                    tool_call_id=o.tool_call_id,
                    ok=o.ok,
                    error=o.error,
                    cut=o.cut,
                    seconds=o.seconds,
                )
            )
            e.context += tok
        if reason is not None:
            e.end(*reason)

    def _cut(self, e: _Episode, o: Observation) -> Observation:
        """``o`` with its text cut to ``observation_tokens`` (counted). A piece of more than 16
        characters a token is taken as over the cap untokenised: the work stays bounded."""
        cap = self.limits.observation_tokens
        if cap is None:
            return o
        far = 16 * cap

        def count(s: str) -> int:
            return len(s) if len(s) > far else self.chat.count(s)

        text, was_cut = cut_text(o.content, cap, count)
        if not was_cut:
            return o
        e.cuts += 1
        return Observation(o.role, text, o.name, o.tool_call_id, o.ok, o.error, True, o.seconds)

    async def _bounded(self, e: _Episode, call: Callable[[], Coroutine[Any, Any, T]], method: Any, *, tools: bool = False) -> T:
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
            return await with_deadline(call, is_async(method), timeout)
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


class _OutOfTime(Exception):
    def __init__(self, reason: EndReason, seconds: float) -> None:
        self.reason, self.seconds = reason, seconds


def _describe(x: BaseException) -> str:
    if isinstance(x, (EnvError, ChatTemplateError)):
        return str(x)
    return f"{type(x).__name__}: {str(x)[:300]}"
