"""Adaptive votes (``votes:`` in a judge spec, ``grm.judges.adaptive``): every item gets
``votes.first`` critiques, then only the items whose reward the rest could change get the rest of
``sampling.n``: near-tied responses of a group, disagreeing or tied pairwise orders, unparsed items,
unconfident log-prob readings, within the budget. Scripted engine: judge logic, no model."""

import re

import pytest
from pydantic import ValidationError

from grm.config import JudgeSpec
from grm.config.judge_votes import AdaptiveVotes
from grm.judges import Sample, build_judge
from grm.judges.adaptive import top_probability, undecided
from grm.judges.base import hash_spec
from grm.judges.cost import costed
from grm.judges.types import JudgeResult, SampleRecord
from tests.unit.judges.fake_engine import ScriptedEngine


def pointwise(tmp_path, **kw):
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    base = {"sampling": {"n": 4, "temperature": 0.7}, "parser": {"type": "regex", "range": (0, 10)}}
    return JudgeSpec(name="pw", mode="pointwise", model="m", template="t.j2", **{**base, **kw})


def score_of(prompt: str) -> int:
    return int(re.search(r"A: r(\d+)", prompt).group(1))


def group(*scores):
    return [Sample(prompt="q", response=f"r{s}", id=f"i{k}") for k, s in enumerate(scores)]


def test_only_near_tied_responses_of_a_group_get_the_rest_of_their_votes(tmp_path):
    # Rewards 0.9, 0.2, 0.5, 0.55: only the last two are within margin 0.1 of each other.
    eng = ScriptedEngine(lambda p, j, c: f"Score: {score_of(p) / 10 if score_of(p) > 10 else score_of(p)}")
    spec = pointwise(tmp_path, votes={"first": 1, "margin": 0.1})
    judge = build_judge(spec, tmp_path, eng)
    out, cost = costed(judge, judge.score_groups, [group(9, 2, 5, 55)])
    votes = [len(r.samples) for r in out[0]]
    assert votes == [1, 1, 4, 4]
    assert eng.calls == [(4, 1), (2, 3)]  # one first round for all, one second round for the two
    assert cost.votes_skipped == 2 * 3 and cost.calls == 4 + 6
    assert [r.score for r in out[0]] == [9.0, 2.0, 5.0, 5.5]
    # second-round critiques are new slots (indices 1..3), never a repeat of slot 0
    assert sorted(s.index for s in out[0][2].samples) == [0, 1, 2, 3]


def test_groups_are_compared_apart_and_a_lone_response_is_decided(tmp_path):
    eng = ScriptedEngine(lambda p, j, c: f"Score: {score_of(p)}")
    judge = build_judge(pointwise(tmp_path, votes={"first": 1, "margin": 0.05}), tmp_path, eng)
    # 5 in the first group, 5 in the second: equal rewards, but not in one group
    out = judge.score_groups([group(5, 9), group(5, 1), group(7)])
    assert [[len(r.samples) for r in g] for g in out] == [[1, 1], [1, 1], [1]]
    assert eng.calls == [(5, 1)]


def test_the_budget_keeps_the_closest_gaps(tmp_path):
    eng = ScriptedEngine(lambda p, j, c: f"Score: {score_of(p)}")
    spec = pointwise(tmp_path, votes={"first": 1, "margin": 0.3, "budget": 0.5})
    judge = build_judge(spec, tmp_path, eng)
    # gaps: 1-2 is 0.1 (closest), 4-6 is 0.2; budget 0.5 of 4 items = 2: the 0.1 pair only
    out = judge.score_groups([group(1, 2, 4, 6)])
    assert [len(r.samples) for r in out[0]] == [4, 4, 1, 1]


def test_an_unparsed_item_gets_more_votes_and_is_scored_by_them(tmp_path):
    # "r3" never parses in the first round (call 0, and its retry, call 1); later critiques do
    def reply(p, j, c):
        return "no score" if score_of(p) == 3 and c < 2 else f"Score: {score_of(p)}"

    eng = ScriptedEngine(reply)
    spec = pointwise(tmp_path, votes={"first": 1, "margin": 0.0}, on_failure={"retries": 1})
    judge = build_judge(spec, tmp_path, eng)
    out = judge.score_groups([group(3, 8)])
    assert out[0][0].score == 3.0 and out[0][1].score == 8.0  # masked under fixed voting with n=1
    assert eng.calls == [(2, 1), (1, 1), (1, 3)]
    assert out[0][0].parse_failures == 2  # the first slot and its retry stay on record


