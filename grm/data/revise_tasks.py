"""Writing tasks with a follow-up request (the ``revise`` environment's tasks, and the
``builtin:revise-train`` / ``builtin:revise-heldout`` prompt sets), with disjoint train and held-out
splits.

A task is a first request (a short piece of writing on an everyday topic) and the user's follow-up
after the first answer: rewrite it so that it includes a given word. Training tasks use the
training topics, task templates and words of ``grm.data.constraints``; held-out tasks its held-out
topics, ``UNSEEN_TASKS`` and ``UNSEEN_VALUES`` words, and follow-up phrasings of their own, so a
held-out dialogue shares nothing with training but the kind of request. Each split is the full
product of its parts in a fixed shuffled order: seed -> one distinct task, no task twice.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from functools import cache
from typing import Any

from grm.data.constraints import HELDOUT_TOPICS, TASKS, TRAIN_TOPICS, UNSEEN_TASKS, UNSEEN_VALUES, VALUES, has_word
from grm.data.seed_splits import SeedSplits

FOLLOWUPS = (
    'Thanks! Could you rewrite that so it includes the word "{word}"?',
    'Nice. Please write it again, and this time use the word "{word}" somewhere.',
    'Good start. Can you revise it to work in the word "{word}"?',
    'Please rewrite your answer so that the word "{word}" appears in it.',
)
"""The training split's follow-up requests."""

UNSEEN_FOLLOWUPS = (
    'I like it. One change: make sure the word "{word}" is in there. Can you redo it?',
    'Could you give me a new version that mentions the word "{word}"?',
    'Almost there. Rewrite it once more, including the word "{word}".',
)
"""The held-out split's follow-up requests: phrasings no training dialogue uses."""

_PARTS: dict[str, tuple[list[str], list[str], list[str], tuple[str, ...]]] = {
    "train": (TRAIN_TOPICS, TASKS, VALUES["keyword"], FOLLOWUPS),
    "held_out": (HELDOUT_TOPICS, UNSEEN_TASKS, UNSEEN_VALUES["keyword"], UNSEEN_FOLLOWUPS),
}


@cache
def _tasks(split: str) -> tuple[tuple[str, str, str, str], ...]:
    """Every (topic, task template, word, follow-up template) of ``split``, in a fixed shuffled order."""
    out = list(itertools.product(*_PARTS[split]))
    random.Random(f"revise-{split}").shuffle(out)
    return tuple(out)


_SIZES = {split: math.prod(len(part) for part in parts) for split, parts in _PARTS.items()}
SPLITS: dict[str, range] = {"train": range(0, _SIZES["train"]), "held_out": range(30_000_000, 30_000_000 + _SIZES["held_out"])}
"""Seeds of each split (``grm eval --policy P --env E --split held_out``); the held-out seeds are
apart from the other environments' (a row of one is never a row of another)."""

SEEDS = SeedSplits(SPLITS, "tasks")
split_of = SEEDS.split_of


@dataclass(frozen=True)
class ReviseTask:
    """One dialogue's script: the first request and the follow-up asking for ``word``."""

    topic: str
    request: str
    word: str
    followup: str

    def kept(self, text: str) -> bool:
        """The text includes ``word`` as a whole word, any case (the ``constraints`` checker's rule)."""
        return has_word(text, self.word)


def task(seed: int) -> ReviseTask:
    """The task of ``seed`` (ValueError for a seed in no split)."""
    split = split_of(seed)
    if split is None:
        raise ValueError(f"seed {seed} is in no split of the revise tasks ({SPLITS})")
    topic, template, word, followup = _tasks(split)[seed - SPLITS[split].start]
    return ReviseTask(topic, template.format(topic=topic), word, followup.format(word=word))


def task_rows(split: str = "train", n: int = 100, start: int = 0) -> list[dict[str, Any]]:
    """``n`` rows of ``split`` from its ``start``-th seed on: ``{"seed": N, "split": NAME}``."""
    return SEEDS.rows(split, n, start)


def prompt_rows(split: str, n: int) -> list[dict[str, Any]]:
    """The first ``n`` tasks of ``split`` as prompt rows: ``id``, ``prompt`` (the first request and
    the follow-up to come, what the run shows and keys groups by: one per task), ``seed`` and
    ``split`` (what the environment starts from)."""
    rows = []
    for r in task_rows(split, n):
        t = task(r["seed"])
        rows.append({"id": f"revise-{r['seed']}", "prompt": f"{t.request}\n(then: {t.followup})", **r})
    return rows
