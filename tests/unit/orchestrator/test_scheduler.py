"""The scheduler with fake actors: judge fan-out from one place, stable ids, async queueing,
prompt accounting for checkpoints, interrupts, judge deadlines and concurrency caps."""

import math
import time
from collections import deque
from itertools import pairwise

import pytest

from grm.config.pipeline import PipelineSpec
from grm.data.prompts import PromptStream
from grm.judges.limits import CallLimits
from grm.orchestrator.rewards import reward_groups
from grm.orchestrator.roles import JudgeHandle
from grm.orchestrator.scheduler import Interrupted, Scheduler
from grm.orchestrator.step_rows import step_metrics
from grm.orchestrator.types import rollouts_of
from tests.unit.orchestrator.fakes import (
    Clock,
    FakeRay,
    LengthJudge,
    Ref,
    TimedRay,
    fake_actor_judge,
    fake_policy,
    gather_step,
    outcome,
    prompts,
    roles,
    timed_actor_judge,
)


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


def make(cfg, judges, policy=None, ray=None):
    stream = PromptStream(prompts(10), seed=0, shuffle=False)
    ray = ray or FakeRay()
    return Scheduler(cfg, roles(judges, policy), stream, ray), stream, ray


@pytest.fixture
def timed(monkeypatch) -> TimedRay:
    """A fake ray whose waits move a fake clock, which the scheduler reads as ``time.perf_counter``."""
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    return TimedRay(clock)


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
    assert work.prepared is None and sched.queue == deque()  # collect only collects: the driver queues the rest
    sched.prepare(work, rollouts_of(groups))
    assert sched.ray.get(work.prepared).batch[0] == "s0r0g0/0"


def test_rollouts_returns_once_every_chunk_landed_while_judge_calls_may_still_run():
    actor = fake_actor_judge(ready=False)
    sched, _, _ = make(config(), [JudgeHandle("model", 1.0, True, actor=actor)])
    work = sched.take(0)
    rollouts = sched.rollouts(work)
    assert [r.id for r in rollouts][:3] == ["s0r0g0/0", "s0r0g0/1", "s0r0g1/0"] and len(rollouts) == 6
    assert len(sched.dispatch.running) == 1 and not work.complete  # the judge's call is in flight


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
    gather_step(sched, work)
    assert [w.step for w in sched.queue] == [1]  # step 1's rollout queued behind step 0's batch pass
    assert stream.index == 6
    assert sched.untrained_prompts() == 6  # in flight (0) + queued (1)
    sched.trained()
    assert sched.untrained_prompts() == 3
    assert stream.state_before(sched.untrained_prompts()) == {"epoch": 0, "index": 3}


def test_interruptible_rollouts_go_to_the_call_that_runs_beside_training():
    cfg = config(schedule={"mode": "async", "max_staleness": 2, "interruptible": True}, train={"steps": 4})
    policy = fake_policy()
    sched, _, _ = make(cfg, [JudgeHandle("rule", 1.0, True, local=LengthJudge())], policy)
    gather_step(sched, sched.take(0))
    assert len(policy.rollout_beside.calls) == 3 and not policy.rollout.calls  # step 0, and steps 1-2 ahead (eta = 2)
    assert [w.step for w in sched.queue] == [1, 2]


def test_async_with_no_staleness_submits_exactly_what_sync_does():
    """η = 0: no rollout is queued before the step in flight is trained, so every policy call comes
    with the same arguments in the same order as in sync mode."""
    seen, steps = [], 3
    for schedule in ({"mode": "sync"}, {"mode": "async", "max_staleness": 0}):
        policy = fake_policy()
        sched, _, _ = make(
            config(schedule=schedule, train={"steps": steps}), [JudgeHandle("rule", 1.0, True, local=LengthJudge())], policy
        )
        for step in range(steps):
            work = sched.take(step)
            gather_step(sched, work)
            assert not sched.queue
            sched.trained()
        seen.append((policy.rollout.calls, [[r.id for r in c[0]] for c in policy.prepare.calls]))
    assert seen[0] == seen[1] and len(seen[0][0]) == steps


