"""``clarify``: a dialogue with a scripted simulated user whose request leaves out the one detail
the answer depends on; the policy has to ask for it before answering. Success is rule-checked: the
final number within the task's tolerance of the exact answer.

Tasks are made from a seed alone (row ``{"seed": N}``; ``grm.data.clarify_tasks``, with disjoint
train and held-out splits, and a hidden value a guess rarely hits).

The user answers a question (a turn ending in ``?``, or one that asks for the missing detail by its
family's keywords) with the hidden detail, any other turn without an answer with a nudge that does
not give it, and a final answer (``\\boxed{...}`` or ``Answer: ...``) with a closing line that does
not say whether it was right (a judge reading the dialogue must not learn the rule signal from it).
"""

from __future__ import annotations

import re
from typing import Any

from grm.data.clarify_tasks import FAMILIES, SEEDS, SPLITS, ClarifyTask, split_of, task, task_rows
from grm.envs.base import AssistantMessage, Observation, Reset, Step

__all__ = [
    "FAMILIES",
    "SPLITS",
    "ClarifyEnv",
    "ClarifyTask",
    "answer_number",
    "extract_answer",
    "is_question",
    "split_of",
    "task",
    "task_rows",
]

# ----------------------------------------------------------------------------- reading turns

# One level of nested braces (``\boxed{12\text{ cm}}``); ``Answer:`` needs its colon, so a question
# such as "should the answer be in cm?" is not taken for one.
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\}){0,80})\}")
_ANSWER = re.compile(r"(?i)\banswer\s*:\s*([^\n]{1,80})")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+")
_CUES = ("?", "tell me", "let me know", "could you", "can you", "please provide", "please share", "what is", "what's")


def extract_answer(text: str) -> str | None:
    """The final answer written as ``\\boxed{...}`` (the last one), else ``Answer: ...``; None if neither."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    said = _ANSWER.findall(text)
    return said[-1].strip() if said else None


def answer_number(answer: str) -> float | None:
    """The first number an extracted answer states (``$1,234.50``, ``170.2 cm``), None if none."""
    m = _NUMBER.search(answer)
    if m is None:
        return None
    try:
        return float(m.group().replace(",", ""))
    except ValueError:
        return None


def is_question(text: str, keywords: tuple[str, ...]) -> bool:
    """The turn ends with ``?`` (markdown and quotes aside), or names the missing detail by one of
    ``keywords`` together with a request cue (``?``, ``tell me``, ``could you``...)."""
    if text.rstrip().rstrip("*_\"')").endswith("?"):
        return True
    low = text.lower()
    return any(k in low for k in keywords) and any(c in low for c in _CUES)


SYSTEM_PROMPT = (
    "Help the user with their request. When you know the result, give the final answer as \\boxed{N}, "
    "where N is a number without units."
)
HINT = " If the request is missing a detail you need, ask the user for it first."
NUDGE = "Sorry, I'm not sure what you need from me. What is the answer?"
CLOSING = "Thanks, that's all I needed."


class ClarifyEnv:
    """A simulated user leaves out the one detail the answer needs; success is asking, then the right number."""

    def __init__(self, max_turns: int = 4, hint: bool = True) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        if not isinstance(hint, bool):
            raise ValueError(f"hint must be true or false, got {hint!r}")
        self.max_turns, self.hint = max_turns, hint
        self.task: ClarifyTask | None = None
        self.turns, self.asked = 0, False

    def reset(self, row: dict[str, Any]) -> Reset:
        seed = SEEDS.seed_of(row)
        self.task, self.turns, self.asked = task(seed), 0, False
        system = SYSTEM_PROMPT + (HINT if self.hint else "")
        return Reset([{"role": "system", "content": system}, {"role": "user", "content": self.task.request}])

    def step(self, message: AssistantMessage) -> Step:
        if self.task is None:
            raise RuntimeError("step before reset")
        self.turns += 1
        final = extract_answer(message.content)
        if final is not None:
            success = self.task.correct(answer_number(final))
            return Step([Observation("user", CLOSING)], True, self._signals(success), final)
        if is_question(message.content, self.task.keywords):
            reply = ("As I said: " if self.asked else "") + self.task.detail
            self.asked = True
        else:
            reply = NUDGE
        if self.turns >= self.max_turns:
            return Step([Observation("user", reply)], True, self._signals(False) | {"hit_max_turns": 1.0})
        return Step([Observation("user", reply)], False, self._signals(False))

    def _signals(self, success: bool) -> dict[str, float]:
        return {"success": float(success), "asked_clarifying_question": float(self.asked), "turns": float(self.turns)}
