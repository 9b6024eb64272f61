"""Length control of the combined reward (algorithm.length_control) and the length_corr metrics."""

import json
import math
import random

import numpy as np
import pytest

from grm.config.algorithm import GRPOSpec, LengthControlSpec
from grm.judges.types import JudgeResult
from grm.orchestrator.rewards import (
    length_correlation,
    penalise_length,
    regress_out_length,
    reward_groups,
)
from grm.orchestrator.step_rows import sample_rows, step_metrics
from grm.orchestrator.types import Group, Rollout
from tests.unit.orchestrator.fakes import outcome, prompts


def pearson(x, y):
    return float(np.corrcoef(np.asarray(x, float), np.asarray(y, float))[0, 1])


# --------------------------------------------------------------------------- regress


def test_regress_leaves_no_correlation_with_length_and_keeps_the_group_mean():
    rng = random.Random(0)
    lengths = [rng.randrange(5, 300) for _ in range(8)]
    rewards = [0.01 * n + rng.random() for n in lengths]  # follows length, plus other signal
    assert pearson(rewards, lengths) > 0.5
    out = regress_out_length(rewards, lengths)
    assert abs(pearson(out, lengths)) < 1e-9
    assert sum(out) / len(out) == pytest.approx(sum(rewards) / len(rewards), abs=1e-12)
    assert length_correlation([(out, lengths)]) == pytest.approx(0.0, abs=1e-9)


def test_a_reward_equal_to_length_becomes_flat_and_its_correlation_undefined_not_zero():
    lengths = [3, 7, 12, 20, 41]
    out = regress_out_length([float(n) for n in lengths], lengths)
    assert max(out) - min(out) < 1e-9 and out[0] == pytest.approx(sum(lengths) / 5)  # all at the group mean
    assert length_correlation([([float(n) for n in lengths], lengths)]) == pytest.approx(1.0)
    assert length_correlation([(out, lengths)]) is None  # rounding noise is not read as a correlation


def test_equal_length_responses_keep_their_order_and_difference():
    lengths = [5, 9, 9, 14, 20]
    rewards = [0.1, 0.3, 0.8, 0.5, 0.9]
    reg = regress_out_length(rewards, lengths)
    assert reg[2] - reg[1] == pytest.approx(0.5, abs=1e-12) and reg[2] > reg[1]
    assert reg != rewards  # the others did move
    pen = penalise_length([0.1, 0.3, 0.8, 0.9, 0.4], [5, 6, 8, 20, 20], 0.01)  # both 20s are past the median (8)
    assert pen[3] - pen[4] == pytest.approx(0.5, abs=1e-12) and pen[3] > pen[4]
    assert pen[3] == pytest.approx(0.9 - 0.12) and pen[4] == pytest.approx(0.4 - 0.12)


def test_masked_rewards_stay_nan_and_do_not_enter_the_fit():
    lengths = [4, 10, 30, 16, 50]
    rewards = [0.2, math.nan, 0.9, 0.5, 0.7]
    out = regress_out_length(rewards, lengths)
    assert math.isnan(out[1])
    kept = regress_out_length([0.2, 0.9, 0.5, 0.7], [4, 30, 16, 50])
    assert [out[i] for i in (0, 2, 3, 4)] == kept
    pen = penalise_length(rewards, lengths, 0.1)  # median of the unmasked lengths 4, 16, 30, 50 is 23
    assert math.isnan(pen[1]) and pen == pytest.approx([0.2, math.nan, 0.9 - 0.7, 0.5, 0.7 - 2.7], nan_ok=True)


def test_regress_leaves_too_small_or_equal_length_groups_alone():
    assert regress_out_length([0.1, 0.9, math.nan], [1, 100, 5]) == pytest.approx([0.1, 0.9, math.nan], nan_ok=True)
    assert regress_out_length([0.1, 0.9, 0.4], [7, 7, 7]) == [0.1, 0.9, 0.4]


def test_penalty_leaves_responses_at_or_below_the_median_unchanged():
    rewards = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    lengths = [10, 30, 20, 30, 35, 100]  # median 30: two responses at it, two below
    out = penalise_length(rewards, lengths, 0.01)
    assert out[:4] == rewards[:4]
    assert out[4] == pytest.approx(0.9 - 0.05) and out[5] == pytest.approx(1.0 - 0.7)
    assert penalise_length(rewards, lengths, 0.0) == rewards


# --------------------------------------------------------------------------- correlation


def test_correlation_is_within_groups_so_prompt_level_differences_do_not_count():
    # group A: short answers, low rewards; group B: long answers, high rewards -> pooled Pearson ~ +1.
    # Within each group the reward falls with length: centred lengths (-10, 0, 10), centred rewards
    # (0.05, -0.05, 0); sxy = 2 x (-0.5), sxx = 2 x 200, syy = 2 x 0.005 -> r = -1 / sqrt(400 x 0.01) = -0.5
    a = ([0.2, 0.1, 0.15], [10, 20, 30])
    b = ([0.95, 0.85, 0.9], [100, 110, 120])
    assert pearson(a[0] + b[0], a[1] + b[1]) > 0.9
    assert length_correlation([a, b]) == pytest.approx(-0.5)
    assert length_correlation([([0.4, None, 0.4, math.nan], [1, 2, 3, 4])]) is None  # constant rewards
    assert length_correlation([([0.1, 0.5], [6, 6])]) is None  # equal lengths
    assert length_correlation([]) is None


