"""The scheduler with fake actors: judge fan-out from one place, stable ids, async queueing,
prompt accounting for checkpoints, interrupts and judge timeouts."""

import pytest

from grm.config.pipeline import PipelineSpec
from grm.data.prompts import PromptStream
from grm.orchestrator.placement import JudgeHandle
from grm.orchestrator.scheduler import Interrupted, Scheduler
from tests.unit.orchestrator.fakes import FakeRay, LengthJudge, fake_actor_judge, prompts, roles


def config(**over) -> PipelineSpec:
    data = {
        "name": "t",
        "pools": {"a": {"cpus": 1}},
        "policy": {"spec": "builtin:smollm2-135m-instruct", "pool": "a"},
        "judges": [{"spec": "builtin:numeric-answer"}],
        "data": {"prompts": "builtin:arith-prompts"},
        "algorithm": {"type": "grpo", "group_size": 2, "prompts_per_step": 3},
        "train": {"micro_batch_size": 2},
        "schedule": {"mode": "sync"},
    }
    for k, v in over.items():
        data[k] = {**data.get(k, {}), **v}
    return PipelineSpec.model_validate(data)


def make(cfg, judges, policy=None):
    stream = PromptStream(prompts(10), seed=0, shuffle=False)
    ray = FakeRay()
    return Scheduler(cfg, roles(judges, policy), stream, ray), stream, ray


def test_every_judge_scores_every_group_with_stable_ids():
    local = LengthJudge()
    actor = fake_actor_judge()
    sched, _, _ = make(config(), [JudgeHandle("rule", 1.0, True, local=local), JudgeHandle("model", 1.0, True, actor=actor)])
    work = sched.take(0)
    groups = sched.collect(work)
    assert [g.key for g in groups] == ["s0r0g0", "s0r0g1", "s0r0g2"]
    assert [r.id for r in groups[1].rollouts] == ["s0r0g1/0", "s0r0g1/1"]
    assert [p.text for p in work.prompts] == ["question 0", "question 1", "question 2"]
    for g in groups:
        assert set(g.judged) == {"rule", "model"}
        # results follow rollout order: reward = len("answer k") / 10
        assert [x.reward for x in g.judged["model"]] == [0.8, 0.8]
    assert local.calls == 1 and len(actor.score_groups.calls) == 1  # one call per chunk per judge
    assert work.prepared is not None and sched.ray.get(work.prepared)[0][0] == "s0r0g0/0"


def test_chunks_are_judged_as_they_land():
    cfg = config(schedule={"mode": "sync", "stream_prompts": 1})
    actor = fake_actor_judge()
    sched, _, _ = make(cfg, [JudgeHandle("model", 1.0, True, actor=actor)])
    groups = sched.collect(sched.take(0))
    assert len(actor.score_groups.calls) == 3 and len(groups) == 3


def test_async_queues_ahead_and_counts_untrained_prompts():
    cfg = config(schedule={"mode": "async", "max_staleness": 1}, train={"steps": 3})
    sched, stream, _ = make(cfg, [JudgeHandle("rule", 1.0, True, local=LengthJudge())])
    work = sched.take(0)
    sched.collect(work)
    assert [w.step for w in sched.queue] == [1]  # step 1's rollout queued behind step 0's batch pass
    assert stream.index == 6
    assert sched.untrained_prompts() == 6  # in flight (0) + queued (1)
    sched.trained()
    assert sched.untrained_prompts() == 3
    assert stream.state_before(sched.untrained_prompts()) == {"epoch": 0, "index": 3}


def test_stop_request_interrupts_a_step_still_collecting():
    actor = fake_actor_judge(ready=False)
    sched, _, _ = make(config(), [JudgeHandle("model", 1.0, True, actor=actor)])
    work = sched.take(0)
    sched.stop_requested = True
    with pytest.raises(Interrupted):
        sched.collect(work)
    assert sched.untrained_prompts() == 3  # the step in flight is given back


def test_judge_timeout_is_reissued_once_then_masked():
    cfg = config(faults={"judge_timeout_s": 1e-9})
    actor = fake_actor_judge(ready=False)
    sched, _, ray = make(cfg, [JudgeHandle("model", 1.0, True, actor=actor)])
    groups = sched.collect(sched.take(0))
    assert len(actor.score_groups.calls) == 2 and len(ray.cancelled) == 2
    assert all(x is None for g in groups for x in g.judged["model"])


def test_refill_round_takes_fresh_prompts_and_counts_them():
    sched, stream, _ = make(config(), [JudgeHandle("rule", 1.0, True, local=LengthJudge())])
    work = sched.take(0)
    sched.collect(work)
    more = sched.more(work, salt=1)
    assert [g.key for g in more] == ["s0r1g0", "s0r1g1", "s0r1g2"]
    assert [g.rollouts[0].prompt.text for g in more] == ["question 3", "question 4", "question 5"]
    assert sched.untrained_prompts() == 6 and stream.index == 6
