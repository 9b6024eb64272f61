"""Evaluation metrics as pure functions over plain lists.

Pair metrics follow the LLMBar paper (Zeng et al. 2023, arXiv 2310.07641): accuracy with the pair
in its original order, with the outputs swapped, their average, and positional agreement (the same
output wins in both orders). A tie counts as wrong for accuracy. A masked judgment (None) counts as
wrong too, and the masked rate is reported beside it, so failures cannot inflate accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from grm.judges.labelled import accuracy as accuracy  # shared with the gate and canary; re-exported
from grm.judges.types import Verdict
from grm.stats import bootstrap_ci as bootstrap_ci  # shared with grm run's held-out check; re-exported
from grm.stats import mean_ci as mean_ci
from grm.stats import paired_difference as paired_difference

T = TypeVar("T")


def positional_agreement(order1: Sequence[Verdict | None], order2: Sequence[Verdict | None]) -> float:
    """Share of pairs whose winner is the same output in both presentation orders (ties and
    masked judgments do not agree)."""
    if not order1:
        return float("nan")
    return sum(a is not None and a == b and a != "tie" for a, b in zip(order1, order2, strict=True)) / len(order1)


def rate(values: Sequence[T], predicate: Callable[[T], bool]) -> float:
    return sum(1 for v in values if predicate(v)) / len(values) if values else float("nan")


def correlations(pred: Sequence[float], human: Sequence[float]) -> dict[str, float]:
    """Spearman, Kendall (tau-b) and Pearson between judge scores and human scores (scipy)."""
    from scipy import stats

    if len(pred) < 3 or len(set(pred)) < 2 or len(set(human)) < 2:
        return {"spearman": float("nan"), "kendall": float("nan"), "pearson": float("nan")}
    return {
        "spearman": float(stats.spearmanr(pred, human).statistic),
        "kendall": float(stats.kendalltau(pred, human).statistic),
        "pearson": float(stats.pearsonr(pred, human).statistic),
    }


def cohen_kappa(a: Sequence[Verdict | None], b: Sequence[Verdict | None]) -> float:
    """Cohen's kappa between two judges' categorical outputs (masked treated as its own category)."""
    n = len(a)
    if n == 0:
        return float("nan")
    cats = sorted({str(x) for x in list(a) + list(b)})
    po = sum(str(x) == str(y) for x, y in zip(a, b, strict=True)) / n
    pe = sum((sum(str(x) == c for x in a) / n) * (sum(str(y) == c for y in b) / n) for c in cats)
    if pe == 1:
        return 1.0 if po == 1 else float("nan")
    return (po - pe) / (1 - pe)


def majority_vote(rows: Sequence[Sequence[Verdict | None]]) -> list[Verdict | None]:
    """Per item, the verdict most judges gave (masked judges abstain); a split is a tie."""
    out: list[Verdict | None] = []
    for votes in zip(*rows, strict=True):
        counts: dict[Verdict, int] = {}
        for v in votes:
            if v is not None:
                counts[v] = counts.get(v, 0) + 1
        if not counts:
            out.append(None)
            continue
        best = max(counts.values())
        top = [v for v, c in counts.items() if c == best]
        out.append(top[0] if len(top) == 1 else "tie")
    return out


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return (float("nan"), float("nan"))
    m = sum(vals) / len(vals)
    return m, (sum((v - m) ** 2 for v in vals) / len(vals)) ** 0.5


# --------------------------------------------------------------------------- policy evaluation


WIN_POINTS = {"1": 1.0, "2": 0.0, "tie": 0.5}


def win_rate(verdicts: Sequence[Verdict | None], *, reps: int = 1000, seed: int = 0) -> dict[str, object]:
    """Response 1's win rate over decided comparisons (a tie is half a win), with a 95% bootstrap
    interval over items; masked comparisons (None) are counted apart, never as a loss or a tie."""
    pts = [WIN_POINTS[v] for v in verdicts if v is not None]
    rate_ = sum(pts) / len(pts) if pts else float("nan")
    ci = bootstrap_ci(lambda idx: sum(pts[i] for i in idx) / len(idx), len(pts), reps=reps, seed=seed)
    return {
        "n": len(pts),
        "wins": sum(v == "1" for v in verdicts),
        "losses": sum(v == "2" for v in verdicts),
        "ties": sum(v == "tie" for v in verdicts),
        "masked": sum(v is None for v in verdicts),
        "win_rate": rate_,
        "ci95": ci,
    }


def success_rate(outcomes: Sequence[float | None], *, z: float = 1.959964) -> dict[str, object]:
    """Share of successes among the decided outcomes (1.0 success, 0.0 failure) with a 95% Wilson
    score interval, which stays honest at small n and at 0% or 100% (a bootstrap there collapses to
    a point); ``masked`` counts the undecided (None) outcomes, left out rather than taken as failures."""
    decided = [v for v in outcomes if v is not None and not math.isnan(v)]
    n, k = len(decided), sum(v >= 0.5 for v in decided)
    if not n:
        return {"n": 0, "successes": 0, "masked": len(outcomes), "rate": float("nan"), "ci95": (float("nan"), float("nan"))}
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return {
        "n": n,
        "successes": k,
        "masked": len(outcomes) - n,
        "rate": p,
        # exactly 0 (1) when none (all) succeeded: the formula's rounding leaves ~1e-17 there
        "ci95": (0.0 if k == 0 else centre - half, 1.0 if k == n else centre + half),
    }
