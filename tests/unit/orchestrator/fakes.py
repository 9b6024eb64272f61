"""Ray-free stand-ins for the scheduler's unit tests: refs, a ray module (``RayCalls``), a policy
actor, judges, and the driver's sequence of scheduler calls for one step's data.

They replace only Ray and the models; the scheduler, filtering, rewards and recorder code under
test is the real one.
"""

from __future__ import annotations

from types import SimpleNamespace

from grm.data.prompts import Prompt
from grm.judges.cost import JudgeCost, costed
from grm.judges.types import JudgeResult
from grm.orchestrator.roles import JudgeHandle, Roles
from grm.orchestrator.types import Group, Prepared, Rollout, StepOutcome, StepWork, rollouts_of


class Ref:
    """An object ref; ``ready`` flips when the fake ray lets it finish."""

    def __init__(self, value, ready: bool = True) -> None:
        self.value, self.ready = value, ready


class FakeActorError(Exception):
    """Stands in for ``ray.exceptions.RayActorError``: what a call to a dead actor raises."""

    def __init__(self, actor_id: str) -> None:
        super().__init__(f"The actor {actor_id} died unexpectedly")
        self.actor_id = actor_id


class FakeTaskError(Exception):
    """Stands in for ``ray.exceptions.RayTaskError``: what a call whose code raised raises; ``cause``
    is the exception the actor's code raised."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"task failed: {cause}")
        self.cause = cause


class FakeRay:
    """The ``RayCalls`` the scheduler waits with: a ref is ready when the test made it so."""

    exceptions = SimpleNamespace(RayActorError=FakeActorError, RayTaskError=FakeTaskError)

    def __init__(self) -> None:
        self.cancelled: list[Ref] = []

    def wait(self, refs, num_returns=1, timeout=None, fetch_local=True):
        ready = [r for r in refs if r.ready][:num_returns]
        return ready, [r for r in refs if r not in ready]

    def get(self, ref):
        assert ref.ready, "get() of a ref that never finishes"
        return ref.value

    def cancel(self, ref, force=False):
        self.cancelled.append(ref)


class Method:
    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, []

    def remote(self, *args):
        self.calls.append(args)
        return self.fn(*args)


def fake_policy(rewards_text=lambda prompt, k: f"answer {k}"):
    """A policy actor whose rollouts are deterministic texts; prepare's batch is the rollouts' ids."""

    def rollout(prompts, keys, n, seed):
        groups = []
        for p, key in zip(prompts, keys, strict=True):
            rs = [
                Rollout(
                    id=f"{key}/{k}",
                    prompt=p,
                    group=key,
                    prompt_ids=[1, 2],
                    token_ids=[3] * (k + 1),
                    text=rewards_text(p, k),
                    logprobs=[-0.5] * (k + 1),
                    finish_reason="stop",
                    version=0,
                )
                for k in range(n)
            ]
            groups.append(Group(key, rs))
        return Ref((groups, 0.25))

    return SimpleNamespace(
        rollout=Method(rollout),
        episodes=Method(rollout),
        rollout_beside=Method(rollout),
        prepare=Method(lambda rollouts: Ref(Prepared([r.id for r in rollouts], 0.5))),
    )


class LengthJudge:
    """A local judge: reward = len(response) / 10 (so responses of a group differ)."""

    def __init__(self) -> None:
        self.calls = 0
        self.cost = JudgeCost()

    def score_groups(self, groups):
        self.calls += 1
        self.cost.calls += sum(len(g) for g in groups)  # one "model call" per sample
        return [[JudgeResult(judge="len", score=len(s.response), reward=len(s.response) / 10) for s in g] for g in groups]


def fake_actor_judge(ready: bool = True):
    judge = LengthJudge()
    return SimpleNamespace(score_groups=Method(lambda groups: Ref(judged(judge, groups), ready=ready)))


def judged(judge, groups):
    """What a judge actor answers: the results and what they cost (``JudgeActor.score_groups``)."""
    return costed(judge, judge.score_groups, groups)


def roles(judges: list[JudgeHandle], policy=None) -> Roles:
    return Roles(pools={}, policy=policy or fake_policy(), reference=None, judges=judges)


def prompts(n: int) -> list[Prompt]:
    return [Prompt(id=f"p{i}", text=f"question {i}", reference=str(i)) for i in range(n)]


class Clock:
    """Fake seconds for the scheduler's ``time.perf_counter``; the timed ray moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedRay(FakeRay):
    """A fake ray where time passes: every ``wait`` advances the clock by ``tick`` seconds and
    readies the refs whose ``done_at`` has come (refs without one are ready as given). Past
    ``limit`` fake seconds it fails the test instead of letting a stuck scheduler spin forever."""

    def __init__(self, clock: Clock, tick: float = 1.0, limit: float = 1000.0) -> None:
        super().__init__()
        self.clock, self.tick, self.limit = clock, tick, limit

    def wait(self, refs, num_returns=1, timeout=None, fetch_local=True):
        self.clock.now += self.tick
        assert self.clock.now <= self.limit, "fake time ran out: the scheduler waits on something that never finishes"
        for r in refs:
            if getattr(r, "done_at", None) is not None and r.done_at <= self.clock.now and r not in self.cancelled:
                r.ready = True
        return super().wait(refs, num_returns, timeout)


def timed_actor_judge(ray: TimedRay, seconds=lambda k: 3.0):
    """An actor judge whose call k finishes ``seconds(k)`` fake seconds after it is issued
    (``math.inf``: never). ``log`` records, per call, when it was issued, the group keys it judges
    and how many earlier calls were still in flight then (neither finished nor cancelled)."""
    judge = LengthJudge()
    issued: list[Ref] = []
    log: list[dict] = []

    def remote(groups):
        in_flight = sum(1 for r in issued if not r.ready and r not in ray.cancelled)
        ref = Ref(judged(judge, groups), ready=False)
        ref.done_at = ray.clock.now + seconds(len(issued))
        log.append({"at": ray.clock.now, "keys": [g[0].id.split("/")[0] for g in groups], "in_flight": in_flight})
        issued.append(ref)
        return ref

    return SimpleNamespace(score_groups=Method(remote), log=log)


def gather_step(sched, work, early: bool = True) -> list[Group]:
    """What ``Driver.run`` does with the scheduler until the batch pass is queued (no filtering):
    rollouts in, the batch pass beside the judges when ``early``, the rollouts ahead (async), the
    judged groups, and the batch pass after the judges when not ``early``."""
    rollouts = sched.rollouts(work)
    if early:
        sched.prepare(work, rollouts)
    sched.fill_ahead(work.step)
    groups = sched.collect(work)
    if work.prepared is None:
        sched.prepare(work, rollouts_of(groups))
    return groups


def outcome(groups: list[Group], reward_stats: dict, work: StepWork | None = None) -> StepOutcome:
    """A step's outcome for ``step_metrics``: step 0 at policy version 0, 1 s long, nothing trained."""
    work = work or StepWork(step=0, prompts=[], chunks=[])
    return StepOutcome(0, work, 0, groups=groups, reward_stats=reward_stats, seconds=1.0)
