"""``revise``: a dialogue with a scripted user who asks for a short piece of writing, then, after the
first answer, for a rewrite that includes a given word. Success is rule-checked on the last answer:
the word is in it (as a whole word, any case). The episode ends with the rewrite: no closing line
that could tell a judge reading the dialogue whether it was right, and the last user message in the
dialogue is the request the rewrite answers. It needs ``env.max_turns`` of at least 2 (the draft
and the rewrite): with 1 every episode ends on the first draft, unsuccessful.

Tasks are made from a seed alone (row ``{"seed": N}``; ``grm.data.revise_tasks``, with disjoint
train and held-out splits: topics, task templates, words and follow-up phrasings).
"""

from __future__ import annotations

from typing import Any

from grm.data.revise_tasks import SEEDS, SPLITS, ReviseTask, split_of, task, task_rows
from grm.envs.base import AssistantMessage, Observation, Reset, Step

__all__ = ["SPLITS", "ReviseEnv", "ReviseTask", "split_of", "task", "task_rows"]

SYSTEM_PROMPT = "You are a helpful writing assistant. Keep your answers short."


class ReviseEnv:
    """Write, then rewrite on request; success is the requested word in the rewrite."""

    def __init__(self, system_prompt: str = SYSTEM_PROMPT) -> None:
        if not isinstance(system_prompt, str):
            raise ValueError(f"system_prompt must be a string, got {system_prompt!r}")
        self.system_prompt = system_prompt
        self.task: ReviseTask | None = None
        self.turns = 0

    def reset(self, row: dict[str, Any]) -> Reset:
        self.task, self.turns = task(SEEDS.seed_of(row)), 0
        first = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return Reset([*first, {"role": "user", "content": self.task.request}])

    def step(self, message: AssistantMessage) -> Step:
        if self.task is None:
            raise RuntimeError("step before reset")
        self.turns += 1
        if self.turns == 1:
            return Step([Observation("user", self.task.followup)], False, self._signals(False))
        success = self.task.kept(message.content)
        return Step([], True, self._signals(success), message.content)

    def _signals(self, success: bool) -> dict[str, float]:
        return {"success": float(success), "turns": float(self.turns)}
