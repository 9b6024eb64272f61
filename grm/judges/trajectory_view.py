"""Trajectories as a judge reads them (``JudgeSpec.trajectory``): each observation cut to its budget,
only the signals the spec lists, and the whole prompt fitted to the judge's context.

``JudgePrompts`` (``grm.judges.prompts``) builds one ``Episode`` per trajectory of an item
(``Sample.trajectory`` or ``Sample.trajectories``) and fits them together; a template gets each as
a dict: ``task`` (the first messages: ``role``, ``content``), ``tools`` (names offered), ``turns``
(per turn ``index`` (0-based in the episode), ``role``, ``content``, ``tool_calls`` (``name``,
``arguments``), ``tool_call_error``, ``tool_name``, ``ok``, ``error``, ``cut`` (by the sandbox),
``cut_for_judge``), ``final`` (the environment's final answer or None), ``signals`` (only those
``trajectory.signals`` lists), ``end_reason``, ``cuts`` (observations cut to the budget),
``omitted`` (the oldest turns left out to fit the context; ``turns`` holds the rest),
``before_answer`` (the turns before the assistant's last) and ``last_request`` (the user's last
request before that turn, or None when fitting left it out): ``answered``.

Fitting, when the rendered prompt is over its limit: first the oldest turns go (one at a time
from the episode with the most turn text left, keeping each episode's last turn), then every
remaining text (task messages, turn contents, string tool arguments, final answers) is capped by
``shares`` so the longest lose most, head and tail kept around a note. Each step is measured on the
real render of every presentation order of the item, so nothing is sent over the limit; a template
whose own text leaves no room is an error naming the item, never an overflowing request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grm.config.judge_trajectory import TrajectoryJudgeSpec
from grm.data.text_budget import cut_text
from grm.data.trajectory import JudgeView, Trajectory
from grm.judges.errors import JudgeError
from grm.judges.guard import shares

Count = Callable[[str], int]

CHARS_PER_TOKEN_BOUND = 128
"""A text longer than this many characters per unit of its budget is taken as over the budget
without counting it, so cutting a 10 MB observation costs probes of at most that size (the probes
of ``cut_text`` are a binary search), not twenty tokenizer passes over megabytes. The longest tokens
measured: SmolLM2 81 characters (a newline and spaces), Qwen2.5-Coder 128 (spaces): only text made
of such runs could fit its budget past the bound, and it is then cut shorter than it needed to be,
never longer (what is kept is always counted)."""

TURN_OVERHEAD = 8
"""Units a rendered turn takes besides its texts (its header, role, tool name): an estimate used
only to decide how many turns to drop before measuring again."""

MIN_TEXT = 8
"""Units every text keeps when texts are cut to fit (``shares`` splits the room above it)."""

MAX_ROUNDS = 8
"""Measure-and-cut rounds before the fit gives up (each round cuts by the measured excess, so two
usually suffice: the cut notes themselves cost a few units)."""


def observation_counter(engine: Any) -> tuple[Count, str]:
    """How observations are measured: the judge model's tokens when its engine is loaded with a fast
    tokenizer, else characters. Returns (count, unit)."""
    tok = getattr(engine, "tokenizer", None)
    if engine is None or not getattr(tok, "is_fast", False):
        return len, "characters"
    return (lambda text: len(tok(text, add_special_tokens=False)["input_ids"])), "tokens"


def bounded(count: Count, budget: int) -> Count:
    """``count`` that calls a text longer than ``CHARS_PER_TOKEN_BOUND x budget`` characters over
    ``budget`` without counting it (never wrong in that direction, see the constant; in characters
    trivially so)."""
    longest = CHARS_PER_TOKEN_BOUND * max(budget, 1)
    return lambda text: budget + 1 if len(text) > longest else count(text)


@dataclass
class Episode:
    """One trajectory as its judge is shown it; fitting changes ``turns``, ``task``, ``final`` and
    ``omitted`` in place (copies: the ``Trajectory`` itself is never changed)."""

    view: JudgeView
    turns: list[dict[str, Any]]
    task: list[dict[str, str]]
    final: str | None
    omitted: int = 0
    shortened: bool = False
    """Shortened to fit the judge's context (turns left out or texts cut)."""

    @classmethod
    def of(cls, trajectory: Trajectory, spec: TrajectoryJudgeSpec, count: Count, unit: str) -> Episode:
        """``trajectory`` with every observation cut to the spec's budget in ``unit`` and only the
        signals the spec lists."""
        budget = spec.observation_tokens if unit == "tokens" else spec.observation_chars
        view = trajectory.view_for_judge(budget, bounded(count, budget), signals=spec.signals)
        turns = [dict(t, tool_calls=[dict(c, arguments=dict(c["arguments"])) for c in t["tool_calls"]]) for t in view.turns]
        return cls(view, turns, [dict(m) for m in view.task], view.final_answer)

    def variables(self) -> dict[str, Any]:
        """What a template sees of the episode (see the module docstring)."""
        return self._shown(self.turns, self.omitted)

    def bare(self) -> dict[str, Any]:
        """The variables with every turn left out: the prompt's size without the episode's turns."""
        return self._shown([], self.omitted + len(self.turns))

    def _shown(self, turns: list[dict[str, Any]], omitted: int) -> dict[str, Any]:
        shown = {"turns": turns, "task": self.task, "final": self.final, "omitted": omitted}
        return self.view.variables() | shown | answered(turns, self.task, omitted)

    def texts(self, task: bool = True) -> list[tuple[dict[str, Any] | Episode, str]]:
        """(holder, key) of every text fitting may cut: task messages (unless ``task`` is False: the
        rest is what the policy wrote or caused), turn contents, string tool arguments and the final
        answer. ``get_text``/``set_text`` read and write one."""
        out: list[tuple[dict[str, Any] | Episode, str]] = [(m, "content") for m in self.task] if task else []
        for t in self.turns:
            out.append((t, "content"))
            out += [(c["arguments"], k) for c in t["tool_calls"] for k, v in c["arguments"].items() if isinstance(v, str)]
        if self.final is not None:
            out.append((self, "final"))
        return out


