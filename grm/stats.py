"""Intervals over plain lists of numbers: a percentile bootstrap, the mean of scored items and the
paired difference of two systems on the same items. Standard library only (``grm eval``'s metrics
and ``grm run``'s held-out check share it)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence


def bootstrap_ci(
    stat: Callable[[list[int]], float], n: int, *, reps: int = 1000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat(indices)`` resampling ``n`` items with replacement."""
    if n < 2:
        return (float("nan"), float("nan"))
    rng = random.Random(seed)
    vals = []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        v = stat(idx)
        if not math.isnan(v):
            vals.append(v)
    if not vals:
        return (float("nan"), float("nan"))
    vals.sort()
    lo = vals[int(alpha / 2 * (len(vals) - 1))]
    hi = vals[int((1 - alpha / 2) * (len(vals) - 1))]
    return (lo, hi)


def mean_ci(values: Sequence[float | None], *, reps: int = 1000, seed: int = 0) -> dict[str, object]:
    """Mean of the defined values with a 95% percentile bootstrap interval; ``masked`` counts the
    None (failed) values, which are left out rather than counted as any number."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    mean = sum(vals) / len(vals) if vals else float("nan")
    ci = bootstrap_ci(lambda idx: sum(vals[i] for i in idx) / len(idx), len(vals), reps=reps, seed=seed)
    return {"n": len(vals), "masked": len(values) - len(vals), "mean": mean, "ci95": ci}


def paired_difference(
    a: Sequence[float | None], b: Sequence[float | None], *, reps: int = 1000, seed: int = 0
) -> dict[str, object]:
    """Mean of ``a[i] - b[i]`` over the items both scored, with a paired bootstrap interval (items,
    not the two sides, are resampled, so what the prompts share cancels). ``masked``: items where
    either side has no score."""
    diffs = [x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None and not math.isnan(x - y)]
    mean = sum(diffs) / len(diffs) if diffs else float("nan")
    ci = bootstrap_ci(lambda idx: sum(diffs[i] for i in idx) / len(idx), len(diffs), reps=reps, seed=seed)
    return {"n": len(diffs), "masked": len(a) - len(diffs), "mean": mean, "ci95": ci}
