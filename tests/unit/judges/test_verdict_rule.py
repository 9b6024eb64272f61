"""The ``verdict`` rule verifier that trains a judge (``data.judge_prompts``): right, wrong, a tie,
inconsistent across the pair's two orders, unparsable (masked, never 0), no reference; and the
training prompts it reads back (both orders of each pair, the right verdict each, kept together)."""

import pytest

from grm.data.judge_pairs import PAIR_KEY, chosen, pair_orders
from grm.data.prompts import PromptStream
from grm.judges import load
from grm.judges.types import Sample


def _s(text, ref, pair="p", order="ab"):
    return Sample(prompt="q", response=text, reference=ref, metadata={PAIR_KEY: {"pair": pair, "order": order}})


def _scores(samples):
    return [r.reward for r in load("builtin:verdict-correct").score_batch(samples)]


def test_pair_orders_name_the_right_verdict_in_each_order():
    assert [(o.name, o.order, o.verdict) for o in pair_orders(1)] == [("ab", [0, 1], "A"), ("ba", [1, 0], "B")]
    assert [o.verdict for o in pair_orders(2)] == ["B", "A"]
    assert chosen("ab", "A") == chosen("ba", "B") == 0 and chosen("ba", "A") == 1 and chosen("ab", "tie") is None
    with pytest.raises(ValueError):
        pair_orders(0)


def test_right_wrong_tie_unparsable_and_no_reference():
    # alone (no other order in the call): right 1, wrong 0, tie 0, no verdict masked, no reference masked
    got = _scores(
        [
            _s("A is better. [[A]]", "A", "p1"),
            _s("B is better. [[B]]", "A", "p2"),
            _s("Equal. [[C]]", "B", "p3"),
            _s("I cannot tell.", "A", "p4"),
            Sample(prompt="q", response="[[A]]", reference=None),
        ]
    )
    assert got == [1.0, 0.0, 0.0, None, None]


def test_a_verdict_right_in_one_order_only_is_paid_less():
    # pair x: label 1 (ab wants A, ba wants B); ab says A (right), ba says A (wrong: picks response 2)
    inconsistent = _scores([_s("[[A]]", "A", "x", "ab"), _s("[[A]]", "B", "x", "ba")])
    assert inconsistent == [0.5, 0.0]
    consistent = _scores([_s("[[A]]", "A", "y", "ab"), _s("[[B]]", "B", "y", "ba")])
    assert consistent == [1.0, 1.0]
    # two samples of the other order, one agreeing: agree 0.5 -> 0.75; an unparsable one does not count
    mixed = _scores(
        [_s("[[A]]", "A", "z", "ab"), _s("[[B]]", "B", "z", "ba"), _s("[[A]]", "B", "z", "ba"), _s("?", "B", "z", "ba")]
    )
    assert mixed == [0.75, 1.0, 0.0, None]


def test_the_last_verdict_token_wins_and_details_say_why():
    judge = load("builtin:verdict-correct")
    r = judge.score_batch([_s("[[B]] at first, but on reflection [[A]]", "A", "w")])[0]
    assert r.reward == 1.0 and r.details["verdict"] == "A" and r.details["other_order_verdicts"] == 0
    bad = judge.score_batch([_s("no verdict here", "A", "w")])[0]
    assert bad.reward is None and bad.error and "no verdict token" in bad.error


def test_a_stream_in_blocks_keeps_each_pairs_two_orders_together():
    from grm.data.prompts import Prompt

    prompts = [Prompt(id=f"{i // 2}:{'ab' if i % 2 == 0 else 'ba'}", text="t", reference=None) for i in range(20)]
    stream = PromptStream(prompts, seed=3, shuffle=True, block=2)
    for _ in range(3):  # across epochs
        step = stream.take(4)
        assert step[0].id.split(":")[0] == step[1].id.split(":")[0] and step[2].id.split(":")[0] == step[3].id.split(":")[0]
        assert [p.id.split(":")[1] for p in step] == ["ab", "ba", "ab", "ba"]
    order = [p.id for p in PromptStream(prompts, seed=3, block=2).take(20)]
    assert order != [p.id for p in prompts]  # shuffled by pairs
    with pytest.raises(ValueError, match="blocks of 2"):
        PromptStream(prompts[:3], seed=0, block=2)
    # block 1 shuffles as before (a resumed run of an older version keeps its order)
    import random

    old = list(range(20))
    random.Random("3:0").shuffle(old)
    assert [p.id for p in PromptStream(prompts, seed=3).take(20)] == [prompts[i].id for i in old]