def answered(turns: list[dict[str, Any]], task: list[dict[str, str]], omitted: int) -> dict[str, Any]:
    """``before_answer``: the turns before the assistant's last one, i.e. what its answer answered,
    in context (what came after it, such as an environment's closing line or the tool result of an
    episode cut short, is not part of it). ``last_request``: the content of the user's last turn
    among them, else the task's own last user message; None when fitting left that out."""
    end = max((i for i, t in enumerate(turns) if t["role"] == "assistant"), default=0)
    before = turns[:end]
    asks = [t["content"] for t in before if t["role"] == "user"]
    first = [m["content"] for m in task if m["role"] == "user"]
    last = asks[-1] if asks else first[-1] if first and not omitted else None
    return {"before_answer": before, "last_request": last}


def get_text(holder: dict[str, Any] | Episode, key: str) -> str:
    return (holder.final or "") if isinstance(holder, Episode) else holder[key]


def set_text(holder: dict[str, Any] | Episode, key: str, text: str) -> None:
    if isinstance(holder, Episode):
        holder.final = text
    else:
        holder[key] = text


def turn_size(turn: dict[str, Any], count: Count) -> int:
    args = "".join(json.dumps(c["arguments"], ensure_ascii=False) for c in turn["tool_calls"])
    return count(turn["content"]) + (count(args) if args else 0) + TURN_OVERHEAD


def fit(episodes: list[Episode], measure: Callable[[], int], limit: int, count: Count, where: str) -> None:
    """Shorten ``episodes`` until ``measure()`` (the item's rendered prompt, in ``count``'s unit, at
    its longest over the presentation orders) is within ``limit``: oldest turns first, then texts."""
    over = measure() - limit
    if over <= 0:
        return
    sizes = [[turn_size(t, count) for t in e.turns] for e in episodes]
    while over > 0:
        dropped = 0
        while dropped < over:
            longer = [i for i, e in enumerate(episodes) if len(e.turns) > 1]
            if not longer:
                break
            k = max(longer, key=lambda i: sum(sizes[i]))
            episodes[k].turns.pop(0)
            episodes[k].omitted += 1
            episodes[k].shortened = True
            dropped += sizes[k].pop(0)
        if not dropped:
            break
        over = measure() - limit
    note = count("\n[... 1000000000 characters cut ...]\n")
    for _ in range(MAX_ROUNDS):
        if over <= 0:
            return
        slots = [(e, h, k) for e in episodes for h, k in e.texts()]
        lengths = [count(get_text(h, k)) for _, h, k in slots]
        floor = MIN_TEXT * len(slots)
        if sum(lengths) <= floor:
            break
        caps = shares(lengths, max(sum(lengths) - over - note * len(slots), floor))
        for (e, h, k), n, cap in zip(slots, lengths, caps, strict=True):
            if n > cap + note:  # a cut adds its note: a text barely over its cap would grow
                text, was_cut = cut_text(get_text(h, k), cap, bounded(count, cap))
                set_text(h, k, text)
                e.shortened |= was_cut
        over = measure() - limit
    if over > 0:
        raise JudgeError(
            f"{where}: the judge prompt is still {over} over its limit of {limit} with every trajectory text cut to"
            " a few tokens: the template and system prompt alone leave no room (a shorter template or a larger context)"
        )
