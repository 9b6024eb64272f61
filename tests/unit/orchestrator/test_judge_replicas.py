"""Replicated judges (``replicas: R``) with fake actors: least-loaded dispatch, the cap per replica,
per-replica counts in the step metrics, a dead replica's calls re-issued to the others at once
(not masked, not a timeout), a restarted replica taking calls again, and the run ending with the
replica's role named when every replica is lost."""

import time
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from grm.config.pipeline import JudgeRole, PipelineSpec
from grm.judges.limits import CallLimits
from grm.orchestrator.health import actor_lost
from grm.orchestrator.judge_dispatch import least_loaded
from grm.orchestrator.pools import Pool, judge_roles, role_pools
from grm.orchestrator.rewards import reward_groups
from grm.orchestrator.roles import JudgeHandle
from grm.orchestrator.step_rows import step_metrics
from grm.orchestrator.types import Replica
from tests.unit.orchestrator.fakes import (
    Clock,
    FakeActorError,
    FakeTaskError,
    LengthJudge,
    Method,
    Ref,
    TimedRay,
    judged,
    outcome,
)
from tests.unit.orchestrator.test_scheduler import CHUNKED, config, make


class ReplicaRay(TimedRay):
    """A timed fake ray whose refs may hold an error (raised by ``get``), as a dead actor's do."""

    def get(self, ref):
        value = super().get(ref)
        if isinstance(value, BaseException):
            raise value
        return value


class FakeReplica:
    """One judge actor. Call k (of this replica) takes ``seconds(k)`` fake seconds, or dies at
    that time when ``dies(k)``; after a death the probe returns once ``restart_s`` fake seconds have
    passed, or fails when ``restarts`` are spent. ``log`` records each call's issue time and keys."""

    def __init__(
        self,
        ray: ReplicaRay,
        name: str,
        seconds=lambda k: 3.0,
        dies=lambda k: False,
        restart_s=5.0,
        restarts=3,
        usage=None,
        fails=lambda k: None,
    ):
        self.ray, self.name, self.seconds, self.dies, self.usage = ray, name, seconds, dies, usage
        self.fails = fails  # call k raises this (in the actor's code) instead of answering, when not None
        self.restart_s, self.restarts = restart_s, restarts
        self.judge, self.log = LengthJudge(), []
        self.score_groups, self.pid = Method(self._score), Method(self._probe)
        self._actor_id = SimpleNamespace(hex=lambda: name)

    def _score(self, groups):
        k = len(self.log)
        self.log.append({"at": self.ray.clock.now, "keys": [g[0].id.split("/")[0] for g in groups]})
        died = self.dies(k)
        answer = judged(self.judge, groups)
        if self.usage is not None:  # what an openai engine's server reported for this call
            answer[1].usage = self.usage(k)
        error = self.fails(k)
        ref = Ref(FakeActorError(self.name) if died else FakeTaskError(error) if error is not None else answer, ready=False)
        ref.done_at = self.ray.clock.now + self.seconds(k)
        return ref

    def _probe(self):
        self.restarts -= 1
        ref = Ref(1234 if self.restarts >= 0 else FakeActorError(self.name), ready=False)
        ref.done_at = self.ray.clock.now + self.restart_s
        return ref


@pytest.fixture
def timed(monkeypatch) -> ReplicaRay:
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    return ReplicaRay(clock)


def replicated(*replicas: FakeReplica, cap: int = 1) -> JudgeHandle:
    return JudgeHandle("model", 1.0, True, replicas=list(replicas), limits=CallLimits(max_concurrent_calls=cap))


def metrics_of(work, groups):
    rewards = reward_groups(groups, {"model": 1.0}, {"model": True})
    return step_metrics(outcome(groups, rewards, work))


