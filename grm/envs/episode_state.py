"""One episode's state and what each turn does to it: the limits (``EpisodeLimits``), the running
episode (``Episode``: its trajectory, its token context, its chat history, its counters) and the
turn steps every driver of episodes shares (``EpisodeTurns``): whether a turn may start, recording
the policy's turn exactly as sampled (its tool calls parsed), and adding an environment's answer
(observations cut to their budget, tokenised as the chat template's delta) or ending the episode
with its reason. ``grm.envs.episodes`` drives them with environments, ``grm.envs.endpoint`` with
an agent's requests; see ``grm.envs.episodes`` for the end reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grm.data.text_budget import cut_text
from grm.data.trajectory import EndReason, Trajectory, Turn
from grm.engines.base import Generation, SamplingParams
from grm.envs.base import AssistantMessage, EnvError, Observation, Step
from grm.envs.chat_tokens import ChatTemplateError, ChatTokens
from grm.envs.tool_calls import ToolCallError, parse_tool_calls

if TYPE_CHECKING:
    from grm.config.env import EnvSpec


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

    @classmethod
    def of(cls, spec: EnvSpec) -> EpisodeLimits:
        """The limits a pipeline's (or an eval's) ``env:`` block sets."""
        return cls(
            max_turns=spec.max_turns,
            max_total_tokens=spec.max_total_tokens,
            wall_time_s=spec.wall_time_s,
            tool_time_s=spec.tool_time_s,
            observation_tokens=spec.observation_tokens,
            max_bad_tool_calls=spec.max_bad_tool_calls,
        )

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
class Episode:
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
    call: Any = None
    """The ``grm.envs.turn_loop`` call it takes turns in (None once that call is over or dropped)."""

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


class EpisodeTurns:
    """The turn steps of episodes whose chat template is ``chat``, under ``limits``."""

    def __init__(self, chat: ChatTokens, limits: EpisodeLimits) -> None:
        self.chat, self.limits = chat, limits

    def may_generate(self, e: Episode, sampling: SamplingParams) -> bool:
        lim = self.limits
        if lim.wall_time_s is not None and e.seconds >= lim.wall_time_s:
            e.end("wall_time", f"{lim.wall_time_s:g} s of wall time used")
        elif len(e.context) + sampling.max_new_tokens > lim.max_total_tokens:
            e.end("max_tokens", f"{len(e.context)} context tokens + {sampling.max_new_tokens} new > {lim.max_total_tokens}")
        return e.live

    def assistant_turn(self, e: Episode, g: Generation) -> AssistantMessage:
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

    def after_step(self, e: Episode, step: Step, sampling: SamplingParams) -> None:
        e.traj.signals.update(step.signals)
        if step.final_answer is not None:
            e.traj.final_answer = step.final_answer
        observations = [self.cut(e, o) for o in step.observations]
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
                reason = ("env_error", f"rendering the observations: {describe(x)}")
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

    def cut(self, e: Episode, o: Observation) -> Observation:
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


def describe(x: BaseException) -> str:
    if isinstance(x, (EnvError, ChatTemplateError)):
        return str(x)
    return f"{type(x).__name__}: {str(x)[:300]}"
