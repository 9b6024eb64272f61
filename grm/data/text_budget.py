"""Text cut to a budget of characters or tokens, keeping its head and tail around a note of what was
cut: observations in a policy's context, trajectories shown to a judge, long text in ``grm view``."""

from __future__ import annotations

from collections.abc import Callable


def cut_text(text: str, budget: int, count: Callable[[str], int] = len) -> tuple[str, bool]:
    """``(text, False)`` when ``count(text) <= budget``, else its head (2/3 of the budget) and tail
    (1/3) around a note saying how many characters were cut, and True. ``count`` must grow with the
    text (a character or token count); it is called O(log len(text)) times."""
    if count(text) <= budget:
        return text, False
    tail_budget = budget // 3
    head = _longest(text, budget - tail_budget, count, lambda k: text[:k])
    tail = _longest(text, tail_budget, count, lambda k: text[len(text) - k :] if k else "")
    dropped = len(text) - head - tail
    return f"{text[:head]}\n[... {dropped} characters cut ...]\n{text[len(text) - tail :] if tail else ''}", True


def _longest(text: str, budget: int, count: Callable[[str], int], piece: Callable[[int], str]) -> int:
    """The largest k with ``count(piece(k)) <= budget`` (binary search; ``count`` monotone in k)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(piece(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