# ---------------------------------------------------------------- the choice itself
def test_least_loaded_prefers_fewest_in_flight_then_fewest_items_then_lowest_index():
    reps = [Replica(0, items=8), Replica(1, items=2), Replica(2, items=2)]
    assert least_loaded(reps, [1, 1, 0], cap=2).index == 2  # fewest in flight wins over items
    assert least_loaded(reps, [0, 0, 0], cap=2).index == 1  # tie: fewest items judged, then index
    assert least_loaded(reps, [0, 1, 1], cap=1).index == 0  # the others are at their cap
    assert least_loaded(reps, [1, 1, 1], cap=1) is None
    reps[0].state, reps[1].state = "restarting", "lost"
    assert least_loaded(reps, [0, 0, 1], cap=2).index == 2  # only live replicas take calls


# ---------------------------------------------------------------- dispatch through the scheduler
def test_calls_go_to_the_least_loaded_replica_and_counts_reach_the_metrics(timed):
    fast, slow = FakeReplica(timed, "r0", seconds=lambda k: 2.0), FakeReplica(timed, "r1", seconds=lambda k: 10.0)
    sched, _, _ = make(config(schedule=CHUNKED), [replicated(fast, slow)], ray=timed)
    work = sched.take(0)
    groups = sched.collect(work)
    # chunk 0 -> r0, chunk 1 -> r1 (r0 busy), chunk 2 waits for a slot and r0 frees first
    assert [e["keys"] for e in fast.log] == [["s0r0g0"], ["s0r0g2"]] and [e["keys"] for e in slow.log] == [["s0r0g1"]]
    assert fast.log[1]["at"] >= 2.0 and fast.log[1]["at"] < 10.0
    m = metrics_of(work, groups)
    assert m["judge_items/model/0"] == 4 and m["judge_items/model/1"] == 2  # samples (2 per chunk)
    assert m["judge_seconds/model/1"] >= 10.0 and m["judge_seconds/model/0"] >= 4.0
    assert m["masked"] == 0 and m["judge_timeouts/model"] == 0


def test_what_each_replicas_server_reported_reaches_the_metrics_per_replica(timed):
    served = {"requests": 3, "retries": 1, "prompt_tokens": 90, "completion_tokens": 12, "server_restarts": 0}
    a = FakeReplica(timed, "r0", seconds=lambda k: 2.0, usage=lambda k: served)
    b = FakeReplica(timed, "r1", seconds=lambda k: 10.0, usage=lambda k: {**served, "server_restarts": 1})
    sched, _, _ = make(config(schedule=CHUNKED), [replicated(a, b)], ray=timed)
    work = sched.take(0)
    m = metrics_of(work, sched.collect(work))
    # r0 took chunks 0 and 2, r1 chunk 1 (as above): each replica's counters summed over its calls
    assert m["judge_usage/model/0/requests"] == 6 and m["judge_usage/model/1/requests"] == 3
    assert m["judge_usage/model/0/server_restarts"] == 0 and m["judge_usage/model/1/server_restarts"] == 1
    assert m["judge_usage/model/0/prompt_tokens"] == 180
    # and the judge's total, as for one replica
    assert m["judge_cost/model/usage_requests"] == 9 and m["judge_cost/model/usage_server_restarts"] == 1


def test_a_call_its_model_server_fails_is_re_issued_once_then_masked_and_counted(timed, capsys):
    from grm.engines.base import EngineError

    gone = EngineError("http://127.0.0.1:8000/v1: gave up after 5 attempts; last error: connection refused")
    # replica 0 fails its first call (chunk 0), which goes again to the least-loaded replica
    flaky = FakeReplica(timed, "r0", seconds=lambda k: 2.0, fails=lambda k: gone if k == 0 else None)
    steady = FakeReplica(timed, "r1", seconds=lambda k: 2.0)
    sched, _, _ = make(config(schedule=CHUNKED), [replicated(flaky, steady)], ray=timed)
    work = sched.take(0)
    m = metrics_of(work, sched.collect(work))
    assert m["masked"] == 0 and m["judge_errors/model"] == 1 and m["judge_timeouts/model"] == 0
    assert sum(m[f"judge_items/model/{i}"] for i in range(2)) == 6  # every sample judged once
    assert "judge 'model' failed on step 1 chunk 0: re-issuing it (http://127.0.0.1:8000/v1: gave up" in capsys.readouterr().out
    # failing everywhere: re-issued once, then its samples are masked (never a default number)
    down = [FakeReplica(timed, f"r{i}", seconds=lambda k: 1.0, fails=lambda k: gone) for i in range(2)]
    sched, _, _ = make(config(schedule=CHUNKED), [replicated(*down)], ray=timed)
    work = sched.take(0)
    m = metrics_of(work, sched.collect(work))
    assert m["masked"] == 6 and m["judge_errors/model"] == 6  # three chunks, each failed twice
    assert "failed twice on step 1 chunk 0: masking 2 samples" in capsys.readouterr().out


