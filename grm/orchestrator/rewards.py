"""Judge results -> one reward per sample (pure; no Ray, no torch)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from grm.orchestrator.types import Group


def combine_rewards(
    per_judge: dict[str, Sequence[Any]],
    weights: dict[str, float],
    required: dict[str, bool],
    finish_reasons: Sequence[str],
    overlong_penalty: float = 0.0,
) -> tuple[list[float], dict[str, Any]]:
    """Weighted sum of each judge's normalised reward in [0, 1].

    A sample whose *required* judge is masked gets NaN (masked: advantage 0, counted); a masked
    optional judge is left out and the remaining weights are renormalised. Responses cut by the
    token limit lose ``overlong_penalty``. Returns (rewards, stats).
    """
    n = len(finish_reasons)
    rewards: list[float] = []
    masked_by = {name: 0 for name in per_judge}
    for i in range(n):
        total, wsum, masked = 0.0, 0.0, False
        for name, results in per_judge.items():
            r = results[i].reward if results[i] is not None else None
            if r is None:
                masked_by[name] += 1
                if required[name]:
                    masked = True
                continue
            total += weights[name] * r
            wsum += weights[name]
        if masked or wsum == 0:
            rewards.append(math.nan)
            continue
        value = total / wsum * sum(weights.values()) if wsum != sum(weights.values()) else total
        if finish_reasons[i] == "length":
            value -= overlong_penalty
        rewards.append(value)
    stats = {"masked": sum(math.isnan(r) for r in rewards), "masked_by_judge": masked_by}
    return rewards, stats


def reward_groups(
    groups: Sequence[Group], weights: dict[str, float], required: dict[str, bool], overlong_penalty: float = 0.0
) -> dict[str, Any]:
    """Set ``rewards`` on every judged group; returns the step's stats (masked, masked_by_judge)."""
    masked_by = {name: 0 for name in weights}
    for g in groups:
        g.rewards, stats = combine_rewards(g.judged, weights, required, [r.finish_reason for r in g.rollouts], overlong_penalty)
        for k, v in stats["masked_by_judge"].items():
            masked_by[k] += v
    return {"masked": sum(math.isnan(x) for g in groups for x in g.rewards), "masked_by_judge": masked_by}
