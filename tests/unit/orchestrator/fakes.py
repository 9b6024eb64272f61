"""Ray-free stand-ins for the scheduler's unit tests: refs, a ray module, a policy actor, judges.

They replace only Ray and the models; the scheduler, filtering, rewards and recorder code under
test is the real one.
"""

from __future__ import annotations

from types import SimpleNamespace

from grm.data.prompts import Prompt
from grm.judges.types import JudgeResult
from grm.orchestrator.placement import JudgeHandle, Roles
from grm.orchestrator.types import Group, Rollout


class Ref:
    """An object ref; ``ready`` flips when the fake ray lets it finish."""

    def __init__(self, value, ready: bool = True) -> None:
        self.value, self.ready = value, ready


class FakeRay:
    def __init__(self) -> None:
        self.cancelled: list[Ref] = []

    def wait(self, refs, num_returns=1, timeout=None):
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
    """A policy actor whose rollouts are deterministic texts; prepare returns a marker batch."""

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

    return SimpleNamespace(rollout=Method(rollout), prepare=Method(lambda rollouts: Ref(([r.id for r in rollouts], 0.5))))


class LengthJudge:
    """A local judge: reward = len(response) / 10 (so responses of a group differ)."""

    def __init__(self) -> None:
        self.calls = 0

    def score_groups(self, groups):
        self.calls += 1
        return [[JudgeResult(judge="len", score=len(s.response), reward=len(s.response) / 10) for s in g] for g in groups]


def fake_actor_judge(ready: bool = True):
    judge = LengthJudge()
    return SimpleNamespace(score_groups=Method(lambda groups: Ref(judge.score_groups(groups), ready=ready)))


def roles(judges: list[JudgeHandle], policy=None) -> Roles:
    return Roles(pools={}, policy=policy or fake_policy(), reference=None, judges=judges)


def prompts(n: int) -> list[Prompt]:
    return [Prompt(id=f"p{i}", text=f"question {i}", reference=str(i)) for i in range(n)]