# --------------------------------------------------------------------------- reward_groups and the step's metrics


def built_group(token_counts, judged, finish=None):
    p = prompts(1)[0]
    rs = [
        Rollout(
            id=f"g/{k}",
            prompt=p,
            group="g",
            prompt_ids=[1],
            token_ids=[2] * n,
            text="y" * (3 * n),
            logprobs=[0.0] * n,
            finish_reason=(finish or {}).get(k, "stop"),
            version=0,
        )
        for k, n in enumerate(token_counts)
    ]
    return Group(
        "g", rs, judged={name: [JudgeResult(judge=name, score=r, reward=r) for r in rewards] for name, rewards in judged.items()}
    )


LENGTHS = [2, 4, 6, 8]
J = [0.2, 0.4, 0.6, 0.8]  # this judge's reward is length / 10
K = [0.9, 0.1, 0.5, 0.3]


def test_reward_groups_regress_logs_correlations_before_and_after():
    g = built_group(LENGTHS, {"j": J, "k": K})
    stats = reward_groups([g], {"j": 1.0, "k": 1.0}, {"j": True, "k": True}, GRPOSpec(length_control={"method": "regress"}))
    combined = [a + b for a, b in zip(J, K, strict=True)]
    assert g.rewards_before_control == pytest.approx(combined)
    assert abs(pearson(g.rewards, LENGTHS)) < 1e-9 and sum(g.rewards) == pytest.approx(sum(combined))
    length = stats["length"]
    assert set(length) == {"length_corr/j", "length_corr/k", "length_corr/reward", "length_corr/reward_controlled"}
    assert length["length_corr/j"] == pytest.approx(1.0)
    assert length["length_corr/k"] == pytest.approx(pearson(K, LENGTHS))
    assert length["length_corr/reward"] == pytest.approx(pearson(combined, LENGTHS))
    assert length["length_corr/reward_controlled"] == pytest.approx(0.0, abs=1e-9)

    m = step_metrics(outcome([g], stats))
    for key, v in length.items():
        assert m[key] == v
    rows = sample_rows(0, [g], {r.id: 0.0 for r in g.rollouts})
    assert [r["reward_before_length_control"] for r in rows] == g.rewards_before_control
    assert json.loads(json.dumps(m, default=str))["length_corr/j"] == pytest.approx(1.0)


def test_reward_groups_without_control_logs_the_plain_correlations_only():
    g = built_group(LENGTHS, {"j": J, "k": [0.5] * 4})
    stats = reward_groups([g], {"j": 1.0, "k": 1.0}, {"j": True, "k": True})
    assert g.rewards == pytest.approx([a + 0.5 for a in J]) and g.rewards_before_control == []
    assert stats["length"] == {
        "length_corr/j": pytest.approx(1.0),
        "length_corr/k": None,
        "length_corr/reward": pytest.approx(1.0),
    }
    assert "reward_before_length_control" not in sample_rows(0, [g], {r.id: 0.0 for r in g.rollouts})[0]


def test_penalty_counts_characters_with_unit_chars_and_follows_the_overlong_penalty():
    # characters are 3 x tokens: 6, 12, 18, 24; median 15; coef 0.01 per character
    g = built_group(LENGTHS, {"j": [0.5] * 4}, finish={3: "length"})
    spec = GRPOSpec(overlong_penalty=0.25, length_control={"method": "penalty", "coef": 0.01, "unit": "chars"})
    stats = reward_groups([g], {"j": 1.0}, {"j": True}, spec)
    assert g.rewards_before_control == [0.5, 0.5, 0.5, 0.25]
    assert g.rewards == pytest.approx([0.5, 0.5, 0.5 - 0.03, 0.25 - 0.09])
    assert stats["length"]["length_corr/j"] is None  # a constant judge has no correlation
    assert stats["length"]["length_corr/reward_controlled"] < 0


def test_masked_samples_stay_masked_under_control():
    g = built_group([2, 4, 6, 8, 10], {"j": [0.2, 0.4, 0.6, 0.8, 1.0]})
    g.judged["j"][2] = JudgeResult(judge="j")  # no score: masked
    stats = reward_groups([g], {"j": 1.0}, {"j": True}, GRPOSpec(length_control={"method": "regress"}))
    assert stats["masked"] == 1 and math.isnan(g.rewards[2]) and math.isnan(g.rewards_before_control[2])
    assert [g.rewards[i] for i in (0, 1, 3, 4)] == pytest.approx([0.6] * 4)


# --------------------------------------------------------------------------- config


def test_spec_messages():
    with pytest.raises(ValueError, match="method penalty needs coef: the reward taken per token beyond the group median"):
        LengthControlSpec(method="penalty")
    with pytest.raises(ValueError, match="coef only applies to method penalty \\(method is regress\\)"):
        LengthControlSpec(method="regress", coef=0.1)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        LengthControlSpec(method="penalty", coef=-0.1)
    with pytest.raises(ValueError, match="finite"):
        LengthControlSpec(method="penalty", coef=float("nan"))
    with pytest.raises(ValueError, match="length_control.method regress .* needs group_size >= 3 \\(group_size is 2\\)"):
        GRPOSpec(group_size=2, length_control={"method": "regress"})
    assert GRPOSpec(group_size=2, length_control={"method": "penalty", "coef": 0.0}).length_control.coef == 0.0
