"""One episode of a policy in an environment: the task, every turn with the tokens it put in the
context, how it ended, the environment's signals and the final answer.

It lives below both ``grm.envs`` (which produces trajectories) and ``grm.judges`` (which renders
them), so neither imports the other. Two views are built from it:

- ``training_view()``: the token-level rows the trainer needs, the loss mask set on the tokens
  the policy generated and nothing else (prompt, observation and template tokens are context);
- ``view_for_judge(budget)``: what a judge template sees, each observation cut to a budget so a
  long episode cannot overflow the judge's context (the cuts are counted).

Token ids are kept as the engine sampled them: re-tokenising the chat drifts from them and breaks
the importance ratios.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from grm.base import GrmError
from grm.data.text_budget import cut_text

TRAJECTORY_VERSION = 1
"""``to_dict()["trajectory_version"]``; ``from_dict`` refuses any other (a newer grm wrote it)."""

Role = Literal["system", "user", "assistant", "tool"]
EndReason = Literal[
    "done",  # the environment said so
    "max_turns",  # the episode's turn limit
    "max_tokens",  # its total token budget (context or generated)
    "wall_time",  # its wall-clock limit
    "tool_time",  # its budget of seconds spent in tools
    "env_error",  # the environment raised or returned something malformed
    "bad_tool_call",  # a malformed tool call ended it (when the runner ends rather than answers)
    "aborted",  # the run stopped it (it is not trained; a resumed run starts it again)
]
END_REASONS: tuple[str, ...] = get_args(EndReason)


class TrajectoryError(GrmError):
    """A trajectory that cannot be read or trained on: the message names the trajectory and field."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call the policy made, parsed from its text."""

    name: str
    arguments: dict[str, Any]
    id: str = ""
    """Unique inside the episode (``call_<turn>_<k>``); tool observations answer it by this id."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "id": self.id}

    def openai(self) -> dict[str, Any]:
        """The call in OpenAI chat-completions form (``arguments`` as a dict: chat templates want one)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Turn:
    """One message of the episode after the task's first messages.

    ``token_ids`` are the tokens this turn added to the context, in order. For an assistant turn
    they are exactly the ids the policy sampled (its end-of-turn token included when it sampled
    one), with one ``logprobs`` entry each. For any other turn they are context: the observation
    rendered by the chat template together with the template text around it (the end of the
    previous turn when the policy did not sample it, the header of the next assistant turn).
    """

    role: Role
    content: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    """Assistant turns: log-probability of each sampled token under the policy that sampled it."""
    policy_version: int | None = None
    """Assistant turns: weights version of the engine that generated it."""
    finish_reason: str | None = None
    """Assistant turns: the engine's ``stop`` or ``length``."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Assistant turns: the calls parsed from ``content``."""
    tool_call_error: str | None = None
    """Assistant turns: why its tool call could not be parsed (``ToolCallError.message``)."""
    tool_name: str | None = None
    """Tool turns: the tool that answered."""
    tool_call_id: str | None = None
    ok: bool = True
    """Observations: False when the tool failed (timeout, crash, limit) or the call could not be run."""
    error: str | None = None
    """Observations: the failure's reason (``timeout``, ``memory_limit``, ``bad_json``, ...), None when ok."""
    cut: bool = False
    """Tool turns: the output was cut to the sandbox's output budget."""
    seconds: float = 0.0
    """Tool turns: wall-clock seconds the call took."""

    def to_dict(self) -> dict[str, Any]:
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return fields | {"tool_calls": [c.to_dict() for c in self.tool_calls]}