def test_stop_request_interrupts_a_step_still_collecting():
    actor = fake_actor_judge(ready=False)
    sched, _, _ = make(config(), [JudgeHandle("model", 1.0, True, actor=actor)])
    work = sched.take(0)
    sched.stop_requested = True
    with pytest.raises(Interrupted):
        sched.collect(work)
    assert sched.untrained_prompts() == 3  # the step in flight is given back


def test_abandon_cancels_the_rollouts_queued_ahead_and_every_judge_call_but_keeps_their_prompts_counted():
    """An async stop after step 0's rollouts landed: step 1's rollout chunks (queued on the policy
    behind step 0's batch pass) and step 0's judge calls in flight are cancelled, so the policy's
    checkpoint does not wait for them, and the calls waiting for a slot are dropped; the batch pass
    is left alone (collective under ZeRO-3)."""
    cfg = config(schedule={"mode": "async", "max_staleness": 1, "stream_prompts": 1}, train={"steps": 3})
    actor = fake_actor_judge(ready=False)
    sched, _, ray = make(cfg, [JudgeHandle("model", 1.0, True, actor=actor)])
    work = sched.take(0)
    sched.watch = type("W", (), {"check": lambda self: setattr(sched, "stop_requested", work.prepared is not None)})()
    with pytest.raises(Interrupted):
        gather_step(sched, work)
    ahead = sched.queue[0].chunks
    judging = list(sched.dispatch.running)  # one call in flight (the judge's cap), two waiting for a slot
    assert len(ahead) == 3 and len(judging) == 1 and len(sched.dispatch.waiting["model"]) == 2 and ray.cancelled == []
    sched.abandon()
    assert set(map(id, ray.cancelled)) == set(map(id, ahead + judging))
    assert work.prepared not in ray.cancelled
    assert sched.dispatch.running == {} and all(not q for q in sched.dispatch.waiting.values())
    assert sched.untrained_prompts() == 6  # steps 0 and 1 are given back by the checkpoint


def test_judge_timeout_is_reissued_once_then_masked():
    actor = fake_actor_judge(ready=False)
    sched, _, ray = make(config(), [JudgeHandle("model", 1.0, True, actor=actor, limits=CallLimits(deadline_s=1e-9))])
    work = sched.take(0)
    groups = sched.collect(work)
    assert len(actor.score_groups.calls) == 2 and len(ray.cancelled) == 2
    assert all(x is None for g in groups for x in g.judged["model"])
    assert work.judge_timeouts == {"model": 2}


def test_refill_round_takes_fresh_prompts_and_counts_them():
    sched, stream, _ = make(config(), [JudgeHandle("rule", 1.0, True, local=LengthJudge())])
    work = sched.take(0)
    sched.collect(work)
    more = sched.more(work, salt=1)
    assert [g.key for g in more] == ["s0r1g0", "s0r1g1", "s0r1g2"]
    assert [g.rollouts[0].prompt.text for g in more] == ["question 3", "question 4", "question 5"]
    assert sched.untrained_prompts() == 6 and stream.index == 6


# ---------------------------------------------------------------- judge deadlines and concurrency caps
CHUNKED = {"mode": "sync", "stream_prompts": 1}  # three chunks of one prompt (two responses) each


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_calls_beyond_the_cap_wait_in_order_until_a_slot_frees(timed, cap):
    actor = timed_actor_judge(timed, seconds=lambda k: 3.0)
    judge = JudgeHandle("model", 1.0, True, actor=actor, limits=CallLimits(max_concurrent_calls=cap))
    sched, _, _ = make(config(schedule=CHUNKED), [judge], ray=timed)
    groups = sched.collect(sched.take(0))
    assert [e["keys"] for e in actor.log] == [["s0r0g0"], ["s0r0g1"], ["s0r0g2"]]  # in order, each once
    assert max(e["in_flight"] for e in actor.log) == cap - 1  # never more than ``cap`` in flight
    if cap == 1:  # each call was issued only once the one before it had finished (3 s later)
        assert all(b["at"] >= a["at"] + 3.0 for a, b in pairwise(actor.log))
    assert all(x is not None for g in groups for x in g.judged["model"])


