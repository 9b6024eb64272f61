"""Judge results -> one reward per sample (pure; no Ray, no torch).

Per group: the judges' normalised rewards are combined (weights, masking), responses cut by the
token limit lose ``overlong_penalty``, then ``length_control`` acts on the combined reward (never on
one judge's). The step's ``length_corr/...`` metrics say how much each judge's reward and the
combined reward follow response length, before and after that control.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

from grm.config.algorithm import LengthControlSpec
from grm.orchestrator.types import Group, Rollout

FLAT = 1e-9
"""Values of one group that differ by at most this much (relative to their size, at least 1) count
as equal when correlating: regress leaves a reward equal to length as its group mean plus rounding
noise, and the noise must not be read as a correlation."""


class RewardShaping(Protocol):
    """What the reward takes from the algorithm spec (every ``algorithm:`` variant has both)."""

    overlong_penalty: float
    length_control: LengthControlSpec


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


# --------------------------------------------------------------------------- length control


def response_length(rollout: Rollout, unit: str = "tokens") -> int:
    """Length of a response: its sampled tokens, or its characters (``unit: chars``)."""
    return len(rollout.token_ids) if unit == "tokens" else len(rollout.text)


def regress_out_length(rewards: Sequence[float], lengths: Sequence[float]) -> list[float]:
    """One group's rewards [G] (NaN: masked) with their linear dependence on ``lengths`` [G] removed.

    Least squares over the unmasked responses, reward = a + b x length; each unmasked reward becomes
    reward - b x (length - mean length). The group's mean reward is kept, two responses of equal
    length keep their difference, and what is left has zero covariance with length. Fewer than 3
    unmasked responses (two points fit any slope exactly: the judges' signal would go with it) or
    lengths that are all equal: returned unchanged. Masked rewards stay NaN.
    """
    out = list(rewards)
    idx = [i for i, r in enumerate(rewards) if not math.isnan(r)]
    if len(idx) < 3:
        return out
    mean_len = sum(lengths[i] for i in idx) / len(idx)
    mean_r = sum(rewards[i] for i in idx) / len(idx)
    sxx = sum((lengths[i] - mean_len) ** 2 for i in idx)
    if sxx == 0:
        return out
    slope = sum((lengths[i] - mean_len) * (rewards[i] - mean_r) for i in idx) / sxx
    for i in idx:
        out[i] = rewards[i] - slope * (lengths[i] - mean_len)
    return out


def penalise_length(rewards: Sequence[float], lengths: Sequence[float], coef: float) -> list[float]:
    """One group's rewards [G] (NaN: masked), each unmasked one minus ``coef`` x its length's excess
    over the median length of the group's unmasked responses [G]; responses at or below the median
    are unchanged. ``coef`` is reward per unit of length (per token with ``unit: tokens``)."""
    out = list(rewards)
    idx = [i for i, r in enumerate(rewards) if not math.isnan(r)]
    if not idx:
        return out
    median = statistics.median(lengths[i] for i in idx)
    for i in idx:
        out[i] = rewards[i] - coef * max(0.0, lengths[i] - median)
    return out


def control_length(rewards: Sequence[float], lengths: Sequence[float], spec: LengthControlSpec) -> list[float]:
    """One group's rewards [G] under ``spec`` (``method: none`` returns them as they are)."""
    if spec.method == "regress":
        return regress_out_length(rewards, lengths)
    if spec.method == "penalty":
        assert spec.coef is not None  # the spec's validator requires it
        return penalise_length(rewards, lengths, spec.coef)
    return list(rewards)


def _centred(values: Sequence[float]) -> list[float]:
    mean = sum(values) / len(values)
    if max(values) - min(values) <= FLAT * max(1.0, max(abs(v) for v in values)):
        return [0.0] * len(values)
    return [v - mean for v in values]


def length_correlation(groups: Sequence[tuple[Sequence[float | None], Sequence[float]]]) -> float | None:
    """Pearson correlation of values with lengths *within* groups, pooled over the groups.

    ``groups``: per group, values [G] (None or NaN: left out) and lengths [G]. Each group's kept
    values and lengths are centred on that group's own means, then the centred pairs of every
    group are pooled into one Pearson coefficient. This is the dependence group-relative
    advantages see: prompts that draw longer answers and higher rewards across the board add
    nothing, and after ``regress`` it is 0 wherever a group was controlled. None when undefined
    (no spread of values or of lengths within any group), never a made-up 0.
    """
    xs: list[float] = []
    ys: list[float] = []
    for values, lengths in groups:
        keep = [i for i, v in enumerate(values) if v is not None and not math.isnan(v)]
        if len(keep) < 2:
            continue
        xs += _centred([lengths[i] for i in keep])
        ys += _centred([values[i] for i in keep])  # type: ignore[misc]
    sxx = sum(x * x for x in xs)
    syy = sum(y * y for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / math.sqrt(sxx * syy)


def length_metrics(groups: Sequence[Group], unit: str = "tokens") -> dict[str, float | None]:
    """The step's ``length_corr/<judge>`` (that judge's normalised reward), ``length_corr/reward``
    (the combined reward before length control) and, when control is on,
    ``length_corr/reward_controlled`` (after it): within-group Pearson correlations with response
    length (``length_correlation``); None when undefined."""
    lengths = [[response_length(r, unit) for r in g.rollouts] for g in groups]
    names = dict.fromkeys(n for g in groups for n in g.judged)
    m: dict[str, float | None] = {}
    for name in names:
        per = [[x.reward if x is not None else None for x in g.judged.get(name, [None] * len(g.rollouts))] for g in groups]
        m[f"length_corr/{name}"] = length_correlation(list(zip(per, lengths, strict=True)))
    m["length_corr/reward"] = length_correlation(
        [(g.rewards_before_control or g.rewards, ls) for g, ls in zip(groups, lengths, strict=True)]
    )
    if any(g.rewards_before_control for g in groups):
        m["length_corr/reward_controlled"] = length_correlation([(g.rewards, ls) for g, ls in zip(groups, lengths, strict=True)])
    return m


def reward_groups(
    groups: Sequence[Group], weights: dict[str, float], required: dict[str, bool], shaping: RewardShaping | None = None
) -> dict[str, Any]:
    """Set ``rewards`` on every judged group: combined, overlong penalty and length control applied
    (``shaping``: the algorithm spec; None: neither), the rewards before length control kept in
    ``rewards_before_control`` when it is on. Returns the step's stats: masked, masked_by_judge and
    ``length`` (the ``length_corr/...`` metrics)."""
    overlong = shaping.overlong_penalty if shaping is not None else 0.0
    control = shaping.length_control if shaping is not None else LengthControlSpec()
    masked_by = {name: 0 for name in weights}
    for g in groups:
        raw, stats = combine_rewards(g.judged, weights, required, [r.finish_reason for r in g.rollouts], overlong)
        # an episode the environment broke has nothing of the policy's to reward: masked, whatever a
        # judge made of its (empty) answer; counted by env/end/env_error
        raw = [
            math.nan if r.trajectory is not None and r.trajectory.end_reason == "env_error" else x
            for r, x in zip(g.rollouts, raw, strict=True)
        ]
        if control.method == "none":
            g.rewards, g.rewards_before_control = raw, []
        else:
            g.rewards = control_length(raw, [response_length(r, control.unit) for r in g.rollouts], control)
            g.rewards_before_control = raw
        for k, v in stats["masked_by_judge"].items():
            masked_by[k] += v
    return {
        "masked": sum(math.isnan(x) for g in groups for x in g.rewards),
        "masked_by_judge": masked_by,
        "length": length_metrics(groups, control.unit),
    }