@dataclass
class Task:
    """What the episode was asked: the data row, the first messages ``reset`` gave and the tools
    offered (OpenAI function format)."""

    row: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class TrainingView:
    """The token-level rows of one episode for the trainer. Every list is ``[T]``, aligned with
    ``token_ids`` (position t describes token t itself):

    - ``token_ids``: ``prompt_ids`` then each turn's ``token_ids``, in order;
    - ``loss_mask``: 1 exactly on tokens the policy generated, 0 on prompt, observation and
      template tokens;
    - ``old_logprobs``: the recorded log-probability of each generated token, 0.0 where masked;
    - ``versions``: the policy version that generated each token, -1 where masked or unknown;
    - ``turn_index``: the index in ``turns`` of the turn each token belongs to, -1 for the prompt.

    ``grm.training.TrainBatch`` aligns its token fields with *targets* (position t predicts token
    t + 1, ``[L - 1]``): ``targets()`` gives the mask and log-probs shifted that way.
    """

    token_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    versions: list[int]
    turn_index: list[int]
    prompt_len: int
    """Tokens before the first generated one (all of them when the policy generated none)."""

    def targets(self) -> tuple[list[int], list[float]]:
        """``(loss_mask[1:], old_logprobs[1:])``: ``[T - 1]``, position t about target token t + 1."""
        return self.loss_mask[1:], self.old_logprobs[1:]


@dataclass(frozen=True)
class JudgeView:
    """What a judge template sees of an episode; ``variables()`` are the template's variables."""

    task: list[dict[str, str]]
    """The first messages: ``role`` and ``content``."""
    tools: list[str]
    """Names of the tools offered."""
    turns: list[dict[str, Any]]
    """Per turn: ``index``, ``role``, ``content`` (observations cut to the budget), ``tool_calls``
    (``name``, ``arguments``), ``tool_call_error``, ``tool_name``, ``ok``, ``error``,
    ``cut_for_judge`` (cut here) and ``cut`` (already cut by the sandbox)."""
    final_answer: str | None
    signals: dict[str, float]
    end_reason: str | None
    cuts: int
    """Observations cut to fit the budget."""

    def variables(self) -> dict[str, Any]:
        """``task``, ``tools``, ``turns``, ``final`` (the final answer), ``signals``, ``end_reason``, ``cuts``."""
        names = ("task", "tools", "turns", "signals", "end_reason", "cuts")
        return {k: getattr(self, k) for k in names} | {"final": self.final_answer}