def test_everything_flagged_equals_fixed_voting_in_votes(tmp_path):
    eng = ScriptedEngine(lambda p, j, c: f"Score: {score_of(p)}")
    judge = build_judge(pointwise(tmp_path, votes={"first": 2, "margin": 1.0}), tmp_path, eng)
    fixed = build_judge(pointwise(tmp_path), tmp_path, ScriptedEngine(lambda p, j, c: f"Score: {score_of(p)}"))
    a, b = judge.score_groups([group(1, 9, 5)]), fixed.score_groups([group(1, 9, 5)])
    assert [len(r.samples) for r in a[0]] == [len(r.samples) for r in b[0]] == [4, 4, 4]
    assert [r.score for r in a[0]] == [r.score for r in b[0]]
    assert judge.cost.votes_skipped == 0 and judge.cost.calls == fixed.cost.calls == 12


def pairwise(tmp_path, **kw):
    (tmp_path / "p.j2").write_text("{# expects: prompt, responses #}Q: {{ prompt }} A: {{ responses[0] }} B: {{ responses[1] }}")
    return JudgeSpec(
        name="pair",
        mode="pairwise",
        model="m",
        template="p.j2",
        sampling={"n": 3, "temperature": 0.7},
        parser={"type": "verdict"},
        position={"swap": True},
        **kw,
    )


def test_pairwise_items_whose_orders_disagree_get_more_votes(tmp_path):
    # Item "x" always prefers the response shown first (positional bias: the orders disagree);
    # item "y" prefers "good" in both orders (decided).
    def reply(p, j, c):
        if "bias" in p:
            return "[[A]]"
        a = re.search(r"A: (\w+)", p).group(1)
        return "[[A]]" if a == "good" else "[[B]]"

    eng = ScriptedEngine(reply)
    judge = build_judge(pairwise(tmp_path, votes={"first": 1}), tmp_path, eng)
    items = [Sample(prompt="q", responses=["bias1", "bias2"], id="x"), Sample(prompt="q", responses=["good", "bad"], id="y")]
    out = judge.score_batch(items)
    assert [len(r.samples) for r in out] == [2 * 3, 2 * 1]
    assert out[1].verdict == "1" and out[0].positional_agreement is False
    assert judge.cost.votes_skipped == 2 * 2


def test_low_confidence_log_prob_readings_get_more_votes(tmp_path):
    # After each critique, the reading's candidates: "r1" sure of 1, "r2" split between 1 and 2.
    def lps(text, cands):
        sure = "A: r1" in text
        c = [x.strip() for x in cands]
        return [0.0 if x == "1" else -20.0 for x in c] if sure else [-0.7 if x in ("1", "2") else -20.0 for x in c]

    eng = ScriptedEngine(lambda *a: "ok", continuation_logprobs=lps)
    spec = pointwise(
        tmp_path,
        parser={"type": "logprob", "range": (1, 5)},
        votes={"first": 1, "margin": 0.0, "confidence": 0.9},
    )
    judge = build_judge(spec, tmp_path, eng)
    out = judge.score_groups([[Sample(prompt="q", response="r1"), Sample(prompt="q", response="r2")]])
    assert [len(r.samples) for r in out[0]] == [1, 4]
    assert out[0][0].score == pytest.approx(1.0) and out[0][1].score == pytest.approx(1.5)
    assert eng.score_calls == 2  # one reading pass per round


def test_undecided_orders_by_class_then_closeness():
    votes = AdaptiveVotes(first=1, margin=0.2, budget=1.0, confidence=0.8)
    rs = [JudgeResult(judge="j", reward=x) for x in (0.5, None, 0.6, 0.95, 0.0)]
    unsure = SampleRecord(view=0, order=[0], index=0, attempt=0, text="", parsed=1.0, error=None, tokens=0)
    unsure.candidate_logprobs = {"1": -0.7, "2": -0.7}
    recs = [[], [], [], [], [unsure]]
    assert undecided(votes, "pointwise", rs, recs, [[0, 1, 2, 3, 4]]) == [0, 1, 2, 4]
    assert undecided(votes.model_copy(update={"budget": 0.2}), "pointwise", rs, recs, [[0, 1, 2, 3, 4]]) == [1]
    assert undecided(votes.model_copy(update={"budget": 0.6}), "pointwise", rs, recs, [[0, 1, 2, 3, 4]]) == [0, 1, 2]
    assert top_probability(unsure) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"votes": {"first": 4}}, "below sampling.n"),
        ({"votes": {"first": 1}, "sampling": {"n": 4, "temperature": 0}}, "temperature 0"),
        ({"votes": {"first": 1}, "parser": {"type": "logprob", "range": (1, 5), "critique": False}}, "deterministic"),
        ({"votes": {"first": 1, "budget": 0}}, "budget"),
    ],
)
def test_votes_a_judge_cannot_use_are_refused(tmp_path, kw, needle):
    with pytest.raises(ValidationError, match=needle):
        pointwise(tmp_path, **kw)


def test_a_spec_without_votes_keeps_its_hash(tmp_path):
    spec = pointwise(tmp_path)
    assert hash_spec(spec) == hash_spec(spec.model_copy(update={"votes": None}))
    assert hash_spec(pointwise(tmp_path, votes={"first": 1})) != hash_spec(spec)
