"""Dynamic filtering keeps whole groups by identity; rewards are set per group."""

import math

from grm.judges.types import JudgeResult
from grm.orchestrator.filtering import filter_step, refill, same_groups
from grm.orchestrator.rewards import reward_groups
from grm.orchestrator.types import Group, Rollout
from tests.unit.orchestrator.fakes import prompts


def group(key: str, rewards: list[float | None]) -> Group:
    p = prompts(1)[0]
    rs = [
        Rollout(
            id=f"{key}/{k}",
            prompt=p,
            group=key,
            prompt_ids=[1],
            token_ids=[2],
            text="x",
            logprobs=[0.0],
            finish_reason="stop",
            version=0,
        )
        for k in range(len(rewards))
    ]
    g = Group(
        key,
        rs,
        judged={"j": [JudgeResult(judge="j", score=r, reward=r) if r is not None else JudgeResult(judge="j") for r in rewards]},
    )
    reward_groups([g], {"j": 1.0}, {"j": True})
    return g


def test_rewards_mask_a_required_judge_failure():
    g = group("a", [1.0, None])
    assert g.rewards[0] == 1.0 and math.isnan(g.rewards[1])
    stats = reward_groups([g], {"j": 1.0}, {"j": True})
    assert stats["masked"] == 1 and stats["masked_by_judge"] == {"j": 1}


def test_refill_fetches_until_enough_informative_groups():
    flat, good = group("flat", [1.0, 1.0]), group("good", [0.0, 1.0])
    rounds = []

    def more(r):
        rounds.append(r)
        return [group(f"new{r}", [0.0, 1.0])]

    kept, stats = refill([flat, good], want=2, more=more)
    assert rounds == [1] and [g.key for g in kept] == ["good", "new1"]  # order of arrival, the flat group dropped
    assert stats == {"groups_kept_informative": 2, "refill_rounds": 1}
    assert not same_groups(kept, [flat, good]) and same_groups(kept, list(kept))


def test_refill_tops_up_with_flat_groups_after_the_last_round():
    kept, stats = refill(
        [group("a", [1.0, 1.0]), group("b", [0.0, 0.0])], want=2, more=lambda r: [group(f"n{r}", [float("nan"), 1.0])], rounds=2
    )
    assert len(kept) == 2 and stats["refill_rounds"] == 2 and stats["groups_kept_informative"] == 0
    assert [g.key for g in kept] == ["a", "b"]


def test_filter_step_rewards_fresh_groups_and_recomputes_the_steps_statistics():
    from tests.unit.orchestrator.fakes import outcome

    flat, good = group("flat", [1.0, 1.0]), group("good", [0.0, 1.0])
    s = outcome([flat, good], {"stale": True})
    fresh = group("new1", [0.0, 1.0])
    fresh.rewards = []  # judged, not yet rewarded: filter_step rewards what it fetches
    rewarded: list[list[str]] = []

    def rewards(groups):
        rewarded.append([g.key for g in groups])
        return reward_groups(groups, {"j": 1.0}, {"j": True})

    filter_step(s, 2, lambda salt: [fresh] if salt == 1 else [], rewards)
    assert rewarded == [["new1"], ["good", "new1"]] and fresh.rewards == [0.0, 1.0]
    assert [g.key for g in s.groups] == ["good", "new1"] and "stale" not in s.reward_stats
    assert s.filtering == {"groups_kept_informative": 2, "refill_rounds": 1}

    kept = outcome([good, group("other", [1.0, 0.0])], {"same": True})  # enough informative groups: nothing changes
    filter_step(kept, 2, lambda salt: [], rewards)
    assert kept.reward_stats == {"same": True} and kept.filtering["refill_rounds"] == 0


def test_step_metrics_count_responses_cut_to_fit_each_judge():
    from grm.orchestrator.step_rows import step_metrics
    from tests.unit.orchestrator.fakes import outcome

    g = group("a", [1.0, 0.5, 0.2])
    g.judged["j"][1].truncated = 1
    stats = reward_groups([g], {"j": 1.0}, {"j": True})
    m = step_metrics(outcome([g], stats))
    assert m["judge_truncated/j"] == 1 and m["parse_failures/j"] == 0
