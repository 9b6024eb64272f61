"""Judge cost accounting (``grm.judges.cost``): exact counts with a scripted engine, the difference
taken around one call, rule verifiers, and splitting a batch's cost over its items."""

import re

import pytest

from grm.config import JudgeSpec
from grm.judges import Sample, build_judge
from grm.judges.cost import JudgeCost, costed, split, total
from tests.unit.judges.fake_engine import ScriptedEngine


class PromptCountingEngine(ScriptedEngine):
    """A scripted engine that also reports prompt tokens: one per word of the prompt."""

    def generate(self, requests, sampling):
        out = super().generate(requests, sampling)
        for g in out:
            g.prompt_tokens = len(self.text_of(requests[g.request_index]).split())
        return out


def spec(tmp_path, **kw):
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    return JudgeSpec(name="pw", mode="pointwise", model="m", template="t.j2", parser={"type": "regex", "range": (0, 10)}, **kw)


def test_pointwise_counts_calls_retries_and_tokens_exactly(tmp_path):
    # Item "r3" parses at once; "bad" fails its first critique (call 0) and parses on the retry
    # (call 1). n=2: 4 critiques in call 0, 2 of them ("bad") fail and are re-sampled in call 1.
    def reply(p, j, c):
        m = re.search(r"A: r(\d)", p)
        if m:
            return f"one two Score: {m.group(1)}"  # 4 words = 4 generated tokens
        return "no score" if c == 0 else "Score: 5"  # 2 words each

    eng = PromptCountingEngine(reply)
    judge = build_judge(spec(tmp_path, sampling={"n": 2}, on_failure={"retries": 1}), tmp_path, eng)
    groups = [[Sample(prompt="q", response="r3", id="a"), Sample(prompt="q", response="bad", id="b")]]
    out, cost = costed(judge, judge.score_groups, groups)
    assert eng.calls == [(2, 2), (2, 1)]
    assert [r.score for r in out[0]] == [3.0, 5.0]
    assert (cost.calls, cost.retries) == (6, 2)
    assert cost.generated_tokens == 2 * 4 + 2 * 2 + 2 * 2
    # prompts "Q: q A: r3" and "Q: q A: bad": 4 words each, sent 4 + 2 times
    assert cost.prompt_tokens == 6 * 4
    assert cost.usage == {} and cost.seconds > 0
    assert judge.cost.calls == 6  # the judge's running totals

    # a second call is charged alone: the difference around it, not the totals
    _, again = costed(judge, judge.score_groups, [[Sample(prompt="q", response="r1", id="c")]])
    assert (again.calls, again.retries, again.generated_tokens, again.prompt_tokens) == (2, 0, 8, 8)
    assert judge.cost.calls == 8
    m = again.metrics("pw")
    assert m["judge_cost/pw/calls"] == 2 and m["judge_cost/pw/generated_tokens"] == 8
    keys = ("calls", "retries", "prompt_tokens", "cached_tokens", "generated_tokens", "votes_skipped", "seconds")
    assert set(m) == {f"judge_cost/pw/{k}" for k in keys}


def test_logprob_readings_are_calls(tmp_path):
    # logprob parser (critique first): per item one critique (1 scripted token) and one reading
    eng = ScriptedEngine(lambda *a: "", continuation_logprobs=lambda text, cands: [-1.0] * len(cands))
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    s = JudgeSpec(name="lp", mode="pointwise", model="m", template="t.j2", parser={"type": "logprob", "range": (1, 5)})
    judge = build_judge(s, tmp_path, eng)
    _, cost = costed(judge, judge.score_batch, [Sample(prompt="q", response=f"r{i}") for i in range(3)])
    assert eng.score_calls == 1 and (cost.calls, cost.generated_tokens, cost.retries) == (6, 3, 0)


def test_a_logprob_reading_counts_its_prefill_and_what_the_engine_served_from_cache(tmp_path):
    """The reading's prompt is nearly all of its cost: it counts as prompt tokens, and the share an
    engine served from a prefix it had already computed as cached tokens (engine.prompt_counts)."""

    class Counting(ScriptedEngine):
        prompt_counts = (0, 0)

        def score_continuations(self, requests, continuations):
            read, cached = self.prompt_counts
            self.prompt_counts = (read + 10 * len(requests), cached + 6 * len(requests))
            return super().score_continuations(requests, continuations)

    eng = Counting(lambda *a: "", continuation_logprobs=lambda text, cands: [-1.0] * len(cands))
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    s = JudgeSpec(name="lp", mode="pointwise", model="m", template="t.j2", parser={"type": "logprob", "range": (1, 5)})
    judge = build_judge(s, tmp_path, eng)
    _, cost = costed(judge, judge.score_batch, [Sample(prompt="q", response=f"r{i}") for i in range(3)])
    assert (cost.prompt_tokens, cost.cached_tokens) == (30, 18)


def test_an_hf_judge_reports_the_readings_prompt_tokens_and_its_cache_hits():
    """SmolLM2 critique-then-score: the score reading re-reads prompt + critique, most of it from
    the prompt cache the critique's generation filled."""
    from grm.judges import load

    judge = load("builtin:helpfulness-pointwise-logprob", overrides=["sampling.max_new_tokens=8"])
    samples = [Sample(prompt="What is 2+2?", response=f"It is {k}.") for k in (3, 4)]
    _, cost = costed(judge, judge.score_batch, samples)
    gen_prompts = cost.prompt_tokens - cost.cached_tokens
    assert cost.calls == 4 and cost.generated_tokens <= 16
    assert cost.prompt_tokens > 2 * 2 * 100  # two critique prompts and two readings of (about) the same length
    assert cost.cached_tokens >= cost.prompt_tokens // 3 and gen_prompts > 0, (cost.prompt_tokens, cost.cached_tokens)


def test_rule_verifier_counts_calls_only():
    judge = build_judge(JudgeSpec(name="math", mode="rule", rule={"type": "numeric-answer"}))
    _, cost = costed(judge, judge.score_groups, [[Sample(prompt="1+1", response="2", reference="2")] * 3])
    assert (cost.calls, cost.retries, cost.prompt_tokens, cost.generated_tokens) == (3, 0, 0, 0)
    assert cost.seconds >= 0


def test_a_judge_without_cost_is_charged_seconds_only():
    class Plain:
        def score_groups(self, groups):
            return [[None for _ in g] for g in groups]

    out, cost = costed(Plain(), Plain().score_groups, [[1, 2]])
    assert out == [[None, None]] and cost.calls == 0 and cost.seconds >= 0


def test_split_and_total_keep_counts_exact():
    c = JudgeCost(calls=7, retries=1, prompt_tokens=100, generated_tokens=33, seconds=3.0, usage={"requests": 5})
    parts = split(c, 3)
    assert [p.calls for p in parts] == [3, 2, 2] and [p.usage["requests"] for p in parts] == [2, 2, 1]
    back = total(parts)
    assert back.seconds == pytest.approx(3.0)
    back.seconds = 3.0
    assert back == c
    assert JudgeCost.from_dict(c.to_dict()) == c and JudgeCost.from_dict(None) == JudgeCost()