def test_a_deadline_runs_from_issue_not_from_queueing(timed):
    actor = timed_actor_judge(timed, seconds=lambda k: 8.0)
    judge = JudgeHandle("model", 1.0, True, actor=actor, limits=CallLimits(max_concurrent_calls=1, deadline_s=10.0))
    sched, _, ray = make(config(schedule=CHUNKED), [judge], ray=timed)
    work = sched.take(0)
    sched.collect(work)
    # the third call waited >= 16 s for its slot and then ran 8 s: in time only because its clock
    # started when it was issued
    assert actor.log[2]["at"] >= 16.0
    assert len(actor.score_groups.calls) == 3 and ray.cancelled == [] and work.judge_timeouts == {}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (CallLimits(overhead_s=5.0, sample_s=1.0), 11.0),  # derived: 5 + 6 responses x 1 s
        (CallLimits(overhead_s=5.0, sample_s=1.0, per_group=True), 8.0),  # listwise: 5 + 3 groups x 1 s
        (CallLimits(overhead_s=5.0, sample_s=1.0, deadline_s=3.0), 3.0),  # the judge's explicit one beats derived
        (CallLimits(), math.inf),  # a handle without a spec: no deadline
    ],
)
def test_which_deadline_a_call_gets(limits, expected):
    sched, _, _ = make(config(), [JudgeHandle("model", 1.0, True, actor=fake_actor_judge(), limits=limits)])
    work = sched.take(0)
    sched.collect(work)
    assert work.calls[(0, "model")].deadline_s == expected


def test_a_timed_out_call_takes_its_slot_again_before_waiting_calls_then_is_masked_and_counted(timed):
    # chunk 0 hangs on both attempts; chunks 1 and 2 take 3 s
    actor = timed_actor_judge(timed, seconds=lambda k: math.inf if k < 2 else 3.0)
    judge = JudgeHandle("model", 1.0, True, actor=actor, limits=CallLimits(max_concurrent_calls=1, deadline_s=10.0))
    sched, _, ray = make(config(schedule=CHUNKED), [judge], ray=timed)
    work = sched.take(0)
    groups = sched.collect(work)
    assert [e["keys"][0] for e in actor.log] == ["s0r0g0", "s0r0g0", "s0r0g1", "s0r0g2"]
    assert actor.log[1]["at"] >= 10.0 and actor.log[2]["at"] >= 20.0  # after one, then two deadlines
    assert len(ray.cancelled) == 2 and work.judge_timeouts == {"model": 2}
    assert groups[0].judged["model"] == [None, None]
    assert all(x is not None for g in groups[1:] for x in g.judged["model"])
    m = step_metrics(outcome(groups, reward_groups(groups, {"model": 1.0}, {"model": True}), work))
    assert m["judge_timeouts/model"] == 2 and m["masked"] == 2


def test_queued_steps_keep_their_judge_calls_flowing_while_a_step_trains(timed):
    actor = timed_actor_judge(timed, seconds=lambda k: 3.0)
    judge = JudgeHandle("model", 1.0, True, actor=actor, limits=CallLimits(max_concurrent_calls=1))
    cfg = config(schedule={"mode": "async", "max_staleness": 1, "stream_prompts": 1}, train={"steps": 2})
    sched, _, _ = make(cfg, [judge], ray=timed)
    gather_step(sched, sched.take(0))
    ahead = sched.queue[0]
    training = Ref("trained", ready=False)
    training.done_at = timed.clock.now + 30.0
    assert sched.wait(training) == "trained"
    # step 1's three chunks landed and were judged one call at a time during "training"
    assert len(ahead.landed) == 3 and len(ahead.calls) == 3
    assert all(c.results is not None for c in ahead.calls.values())


def test_judge_cost_is_summed_per_step_per_judge_and_logged():
    # 3 prompts x 2 responses in chunks of one prompt: each judge gets 3 calls of 2 samples
    cfg = config(schedule={"mode": "sync", "stream_prompts": 1})
    local, actor = LengthJudge(), fake_actor_judge()
    sched, _, _ = make(cfg, [JudgeHandle("rule", 1.0, True, local=local), JudgeHandle("model", 1.0, True, actor=actor)])
    work = sched.take(0)
    groups = sched.collect(work)
    assert {n: c.calls for n, c in work.judge_cost.items()} == {"rule": 6, "model": 6}
    m = step_metrics(outcome(groups, reward_groups(groups, {"rule": 1.0, "model": 1.0}, {}), work))
    assert m["judge_cost/rule/calls"] == 6 and m["judge_cost/model/calls"] == 6 and m["judge_cost/model/retries"] == 0
    assert m["judge_cost/model/seconds"] >= 0 and "judge_cost/model/usage_requests" not in m
    # a refill round's calls count toward the step that asked for it
    sched.more(work, salt=1)
    assert work.judge_cost["rule"].calls == 12
    # report.md: totals over the run and per step
    from grm.orchestrator.step_rows import cost_table

    lines = cost_table([m, m])
    assert "## Judge cost" in lines
    row = next(ln for ln in lines if ln.startswith("| model |"))
    assert row.split(" | ")[1] == "12 (6.0)"  # calls: 6 per step over two steps
    assert cost_table([{"step": 1}]) == []


