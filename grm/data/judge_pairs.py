"""A labelled pair as a judge's training prompts: both orders of the pair, each with the verdict it
should get (``data.judge_prompts``; the ``verdict`` rule verifier reads them back)."""

from __future__ import annotations

from dataclasses import dataclass

PAIR_KEY = "judge_pair"
"""``Prompt.metadata`` / ``Sample.metadata`` key: ``{"pair": ID, "order": "ab" | "ba"}``."""


@dataclass(frozen=True)
class PairOrder:
    name: str
    """``ab``: the responses shown as in the data; ``ba``: swapped."""
    order: list[int]
    """Indices of the data's responses in the order shown."""
    verdict: str
    """The verdict this order should get: ``A`` (the first shown is better) or ``B``."""


def pair_orders(label: int) -> list[PairOrder]:
    """Both orders of a pair whose better response is ``label`` (1 or 2)."""
    if label not in (1, 2):
        raise ValueError(f"label must be 1 or 2, got {label!r}")
    return [
        PairOrder("ab", [0, 1], "A" if label == 1 else "B"),
        PairOrder("ba", [1, 0], "B" if label == 1 else "A"),
    ]


def chosen(order: str, verdict: str) -> int | None:
    """Which of the data's responses (0 or 1) a verdict picks in ``order``; None for a tie."""
    if verdict not in ("A", "B"):
        return None
    first = verdict == "A"
    return (0 if first else 1) if order == "ab" else (1 if first else 0)