@dataclass
class Trajectory:
    """One episode. ``prompt_ids`` are the tokens of the task's first messages rendered by the chat
    template with the tools, up to and including the first assistant header."""

    id: str
    task: Task
    prompt_ids: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    end_reason: EndReason | None = None
    """None while the episode runs."""
    end_detail: str | None = None
    """A short human note on the end (the environment's exception, the malformed call)."""
    signals: dict[str, float] = field(default_factory=dict)
    """The environment's rule outcomes (``success``, ``tool_errors``, ...), last value per name."""
    final_answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def first_version(self) -> int | None:
        """Policy version of the first assistant turn: an episode's staleness counts from it."""
        return next((t.policy_version for t in self.turns if t.role == "assistant"), None)

    # ------------------------------------------------------------------ training view

    def training_view(self) -> TrainingView:
        """The whole episode's tokens with the loss mask on policy tokens only (see ``TrainingView``);
        ``TrajectoryError`` when an assistant turn lacks its ids or one log-prob per id."""
        ids = list(self.prompt_ids)
        mask, lps, vers, where = [0] * len(ids), [0.0] * len(ids), [-1] * len(ids), [-1] * len(ids)
        prompt_len = None
        for i, t in enumerate(self.turns):
            n = len(t.token_ids)
            if t.role == "assistant":
                if not t.token_ids and t.content:
                    raise TrajectoryError(f"trajectory {self.id}: turn {i} (assistant) has text but no token ids")
                if t.logprobs is None or len(t.logprobs) != n:
                    got = "none" if t.logprobs is None else len(t.logprobs)
                    raise TrajectoryError(f"trajectory {self.id}: turn {i} (assistant) has {n} token ids and {got} log-probs")
                if prompt_len is None and n:
                    prompt_len = len(ids)
                lps += [float(x) for x in t.logprobs]
                vers += [t.policy_version if t.policy_version is not None else -1] * n
            else:
                lps += [0.0] * n
                vers += [-1] * n
            mask += [int(t.role == "assistant")] * n
            ids += t.token_ids
            where += [i] * n
        return TrainingView(ids, mask, lps, vers, where, len(ids) if prompt_len is None else prompt_len)

    # ------------------------------------------------------------------ judge view

    def view_for_judge(
        self, budget: int, count: Callable[[str], int] = len, *, signals: Collection[str] | None = None
    ) -> JudgeView:
        """The judge-facing view, every observation (tool and user turns) cut to ``budget`` units of
        ``count`` (characters by default; pass a tokenizer's token count for tokens). A cut keeps
        the head (two thirds) and the tail (one third, where errors and results usually are) with a
        note between. ``signals`` names the signals the judge may see (None: all); a rule outcome the
        judge must not see (held-out success) is left out here."""
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        turns, cuts = [], 0
        for i, t in enumerate(self.turns):
            content, was_cut = t.content, False
            if t.role != "assistant":
                content, was_cut = cut_text(t.content, budget, count)
                cuts += was_cut
            turns.append(
                {
                    "index": i,
                    "role": t.role,
                    "content": content,
                    "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in t.tool_calls],
                    "tool_call_error": t.tool_call_error,
                    "tool_name": t.tool_name,
                    "ok": t.ok,
                    "error": t.error,
                    "cut": t.cut,
                    "cut_for_judge": was_cut,
                }
            )
        shown = {k: v for k, v in self.signals.items() if signals is None or k in signals}
        task = [{"role": str(m.get("role", "")), "content": str(m.get("content") or "")} for m in self.task.messages]
        tools = [str((s.get("function") or s).get("name", "")) for s in self.task.tools]
        return JudgeView(task, tools, turns, self.final_answer, shown, self.end_reason, cuts)

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``json.dumps`` takes it; non-finite signals become None on the way via
        ``grm.jsonl.json_safe`` when written with ``append_jsonl``)."""
        return {
            "trajectory_version": TRAJECTORY_VERSION,
            "id": self.id,
            "task": {"row": self.task.row, "messages": self.task.messages, "tools": self.task.tools},
            "prompt_ids": list(self.prompt_ids),
            "turns": [t.to_dict() for t in self.turns],
            "end_reason": self.end_reason,
            "end_detail": self.end_detail,
            "signals": dict(self.signals),
            "final_answer": self.final_answer,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Trajectory:
        """Read ``to_dict``'s output back; ``TrajectoryError`` naming the trajectory and field when
        it is not one (another version, a missing or mistyped field)."""
        if not isinstance(d, dict):
            raise TrajectoryError(f"trajectory: expected an object, found {type(d).__name__}")
        shown = str(d.get("id", "?"))
        name = f"trajectory {shown if len(shown) <= 80 else shown[:80] + '...'}"  # an id may be megabytes
        v = d.get("trajectory_version")
        if v != TRAJECTORY_VERSION:
            raise TrajectoryError(f"{name}: trajectory_version {v!r}; this grm reads version {TRAJECTORY_VERSION}")
        r = _Reader(name)
        task = r.obj(d, "task")
        end = d.get("end_reason")
        if end is not None and end not in END_REASONS:
            raise TrajectoryError(f"{name}: end_reason {end!r}; expected one of {', '.join(END_REASONS)}")
        signals = r.obj(d, "signals")
        for k, x in signals.items():
            if x is None:  # a NaN signal, written as null by json_safe
                signals[k] = math.nan
            elif not _Reader.is_number(x):
                raise TrajectoryError(f"{name}: signals.{k}: expected a number, found {type(x).__name__}")
        messages, tools = r.seq(task, "messages"), r.seq(task, "tools")
        for k, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role", ""), str) or not isinstance(m.get("content") or "", str):
                raise TrajectoryError(f"{name}: task.messages[{k}]: expected a message object with text role and content")
        for k, t in enumerate(tools):
            if not isinstance(t, dict) or not isinstance(t.get("function") or {}, dict):
                raise TrajectoryError(f"{name}: task.tools[{k}]: expected a tool schema object (with a 'function' object)")
        return cls(
            id=r.typed(d, "id", str),
            task=Task(r.obj(task, "row"), messages, tools),
            prompt_ids=r.ints(d, "prompt_ids"),
            turns=[_turn(r, t, f"turns[{i}]") for i, t in enumerate(r.seq(d, "turns"))],
            end_reason=end,
            end_detail=r.typed(d, "end_detail", str, optional=True),
            signals={k: float(x) for k, x in signals.items()},
            final_answer=r.typed(d, "final_answer", str, optional=True),
            metadata=r.obj(d, "metadata"),
        )


def _turn(r: _Reader, t: Any, where: str) -> Turn:
    if not isinstance(t, dict):
        raise TrajectoryError(f"{r.name}: {where}: expected an object, found {type(t).__name__}")
    role = t.get("role")
    if role not in get_args(Role):
        raise TrajectoryError(f"{r.name}: {where}.role: {role!r}; expected one of {', '.join(get_args(Role))}")
    lps = t.get("logprobs")
    if lps is not None and (not isinstance(lps, list) or not all(_Reader.is_number(x) for x in lps)):
        raise TrajectoryError(f"{r.name}: {where}.logprobs: expected a list of numbers")
    calls = []
    for k, c in enumerate(r.seq(t, "tool_calls", where)):
        at = f"{where}.tool_calls[{k}]"
        if not isinstance(c, dict):
            raise TrajectoryError(f"{r.name}: {at}: expected an object")
        calls.append(ToolCall(r.typed(c, "name", str, at=at), r.obj(c, "arguments", at), r.typed(c, "id", str, at=at)))
    return Turn(
        role=role,
        content=r.typed(t, "content", str, at=where),
        token_ids=r.ints(t, "token_ids", where),
        logprobs=None if lps is None else [float(x) for x in lps],
        policy_version=r.typed(t, "policy_version", int, optional=True, at=where),
        finish_reason=r.typed(t, "finish_reason", str, optional=True, at=where),
        tool_calls=calls,
        tool_call_error=r.typed(t, "tool_call_error", str, optional=True, at=where),
        tool_name=r.typed(t, "tool_name", str, optional=True, at=where),
        tool_call_id=r.typed(t, "tool_call_id", str, optional=True, at=where),
        ok=r.typed(t, "ok", bool, at=where),
        error=r.typed(t, "error", str, optional=True, at=where),
        cut=r.typed(t, "cut", bool, at=where),
        seconds=r.number(t, "seconds", at=where),
    )


class _Reader:
    """Typed field reads that name the trajectory and field in their error."""

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def is_number(x: Any) -> bool:
        """A JSON number a float holds (an integer of 400 digits does not: float() overflows)."""
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            return False
        try:
            float(x)
        except OverflowError:
            return False
        return True

    def typed(self, d: dict, key: str, kind: Any, *, optional: bool = False, at: str = "") -> Any:
        x = d.get(key)
        if x is None and optional:
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if x is None or not isinstance(x, kinds) or (isinstance(x, bool) and bool not in kinds):
            want = " or ".join(k.__name__ for k in kinds)
            raise TrajectoryError(f"{self.name}: {at + '.' if at else ''}{key}: expected {want}, found {type(x).__name__}")
        return x

    def number(self, d: dict, key: str, *, at: str = "") -> float:
        x = self.typed(d, key, (int, float), at=at)
        if not self.is_number(x):
            raise TrajectoryError(f"{self.name}: {at + '.' if at else ''}{key}: a number too large for a float")
        return float(x)

    def obj(self, d: dict, key: str, at: str = "") -> dict:
        return dict(self.typed(d, key, dict, at=at))

    def seq(self, d: dict, key: str, at: str = "") -> list:
        return list(self.typed(d, key, list, at=at))

    def ints(self, d: dict, key: str, at: str = "") -> list[int]:
        xs = self.seq(d, key, at)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in xs):
            raise TrajectoryError(f"{self.name}: {at + '.' if at else ''}{key}: expected a list of integers")
        return xs
