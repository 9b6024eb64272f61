"""A sample's episode as the page shows it: the ``trajectory`` of a samples.jsonl row (what
``Trajectory.to_dict`` wrote) read back and checked, then reduced to what a person reads turn by
turn, with each turn's part in the loss and its credit.

The trajectory is read with ``Trajectory.from_dict``, so a malformed one is a bad row naming the
field exactly as the trainer would name it. Token ids and log-probs are not sent (a turn shows how
many tokens it put in the context and whether they were trained on), and every text is bounded:
an observation that printed 10 MB reaches the page as its head and tail around a note, the same cut
a judge sees (``grm.data.text_budget.cut_text``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from grm.data.text_budget import cut_text
from grm.data.trajectory import Trajectory, TrajectoryError, Turn
from grm.view.index import bad_row

MAX_TEXT_CHARS = 20_000
"""Characters of one text the page gets at most (a turn, a task message, a tool call's arguments)."""
MAX_TURNS = 200
"""Turns of one episode the page gets at most (the first ones; the rest are counted)."""
MAX_SIGNALS = 100
MAX_NOTE_CHARS = 2_000
"""Characters of a short note (the end detail, a tool call error, a tool error)."""


def _text(text: str | None, limit: int = MAX_TEXT_CHARS) -> tuple[str, bool]:
    return cut_text(text or "", limit)


def _credits(credit: list[float | None] | None, turns: list[Turn]) -> list[float | None] | str:
    """One credit per turn: ``turn_credit`` aligned with the turns, or with the assistant turns (a
    per-turn advantage exists only where the policy generated); a message when it fits neither."""
    if credit is None:
        return [None] * len(turns)
    assistant = [i for i, t in enumerate(turns) if t.role == "assistant"]
    if len(credit) == len(turns):
        return list(credit)
    if len(credit) == len(assistant):
        out: list[float | None] = [None] * len(turns)
        for i, c in zip(assistant, credit, strict=True):
            out[i] = c
        return out
    return f"turn_credit: {len(credit)} values, but the trajectory has {len(turns)} turns ({len(assistant)} by the assistant)"


def _mean(xs: list[float] | None) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _turn(i: int, t: Turn, credit: float | None) -> dict[str, Any]:
    content, cut_here = _text(t.content)
    calls = []
    for c in t.tool_calls:
        args, args_cut = _text(json.dumps(c.arguments, ensure_ascii=False, indent=1, default=str))
        calls.append({"name": _text(c.name, 200)[0], "id": _text(c.id, 200)[0], "arguments": args, "cut_for_view": args_cut})
        cut_here |= args_cut
    trained = t.role == "assistant" and bool(t.token_ids)
    return {
        "index": i,
        "role": t.role,
        "content": content,
        "cut_for_view": cut_here,
        "trained": trained,
        "tokens": len(t.token_ids),
        "policy_version": t.policy_version,
        "finish_reason": None if t.finish_reason is None else _text(t.finish_reason, 200)[0],
        "mean_logprob": _mean(t.logprobs) if trained else None,
        "tool_calls": calls,
        "tool_call_error": None if t.tool_call_error is None else _text(t.tool_call_error, MAX_NOTE_CHARS)[0],
        "tool_name": None if t.tool_name is None else _text(t.tool_name, 200)[0],
        "tool_call_id": None if t.tool_call_id is None else _text(t.tool_call_id, 200)[0],
        "ok": t.ok,
        "error": None if t.error is None else _text(t.error, MAX_NOTE_CHARS)[0],
        "cut": t.cut,
        "seconds": t.seconds,
        "credit": credit,
    }


def _tool_name(spec: Any) -> str:
    """A tool's name from its OpenAI function spec (``{"type": "function", "function": {"name"}}``)."""
    if not isinstance(spec, dict):
        return ""
    f = spec.get("function")
    return _text(str((f if isinstance(f, dict) else spec).get("name", "")), 200)[0]


def _mask_problem(traj: Trajectory) -> str | None:
    """Why the trainer would refuse this episode's loss mask (an assistant turn without its ids or
    one log-prob per id), None when it would build it."""
    try:
        traj.training_view()
    except TrajectoryError as e:
        return _text(str(e), MAX_NOTE_CHARS)[0]
    return None


def episode_view(traj: Trajectory, credit: list[float | None]) -> dict[str, Any]:
    """The page's view of an episode; ``credit`` has one entry per turn (None: no credit)."""
    task = []
    for m in traj.task.messages[:MAX_TURNS]:
        m = m if isinstance(m, dict) else {"content": m}
        raw = m.get("content")
        content, was_cut = _text(raw if isinstance(raw, str) else json.dumps(raw, default=str))
        task.append({"role": _text(str(m.get("role", "")), 200)[0], "content": content, "cut_for_view": was_cut})
    tools = [_tool_name(s) for s in traj.task.tools[:MAX_SIGNALS]]
    shown = traj.turns[:MAX_TURNS]
    turns = [_turn(i, t, c) for i, (t, c) in enumerate(zip(shown, credit, strict=False))]
    policy = sum(len(t.token_ids) for t in traj.turns if t.role == "assistant")
    context = len(traj.prompt_ids) + sum(len(t.token_ids) for t in traj.turns if t.role != "assistant")
    signals = dict(list(traj.signals.items())[:MAX_SIGNALS])
    return {
        "id": _text(traj.id, 200)[0],
        "task": task,
        "task_total": len(traj.task.messages),
        "tools": tools,
        "turns": turns,
        "turns_total": len(traj.turns),
        "prompt_tokens": len(traj.prompt_ids),
        "policy_tokens": policy,
        "context_tokens": context,
        "first_version": traj.first_version,
        "mask_problem": _mask_problem(traj),
        "end_reason": traj.end_reason,
        "end_detail": None if traj.end_detail is None else _text(traj.end_detail, MAX_NOTE_CHARS)[0],
        "signals": {k[:200]: (v if math.isfinite(v) else None) for k, v in signals.items()},
        "signals_total": len(traj.signals),
    }


def with_episode(row: dict[str, Any], where: str) -> dict[str, Any]:
    """A checked sample row with its ``trajectory`` (and ``turn_credit``) replaced by ``episode``,
    the page's view of it; a bad row naming ``where`` and the field when the trajectory is not one.
    Rows without a trajectory come back as they are."""
    if "_error" in row:
        return row
    if row.get("trajectory") is None:
        row.pop("trajectory", None)
        return row
    try:
        traj = Trajectory.from_dict(row.pop("trajectory"))
    except TrajectoryError as e:
        return bad_row(where, str(e))
    credit = _credits(row.pop("turn_credit", None), traj.turns)
    if isinstance(credit, str):
        return bad_row(where, credit)
    row["episode"] = episode_view(traj, credit)
    return row
