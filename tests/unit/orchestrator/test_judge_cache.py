"""The critique cache: a sample judged before is answered from the cache (only the rest is sent),
results come back in the groups' shape, masked results are never kept, entries persist in the run
directory across a resume (a torn line skipped, another spec's ignored), the cache is bounded, and
through the scheduler a repeated response costs no judge call and shows in the step's metrics."""

import json

from grm.config import load_judge
from grm.data.prompts import PromptStream
from grm.judges.types import JudgeResult, Sample
from grm.orchestrator import judge_cache
from grm.orchestrator.judge_cache import JudgeCache, open_caches
from grm.orchestrator.rewards import reward_groups
from grm.orchestrator.roles import JudgeHandle
from grm.orchestrator.scheduler import Scheduler
from grm.orchestrator.step_rows import step_metrics
from tests.unit.orchestrator.fakes import FakeRay, LengthJudge, fake_actor_judge, outcome, prompts, roles
from tests.unit.orchestrator.test_scheduler import config, make

SPEC = load_judge("builtin:helpfulness-pointwise-logprob")


def _s(text, prompt="q"):
    return Sample(prompt=prompt, response=text, id=f"id-{text}", group="g")


def _judge(groups):
    return [
        [JudgeResult(judge="j", score=float(len(s.response)), reward=len(s.response) / 10, seconds=2.0) for s in g]
        for g in groups
    ]


def test_found_samples_are_not_sent_and_results_keep_their_place(tmp_path):
    cache = JudgeCache.open(SPEC, tmp_path)
    first = cache.plan([[_s("aa"), _s("bbb")], [_s("c")]])
    assert first.hits == 0 and [len(g) for g in first.missing] == [2, 1]
    cache.store(first, _judge(first.missing))
    # the same responses under other ids and groups are found; a new one is sent alone
    again = cache.plan([[Sample(prompt="q", response="bbb", id="other", group="h"), _s("dddd")], [_s("c")]])
    assert again.hits == 2 and again.saved_s == 4.0
    assert [[s.response for s in g] for g in again.missing] == [["dddd"]]
    merged = again.merge(_judge(again.missing))
    assert [[r.score for r in g] for g in merged] == [[3.0, 4.0], [1.0]]
    everything = cache.plan([[_s("aa"), _s("c")]])
    assert everything.complete and everything.merge([]) == [[r for r in g] for g in everything.cached]
    # another prompt, reference or metadata is another judgment
    assert cache.plan([[_s("aa", prompt="other q")]]).hits == 0
    assert cache.plan([[Sample(prompt="q", response="aa", reference="7")]]).hits == 0


def test_masked_results_are_not_kept(tmp_path):
    cache = JudgeCache.open(SPEC, tmp_path)
    plan = cache.plan([[_s("x"), _s("y")]])
    cache.store(plan, [[JudgeResult(judge="j", score=None, reward=None, error="no score"), _judge([[_s("y")]])[0][0]]])
    assert [r is not None for r in cache.plan([[_s("x"), _s("y")]]).cached[0]] == [False, True]


def test_entries_survive_a_resume_and_a_torn_line(tmp_path):
    cache = JudgeCache.open(SPEC, tmp_path)
    plan = cache.plan([[_s("aa"), _s("bbb")]])
    cache.store(plan, _judge(plan.missing))
    f = tmp_path / "judge_cache" / f"{SPEC.name}.jsonl"
    rows = f.read_text().splitlines()
    assert len(rows) == 2 and json.loads(rows[0])["result"]["score"] == 2.0
    with f.open("a") as fh:  # a kill mid-line, and a line of another spec (an edited judge)
        fh.write(json.dumps({"spec": "0" * 16, "key": "k", "result": {"judge": "j", "score": 9.0}}) + "\n")
        fh.write('{"spec": "' + cache.spec_hash + '", "key": "abc", "res')
    back = JudgeCache.open(SPEC, tmp_path)
    assert len(back.entries) == 2 and back.plan([[_s("bbb")]]).cached[0][0].score == 3.0
    other = load_judge("builtin:helpfulness-pointwise-logprob", overrides=["sampling.seed=5"])
    assert len(JudgeCache.open(other, tmp_path).entries) == 0  # another seed: another judgment


def test_the_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(judge_cache, "MAX_ENTRIES", 3)
    cache = JudgeCache.open(SPEC, None)
    for t in ["a", "bb", "ccc", "dddd", "eeeee"]:
        plan = cache.plan([[_s(t)]])
        cache.store(plan, _judge(plan.missing))
    assert len(cache.entries) == 3 and cache.plan([[_s("a")]]).hits == 0 and cache.plan([[_s("eeeee")]]).hits == 1


def test_only_judges_of_single_samples_are_cached():
    specs = [load_judge(f"builtin:{n}") for n in ("pointwise-logprob", "checklist-logprob", "pairwise-logprob", "numeric-answer")]
    caches = open_caches([(s, True) for s in specs] + [(load_judge("builtin:helpfulness-pointwise"), False)], None)
    assert set(caches) == {"pointwise-logprob", "checklist-logprob"}


def test_through_the_scheduler_a_repeated_response_is_not_judged_again():
    """The fake policy writes the same answers every step: step 2's judge call sends nothing, its
    results are step 1's, and the metrics say so."""
    actor = fake_actor_judge()
    handle = JudgeHandle("helpfulness-pointwise-logprob", 1.0, True, actor=actor)
    # 3 prompts, 3 a step: step 2 is the next epoch over the same prompts, answered the same way
    stream = PromptStream(prompts(3), seed=0, shuffle=False)
    sched = Scheduler(config(), roles([handle]), stream, FakeRay(), caches={handle.name: JudgeCache.open(SPEC, None)})
    first = sched.take(0)
    g1 = sched.collect(first)
    name = handle.name
    m1 = step_metrics(outcome(g1, reward_groups(g1, {name: 1.0}, {name: True}), first))
    assert len(actor.score_groups.calls) == 1 and m1["judge_cache/helpfulness-pointwise-logprob/hits"] == 0
    second = sched.take(1)
    g2 = sched.collect(second)
    m2 = step_metrics(outcome(g2, reward_groups(g2, {name: 1.0}, {name: True}), second))
    assert len(actor.score_groups.calls) == 1  # every response was judged in step 1: no call
    assert [[x.reward for x in g.judged[handle.name]] for g in g2] == [[x.reward for x in g.judged[handle.name]] for g in g1]
    assert (
        m2["judge_cache/helpfulness-pointwise-logprob/hit_rate"] == 1.0
        and m2["judge_cache/helpfulness-pointwise-logprob/hits"] == 6
    )
    local = LengthJudge()
    sched2, _, _ = make(config(), [JudgeHandle("numeric-answer", 1.0, True, local=local)])
    assert sched2.caches == {}