def test_waiting_on_training_tells_a_live_display_the_micro_batches():
    """While ``train`` runs, ``wait`` polls the policy's ``train_progress`` (a separate Ray concurrency
    group) about once a second and hands it to the display; without a panel it never asks."""
    from grm.orchestrator.live import NoProgress

    class Display(NoProgress):
        wants_training = True

        def __init__(self):
            self.seen = []

        def training(self, done, previous):
            self.seen.append((done, previous))

    class Slow:  # a training call that is ready on the third wait
        def __init__(self):
            self.waits = 0

    sched, _, ray = make(config(), [])
    polled = []
    sched.roles.policy.train_progress = type("M", (), {"remote": lambda self: polled.append(1) or (len(polled), 4)})()
    slow, target = Slow(), object()

    def wait(refs, num_returns=1, timeout=None):
        slow.waits += 1
        assert timeout == 1.0
        return ([target] if slow.waits == 3 and target in refs else []), refs

    ray.wait, ray.get = wait, lambda ref: "trained" if ref is target else ref
    sched.progress = Display()
    assert sched.wait(target) == "trained"
    assert sched.progress.seen == [(1, 4), (2, 4)]
    sched.progress, polled[:] = NoProgress(), []
    slow.waits = 2
    ray.wait = lambda refs, num_returns=1, timeout=None: ([target], refs)
    assert sched.wait(target) == "trained" and polled == []


def test_a_stop_cancels_a_droppable_wait_and_leaves_a_training_wait_alone():
    sched, _, ray = make(config(), [JudgeHandle("rule", 1.0, True, local=LengthJudge())])
    answers = Ref(["an answer"], ready=False)  # the held-out check's call, still running
    sched.request_stop()
    with pytest.raises(Interrupted):
        sched.wait(answers, droppable=True)
    assert ray.cancelled == [answers] and not sched.training  # the answers call trains nothing
    trained = Ref({"loss": 0.1})  # a training call is waited for whatever the stop (its step may be logged)
    assert sched.wait(trained) == {"loss": 0.1} and ray.cancelled == [answers]
    assert sched.training  # the policy is now ahead of every logged step, until the step is logged
    sched.trained()
    assert not sched.training


def test_tokens_by_lag_counts_each_sampled_token_at_the_version_that_sampled_it():
    from grm.orchestrator.step_rows import tokens_by_lag
    from grm.orchestrator.types import Rollout

    def r(version, n, token_versions=None, mask=None):
        p = prompts(1)[0]
        return Rollout("g/0", p, "g", [1], [5] * n, "x", [-1.0] * n, "stop", version, mask, token_versions=token_versions)

    rollouts = [
        r(3, 4),  # 4 tokens of version 3 (the step's): lag 0
        r(2, 4, token_versions=[2, 2, 3, 3]),  # a sync interrupted it: 2 at lag 1, 2 at lag 0
        r(1, 4, token_versions=[1, -1, -1, 2], mask=[1, 0, 0, 1]),  # an episode: observations are no one's
        r(3, 4, mask=[1, 1, 0, 0]),  # an episode of one turn: its 2 sampled tokens
    ]
    # tokens: lag 0: 4 + 2 + 2 = 8; lag 1: 2 + 1 = 3; lag 2: 1 -> of 12
    assert tokens_by_lag(rollouts, 3) == {
        "rollout/tokens_lag_0": 8 / 12,
        "rollout/tokens_lag_1": 3 / 12,
        "rollout/tokens_lag_2": 1 / 12,
        "rollout/spanning_versions": 2 / 4,
    }