def test_an_error_in_the_judges_own_code_ends_the_collection(timed):
    broken = FakeReplica(timed, "r0", fails=lambda k: ValueError("a bug"))
    sched, _, _ = make(config(schedule=CHUNKED), [replicated(broken)], ray=timed)
    with pytest.raises(FakeTaskError, match="a bug"):
        sched.collect(sched.take(0))


def test_the_cap_applies_per_replica(timed):
    reps = [FakeReplica(timed, f"r{i}", seconds=lambda k: 3.0) for i in range(2)]
    sched, _, _ = make(config(schedule=CHUNKED, algorithm={"prompts_per_step": 4}), [replicated(*reps, cap=2)], ray=timed)
    sched.collect(sched.take(0))
    # four chunks landing at t = 1, 2, 3, 4 and taking 3 s each: all four were in flight at t = 4,
    # two per replica (a cap of 2 for the whole judge would have held back the last two)
    assert [len(r.log) for r in reps] == [2, 2]
    assert sorted(e["at"] for r in reps for e in r.log) == [1.0, 2.0, 3.0, 4.0]


def test_a_single_replica_judge_with_a_restart_keeps_every_sample(timed):
    """``replicas: 1`` (the default) takes the same path: its calls wait for Ray's restart."""
    only = FakeReplica(timed, "r0", seconds=lambda k: 2.0, dies=lambda k: k == 0, restart_s=20.0)
    sched, _, _ = make(config(), [replicated(only)], ray=timed)
    work = sched.take(0)
    groups = sched.collect(work)
    assert len(only.log) == 2 and only.log[1]["at"] >= 22.0  # re-issued once the probe returned
    assert all(x is not None for g in groups for x in g.judged["model"]) and work.judge_timeouts == {}


# ---------------------------------------------------------------- replicas that die
def test_a_dead_replicas_calls_are_reissued_to_the_others_at_once_then_it_comes_back(timed):
    # r1 dies 1 s into its first call and takes 30 s to restart; r0 takes 3 s per call
    r0 = FakeReplica(timed, "r0", seconds=lambda k: 3.0)
    r1 = FakeReplica(timed, "r1", seconds=lambda k: 1.0 if k == 0 else 3.0, dies=lambda k: k == 0, restart_s=30.0)
    judge = replicated(r0, r1, cap=2)
    sched, _, _ = make(config(schedule=CHUNKED, train={"steps": 2}), [judge], ray=timed)
    work = sched.take(0)
    groups = sched.collect(work)
    # chunks 0 and 2 went to r0, chunk 1 to r1 (t=2), which died at t=3: chunk 1 was re-issued
    # to r0 as soon as the death was seen, long before r1's restart (t=33 at the earliest)
    assert [e["keys"][0] for e in r1.log] == ["s0r0g1"]
    reissued = next(e for e in r0.log if e["keys"] == ["s0r0g1"])
    assert 3.0 <= reissued["at"] <= 6.0
    assert all(x is not None for g in groups for x in g.judged["model"])  # nothing masked ...
    m = metrics_of(work, groups)
    assert m["masked"] == 0 and m["judge_timeouts/model"] == 0  # ... nor counted as a timeout
    assert m["judge_items/model/0"] == 6 and m["judge_items/model/1"] == 0
    assert [r.state for r in sched.dispatch.replicas["model"]] == ["live", "restarting"]
    # while the step trains, Ray restarts r1 (its probe returns): it takes calls again, the next
    # one first (equally idle, fewer samples judged)
    training = Ref("trained", ready=False)
    training.done_at = timed.clock.now + 40.0
    assert sched.wait(training) == "trained"
    assert sched.dispatch.replicas["model"][1].state == "live"
    sched.trained()
    sched.collect(sched.take(1))
    assert r1.log[1]["keys"] == ["s1r0g0"] and r1.log[1]["at"] >= 33.0


