"""Pairwise judges inside a group: the pairs planned, the Bradley–Terry fit, and
``PairwiseMode.score_groups`` end to end with a scripted engine (swap, masking, anchors, batching)."""

import math
import re

import pytest

from grm.config import JudgeSpec
from grm.config.judge import GroupSpec
from grm.judges import Sample, build_judge
from grm.judges.groups import bradley_terry, plan_pairs
from grm.judges.limits import call_limits
from grm.judges.types import AnchorAnswer
from tests.unit.judges.fake_engine import ScriptedEngine


def pair_spec(tmp_path, **groups):
    (tmp_path / "p.j2").write_text("{# expects: prompt, responses #}A: <{{ responses[0] }}> B: <{{ responses[1] }}>")
    return JudgeSpec(
        name="pair",
        mode="pairwise",
        model="m",
        template="p.j2",
        parser={"type": "verdict"},
        position={"swap": True, "combine": "margin"},
        groups=groups,
    )


def shown(text):
    """The two responses a rendered pairwise prompt shows, in order."""
    return re.search(r"A: <(.*?)> B: <(.*?)>", text, re.S).groups()


def longer_wins(text, j, call):
    a, b = shown(text)
    return "[[A]]" if len(a) > len(b) else "[[B]]" if len(b) > len(a) else "[[C]]"


def group(responses, reference=None, key="s1r0g0", anchor=None):
    out = [Sample(prompt="q", response=r, reference=reference, id=f"{key}/{k}") for k, r in enumerate(responses)]
    if anchor is not None:
        for s in out:
            s.anchor = AnchorAnswer(anchor, "greedy", None)
    return out


def test_plans_cover_the_strategies_and_the_budget_keeps_every_response():
    assert plan_pairs(4, GroupSpec(strategy="round_robin"), "k") == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert plan_pairs(4, GroupSpec(strategy="circular"), "k") == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert plan_pairs(2, GroupSpec(strategy="circular"), "k") == [(0, 1)]  # one pair, not the same pair twice
    assert plan_pairs(3, GroupSpec(strategy="anchor"), "k") == [(0, 3), (1, 3), (2, 3)]  # player 3 is the anchor
    assert plan_pairs(1, GroupSpec(strategy="round_robin"), "k") == []
    capped = plan_pairs(5, GroupSpec(strategy="round_robin", max_comparisons=6), "k")
    assert len(capped) == 6 and {k for p in capped for k in p} == set(range(5))  # the ring first: nobody left out
    assert capped == plan_pairs(5, GroupSpec(strategy="round_robin", max_comparisons=6), "k")  # seeded
    assert plan_pairs(4, GroupSpec(strategy="anchor", max_comparisons=2), "k") == [(0, 4), (1, 4)]


def test_bradley_terry_matches_the_hand_solution_and_recovers_a_known_order():
    # two players, one win for 0: by symmetry s0 = -s1 = x with 1 - sigmoid(2x) = prior * x
    x = bradley_terry(2, [(0, 1, 1.0)], prior=0.5)[0]
    assert x > 0 and abs(1 - 1 / (1 + math.exp(-2 * x)) - 0.5 * x) < 1e-9
    # a known order 3 > 2 > 1 > 0, every pair compared, one upset (1 beat 2): order still recovered
    outcomes = [(i, j, 1.0 if i > j else 0.0) for i in range(4) for j in range(i + 1, 4)]
    outcomes = [(1, 2, 1.0) if (i, j) == (1, 2) else (i, j, y) for i, j, y in outcomes] + [(2, 1, 1.0), (2, 1, 1.0)]
    s = bradley_terry(4, outcomes, prior=0.1)
    assert sorted(range(4), key=lambda k: s[k]) == [0, 1, 2, 3]
    assert abs(sum(s)) < 1e-9  # the prior centres strengths on 0
    assert bradley_terry(3, [(0, 1, 1.0)], prior=0.1)[2] == 0.0  # never compared: at the prior's mean


@pytest.mark.parametrize("reward", ["bradley_terry", "win_rate"])
def test_round_robin_ranks_a_group_in_the_judges_order_with_one_call_and_both_orders(tmp_path, reward):
    eng = ScriptedEngine(longer_wins)
    judge = build_judge(pair_spec(tmp_path, reward=reward), tmp_path, eng)
    out = judge.score_groups([group(["bb", "d", "cccc", "aaa"]), group(["x", "yy"], key="s1r0g1")])
    assert eng.calls == [(14, 1)]  # (6 + 1 pairs) x 2 orders, one generate call for both groups
    a, b = zip(*(shown(p) for p in eng.prompts), strict=True)
    assert sorted(zip(a, b, strict=True)) == sorted(zip(b, a, strict=True))  # every pair shown both ways
    rewards = [r.reward for r in out[0]]
    assert sorted(range(4), key=lambda k: rewards[k]) == [1, 0, 3, 2]  # by length: d < bb < aaa < cccc
    if reward == "win_rate":
        assert rewards == [pytest.approx(1 / 3), 0.0, 1.0, pytest.approx(2 / 3)]
    else:
        assert all(0 < r < 1 for r in rewards) and abs(sum(rewards) / 4 - 0.5) < 0.05
    assert out[1][1].reward > out[1][0].reward
    mine = out[0][1].comparisons
    assert [c["against"] for c in mine] == [0, 2, 3] and {c["verdict"] for c in mine} == {"loss"}
    assert mine[0]["view_margins"] == [-1.0, -1.0] and len(mine[0]["critiques"]) == 2


