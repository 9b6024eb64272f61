"""A judge's per-call deadline derived from its spec, against hand-computed values."""

import math

import pytest
from pydantic import ValidationError

from grm.config import JudgeSpec
from grm.judges.base import hash_spec
from grm.judges.limits import CallLimits, call_limits, prompts_per_sample, tokens_per_sample


def pointwise(**kw) -> JudgeSpec:
    return JudgeSpec(
        **{
            "name": "pw",
            "mode": "pointwise",
            "model": "m",
            "template": "t.j2",
            "parser": {"type": "regex", "range": [1, 10]},
            **kw,
        }
    )


def test_derived_deadline_of_a_critique_judge():
    spec = pointwise(sampling={"n": 3, "max_new_tokens": 96}, on_failure={"retries": 1})
    # tokens per sample: 1 view x 3 critiques x (1 + 1 retry) x 96 = 576; one prompt read
    assert tokens_per_sample(spec) == 576 and prompts_per_sample(spec) == 1
    lim = call_limits(spec)
    # per sample: 1 x 20 s + 576 x 0.5 s = 308 s; a call of 8 responses: 60 + 8 x 308 = 2524 s
    assert lim.sample_s == 308.0
    assert lim.deadline(8) == 2524.0
    assert lim.deadline(16) - lim.deadline(8) == 8 * 308.0  # linear in the call's size
    assert lim.max_concurrent_calls == 1 and not lim.explicit


def test_derived_deadline_follows_the_rates_in_the_spec():
    spec = pointwise(
        sampling={"n": 1, "max_new_tokens": 100},
        on_failure={"retries": 0},
        limits={"overhead_s": 10, "seconds_per_prompt": 2, "seconds_per_token": 0.1, "max_concurrent_calls": 3},
    )
    lim = call_limits(spec)
    # per sample: 2 + 100 x 0.1 = 12 s; 4 samples: 10 + 48 = 58 s
    assert lim.deadline(4) == pytest.approx(58.0) and lim.max_concurrent_calls == 3


def test_an_explicit_deadline_ignores_the_call_size():
    lim = call_limits(pointwise(limits={"deadline_s": 90}))
    assert lim.explicit and lim.deadline(1) == lim.deadline(1000) == 90


def test_pairwise_swap_and_principles_count_their_prompts_and_tokens():
    spec = JudgeSpec(
        name="pair",
        mode="pairwise",
        model="m",
        template="p.j2",
        principles={"template": "pr.j2", "sampling": {"n": 1, "max_new_tokens": 96}},
        sampling={"n": 1, "max_new_tokens": 1},
        parser={"type": "logprob", "prefix": "", "candidates": ["A", "B"], "critique": False, "range": None},
        position={"swap": True},
    )
    # two orders + the principles stage read 3 prompts; no critique tokens, 96 principle tokens
    assert prompts_per_sample(spec) == 3 and tokens_per_sample(spec) == 96
    # per pair: 3 x 20 + 96 x 0.5 = 108 s
    assert call_limits(spec).deadline(2) == 60 + 2 * 108


def test_listwise_counts_groups_and_rules_only_the_overhead():
    lw = JudgeSpec(name="lw", mode="listwise", model="m", template="l.j2", parser={"type": "boxed", "range": [1, 10]})
    lim = call_limits(lw)
    assert lim.per_group and lim.samples_in([4, 0, 4]) == 2  # one list per non-empty group
    assert CallLimits().samples_in([4, 0, 4]) == 8  # otherwise every response
    rule = call_limits(JudgeSpec(name="r", mode="rule", rule={"type": "numeric-answer"}))
    assert rule.deadline(100) == 60.0


def test_a_handle_without_a_spec_has_no_deadline_and_one_call_in_flight():
    assert CallLimits().deadline(10) == math.inf and CallLimits().max_concurrent_calls == 1


def test_limits_are_strict_and_left_out_of_the_spec_hash():
    with pytest.raises(ValidationError):
        pointwise(limits={"max_concurrent_calls": 0})
    with pytest.raises(ValidationError):
        pointwise(limits={"deadline": 10})  # misspelt key
    assert hash_spec(pointwise(limits={"deadline_s": 5})) == hash_spec(pointwise())
    assert hash_spec(pointwise(sampling={"n": 2})) != hash_spec(pointwise())


def test_a_logprob_parser_retries_its_critique_and_may_skip_it():
    spec = pointwise(sampling={"n": 1, "max_new_tokens": 32}, on_failure={"retries": 1}, parser={"type": "logprob"})
    assert tokens_per_sample(spec) == 64  # 1 view x 1 critique x (1 + 1 retry) x 32
    # the quickstart judge on a step of 8 prompts x 4 responses: 60 + 32 x (20 + 64 x 0.5) = 1724 s
    assert call_limits(spec).deadline(32) == 1724.0
    no_critique = pointwise(sampling={"max_new_tokens": 1}, parser={"type": "logprob", "critique": False})
    assert tokens_per_sample(no_critique) == 0 and call_limits(no_critique).deadline(32) == 60 + 32 * 20