def test_a_replica_lost_for_good_leaves_the_others_working(timed):
    r0 = FakeReplica(timed, "r0", seconds=lambda k: 3.0)
    r1 = FakeReplica(timed, "r1", seconds=lambda k: 1.0, dies=lambda k: True, restart_s=1.0, restarts=0)
    sched, _, _ = make(config(schedule=CHUNKED), [replicated(r0, r1)], ray=timed)
    work = sched.take(0)
    groups = sched.collect(work)
    assert all(x is not None for g in groups for x in g.judged["model"])
    assert [r.state for r in sched.dispatch.replicas["model"]] == ["live", "lost"]
    assert len(r1.log) == 1  # never called again


def test_every_replica_lost_ends_the_run_naming_the_last_one(timed):
    reps = [FakeReplica(timed, f"r{i}", seconds=lambda k: 1.0, dies=lambda k: True, restarts=0) for i in range(2)]
    judge = replicated(*reps)
    sched, _, _ = make(config(schedule=CHUNKED), [judge], ray=timed)
    with pytest.raises(FakeActorError) as e:
        sched.collect(sched.take(0))
    placement = {judge.role(i): {"pool": "judge", "pid": 100 + i, "node_id": "n"} for i in range(2)}
    lost = actor_lost(e.value, SimpleNamespace(policy=FakeGroup(), reference=None, judges=[judge]), placement)
    assert lost.roles == [f"judge:model#{e.value.actor_id[1]}"] and not lost.policy_lost
    assert "pool 'judge'" in str(lost)


class FakeGroup:
    """The policy as ``actor_lost`` sees it: one actor that is not the one that died."""

    def __init__(self) -> None:
        self.actor = SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: "policy-actor"))

    def actor_roles(self):
        return {"policy": self.actor}


# ---------------------------------------------------------------- config and role names
def test_replicas_default_to_one_and_need_a_pool():
    assert config().judges[0].replicas == 1
    assert JudgeRole(spec="builtin:numeric-answer", pool="a", replicas=2).replicas == 2
    with pytest.raises(ValidationError, match="replicas: 2 needs a pool"):
        JudgeRole(spec="builtin:numeric-answer", replicas=2)
    with pytest.raises(ValidationError):
        JudgeRole(spec="builtin:numeric-answer", pool="a", replicas=0)


def test_each_replica_is_a_process_with_its_share_of_the_pool():
    data = config().model_dump(exclude={"algorithm"})
    data.update(pools={"a": {"cpus": 1}, "j": {"cpus": 4}}, reference={"pool": "j"})
    data["judges"] = [{"spec": "builtin:numeric-answer", "pool": "j", "replicas": 2}]
    cfg = PipelineSpec.model_validate(data)
    roles = role_pools(cfg, ["v"])
    assert roles["j"] == ["reference", "judge:v#0", "judge:v#1"]
    pool = Pool("j", cfg.pools["j"], None, roles["j"])
    # the reference is hosted in replica 0's actor: two processes, two threads each
    assert pool.processes == ["judge:v#0", "judge:v#1"] and pool.threads == 2


def test_role_names_number_replicas_only_when_there_are_several():
    assert judge_roles("j", 1) == ["judge:j"]
    assert judge_roles("j", 2) == ["judge:j#0", "judge:j#1"]
    assert JudgeHandle("j", 1.0, True, replicas=["a", "b"]).actor == "a"
    assert JudgeHandle("j", 1.0, True, actor="a").replicas == ["a"]
