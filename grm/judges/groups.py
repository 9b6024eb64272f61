"""A pairwise judge inside a group of one prompt's responses: which pairs it compares
(``plan_pairs``), a Bradley–Terry fit of their outcomes (``bradley_terry``), and one result per
response from the comparisons (``group_results``). Pure: no engine, no Ray.

Players are the group's responses ``0..size-1`` and, with ``strategy: anchor``, the anchor answer
as player ``size``. An outcome ``y`` of pair (i, j) is how much i beat j, in [0, 1].
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from grm.config.judge import GroupSpec
from grm.judges.types import JudgeResult

Pair = tuple[int, int]
"""(i, j): response i shown as response 1, j as response 2; j == group size is the anchor."""


def plan_pairs(size: int, spec: GroupSpec, key: str) -> list[Pair]:
    """The comparisons for a group of ``size`` responses under ``spec``.

    Over ``max_comparisons`` a subset is kept so every response has one while the budget allows: a
    ring (i against i+1) first, then the other pairs in an order seeded by ``key``.
    """
    if spec.strategy == "anchor":
        planned = [(i, size) for i in range(size)]
    elif size < 2:
        planned = []
    elif spec.strategy == "circular":
        planned = [(i, (i + 1) % size) for i in range(size if size > 2 else 1)]
    else:
        planned = [(i, j) for i in range(size) for j in range(i + 1, size)]
    cap = spec.max_comparisons
    if cap is None or len(planned) <= cap:
        return planned
    ring = [p for p in planned if p[1] == size or p[1] == (p[0] + 1) % size or p == (0, size - 1)][:size]
    rest = [p for p in planned if p not in ring]
    random.Random(f"{key}:pairs").shuffle(rest)
    chosen = set((ring + rest)[:cap])
    return [p for p in planned if p in chosen]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def outcome(result: JudgeResult | None, how: str) -> float | None:
    """How much response 1 of a swap-combined comparison won, in [0, 1]; None when it is masked."""
    if result is None or result.verdict is None:
        return None
    if how == "verdict":
        return result.score
    margins = [m for m in (result.view_margins or [result.margin]) if m is not None]
    if not margins:
        return None
    return _sigmoid(sum(margins) / len(margins))


def bradley_terry(players: int, outcomes: Sequence[tuple[int, int, float]], prior: float, tol: float = 1e-10) -> list[float]:
    """Strengths ``s`` maximising ``sum y log sig(s_i - s_j) + (1 - y) log sig(s_j - s_i)`` over the
    outcomes ``(i, j, y)`` minus ``prior / 2 * |s|^2``, by Newton's method (the objective is strictly
    concave for ``prior > 0``, so it converges from 0 in a few steps). A player without comparisons
    stays at 0."""
    s = np.zeros(players)
    for _ in range(100):
        grad = -prior * s
        neg_hess = prior * np.eye(players)
        for i, j, y in outcomes:
            p = _sigmoid(float(s[i] - s[j]))
            w = p * (1.0 - p)
            grad[i] += y - p
            grad[j] -= y - p
            neg_hess[i, i] += w
            neg_hess[j, j] += w
            neg_hess[i, j] -= w
            neg_hess[j, i] -= w
        step = np.linalg.solve(neg_hess, grad)
        s += step
        if float(np.max(np.abs(step), initial=0.0)) < tol:
            break
    return [float(x) for x in s]


def _entry(k: int, i: int, j: int, size: int, res: JudgeResult | None, y: float | None) -> dict[str, Any]:
    """Comparison (i, j) as response k (i or j) sees it: margins and outcome from k's side."""
    sign = 1.0 if k == i else -1.0
    other = j if k == i else i
    verdict = None if res is None else res.verdict
    if verdict in ("1", "2"):
        verdict = "win" if (verdict == "1") == (k == i) else "loss"
    return {
        "against": "anchor" if other == size else other,
        "shown_first": k == i,
        "verdict": verdict,
        "margin": None if res is None or res.margin is None else sign * res.margin,
        "view_margins": None if res is None else [None if m is None else sign * m for m in res.view_margins or []],
        "outcome": None if y is None else (y if k == i else 1.0 - y),
        "critiques": [] if res is None else [r.text for r in res.samples],
    }


def group_results(
    name: str, size: int, pairs: Sequence[Pair], results: Sequence[JudgeResult | None], spec: GroupSpec
) -> list[JudgeResult]:
    """One result per response of a group from its comparisons (``results[k]`` judged ``pairs[k]``).

    ``reward`` is P(beats the anchor) (anchor strategy) or P(beats the group's mean strength) under
    the fitted Bradley–Terry strengths, or the mean outcome (``win_rate``); ``score`` is the strength
    or the win rate. A masked comparison is left out; a response with no valid comparison is masked.
    Each comparison's counters (parse failures, truncated responses, tokens, seconds) go to the
    response shown first, so a step's sums over responses count every comparison once.
    """
    outs = [JudgeResult(judge=name, comparisons=[]) for _ in range(size)]
    valid: list[tuple[int, int, float]] = []
    for (i, j), res in zip(pairs, results, strict=True):
        y = outcome(res, spec.outcome)
        if y is not None:
            valid.append((i, j, y))
        for k in (i, j):
            if k < size:
                outs[k].comparisons.append(_entry(k, i, j, size, res, y))  # type: ignore[union-attr]
        if res is not None:
            first = outs[i]
            first.parse_failures += res.parse_failures
            first.one_order_failed += res.one_order_failed
            first.judge_directed += res.judge_directed
            first.truncated += res.truncated
            first.tokens += res.tokens
            first.seconds += res.seconds
            first.provenance = first.provenance or res.provenance
    compared = sorted({k for i, j, _ in valid for k in (i, j) if k < size})
    anchored = spec.strategy == "anchor"
    if spec.reward == "bradley_terry" and compared:
        strength = bradley_terry(size + int(anchored), valid, spec.prior)
        base = strength[size] if anchored else sum(strength[k] for k in compared) / len(compared)
    for k in compared:
        out = outs[k]
        if spec.reward == "bradley_terry":
            out.score = strength[k]
            out.reward = _sigmoid(strength[k] - base)
        else:
            mine = [c["outcome"] for c in out.comparisons or [] if c["outcome"] is not None]
            out.score = out.reward = sum(mine) / len(mine)
    for k, out in enumerate(outs):
        if k not in compared:
            out.error = (
                f"no valid comparison ({len(out.comparisons or [])} planned, all masked)"
                if out.comparisons
                else "nothing to compare with (no anchor answer, or no other response)"
            )
    return outs