def test_a_position_biased_judge_is_cancelled_by_the_swap(tmp_path):
    judge = build_judge(pair_spec(tmp_path), tmp_path, ScriptedEngine(lambda *a: "[[A]]"))
    out = judge.score_groups([group(["a", "bb", "ccc"])])
    assert [r.reward for r in out[0]] == [0.5, 0.5, 0.5]  # every pair a tie once both orders count
    assert {c["verdict"] for r in out[0] for c in r.comparisons} == {"tie"}


def test_a_failed_comparison_is_masked_and_a_response_left_without_one_is_masked(tmp_path):
    def reply(text, j, call):
        return "no verdict here" if "broken" in text else longer_wins(text, j, call)

    judge = build_judge(pair_spec(tmp_path, strategy="circular"), tmp_path, ScriptedEngine(reply))
    out = judge.score_groups([group(["a", "bb", "ccc", "broken"])])[0]
    assert [r.masked for r in out] == [False, False, False, True]
    assert out[3].reward is None and out[3].error.startswith("no valid comparison (2 planned")
    assert [c["outcome"] for c in out[3].comparisons] == [None, None]
    # (2, 3) and (3, 0) failed: 2 orders x (1 + 1 retry) each, counted once, on the response shown first
    assert (out[2].parse_failures, out[3].parse_failures) == (4, 4)
    assert out[1].reward > out[0].reward and out[2].reward > out[1].reward  # the rest still ranked


def test_anchor_compares_every_response_with_the_reference_or_the_greedy_answer(tmp_path):
    eng = ScriptedEngine(longer_wins)
    judge = build_judge(pair_spec(tmp_path, strategy="anchor"), tmp_path, eng)
    out = judge.score_groups([group(["a", "bbb", "cc"], reference="cc")])[0]
    assert [round(r.reward, 6) for r in out] == [round(out[0].reward, 6), round(out[1].reward, 6), 0.5]
    assert out[0].reward < 0.5 < out[1].reward  # P(beats the anchor): shorter loses, longer wins, equal ties
    assert {c["against"] for r in out for c in r.comparisons} == {"anchor"}
    assert all("cc" in shown(p) for p in eng.prompts)
    greedy = build_judge(pair_spec(tmp_path, strategy="anchor", anchor="greedy"), tmp_path, ScriptedEngine(longer_wins))
    assert [r.reward > 0.5 for r in greedy.score_groups([group(["a", "bbb"], anchor="cc")])[0]] == [False, True]
    # a prompt without a reference answer: nothing compared, its responses masked (as a rule verifier does)
    calls = len(eng.calls)
    (lost,) = judge.score_groups([group(["a", "b"])])
    assert [r.masked for r in lost] == [True, True] and len(eng.calls) == calls
    assert lost[0].error == "nothing to compare with (no anchor answer, or no other response)"


def test_the_deadline_counts_comparisons_not_responses(tmp_path):
    lim = call_limits(pair_spec(tmp_path, max_comparisons=4))
    assert lim.samples_in([4, 4, 1]) == 4 + 4 + 0  # capped at 4 of 6; a lone response has no partner
    assert call_limits(pair_spec(tmp_path, strategy="anchor")).samples_in([4, 1]) == 5


def test_a_previous_anchor_is_the_earlier_answer_else_the_fallback_and_each_comparison_names_it(tmp_path):
    eng = ScriptedEngine(longer_wins)
    judge = build_judge(pair_spec(tmp_path, strategy="anchor", anchor="previous"), tmp_path, eng)
    earlier = group(["a", "bbbb"], anchor="ccc")
    for s in earlier:
        s.anchor = AnchorAnswer("ccc", "greedy", 7)
        s.previous_anchor = AnchorAnswer("cc", "previous", 4, 2)
    first_epoch = group(["a", "bbbb"], key="s1r0g1", anchor="ccc")
    for s in first_epoch:
        s.anchor = AnchorAnswer("ccc", "greedy", 7)
    got, fell_back = judge.score_groups([earlier, first_epoch])
    assert all("cc" in shown(p) and "ccc" not in shown(p) for p in eng.prompts[:4])  # the earlier answer, not today's
    assert all("ccc" in shown(p) for p in eng.prompts[4:])
    assert [c["anchor"] for r in got for c in r.comparisons] == [{"source": "previous", "policy_version": 4, "step": 2}] * 2
    assert [c["anchor"] for r in fell_back for c in r.comparisons] == [
        {"source": "greedy", "policy_version": 7, "step": None}
    ] * 2
    # "a" loses to both anchors; "bbbb" beats "cc" and "ccc"
    assert [r.reward > 0.5 for r in got] == [r.reward > 0.5 for r in fell_back] == [False, True]
    by_reference = build_judge(pair_spec(tmp_path, strategy="anchor", anchor="previous", fallback="reference"), tmp_path, eng)
    (out,) = by_reference.score_groups([group(["a", "bbbb"], reference="bb", key="s1r0g2", anchor="ccc")])
    assert "bb" in shown(eng.prompts[-1]) and out[0].comparisons[0]["anchor"]["source"] == "reference"
    # with neither an earlier answer nor the fallback: masked, nothing sent
    calls = len(eng.calls)
    (lost,) = by_reference.score_groups([group(["a"], key="s1r0g3")])
    assert lost[0].masked and len(eng.calls) == calls


def test_fallback_is_only_for_the_previous_anchor(tmp_path):
    with pytest.raises(ValueError, match="fallback is for anchor 'previous'"):
        pair_spec(tmp_path, strategy="anchor", anchor="greedy", fallback="reference")
