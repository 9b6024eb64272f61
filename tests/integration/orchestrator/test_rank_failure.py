"""A rank of a 2-rank gloo worker group that raises or dies while the other waits in a collective:
the waiting rank fails at once (not after the process group's timeout), and the group's diagnosis
names the rank the failure started on and why. The ranks are small Ray actors built like the policy
actor's collective calls (``failing_together``, ``failure`` answered while a call is stuck, rank 0
gathering the others' results), without a model."""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0  # the process group's bound: each failure must come long before it


@pytest.fixture(scope="module")
def ray_local():
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def rank_actor(ray):
    @ray.remote(num_cpus=0, concurrency_groups={"progress": 1})
    class Rank:
        def __init__(self, rank: int, world: int, addr: str, port: int) -> None:
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR=addr, MASTER_PORT=str(port))
            os.environ.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
            from grm.training.distributed import init_distributed

            init_distributed(timeout_s=TIMEOUT_S)
            self.rank = rank

        def train(self, how: dict, others=()):
            import torch
            import torch.distributed as dist

            from grm.training.distributed import failing_together

            t = torch.ones(1)
            with failing_together(self.rank, 2, "step"):
                if how.get(self.rank) == "raise":
                    raise ValueError(f"rank {self.rank}: a batch of 6 sequences; this trainer was built for 8")
                if how.get(self.rank) == "die":
                    os._exit(9)
                dist.all_reduce(t)
            return [float(t), *ray.get(list(others))] if self.rank == 0 else float(t)

        @ray.method(concurrency_group="progress")
        def failure(self):
            from grm.training.distributed import first_failure

            return first_failure()

    return Rank


def group(ray):
    from grm.orchestrator.policy_group import PolicyGroup
    from grm.process import free_port

    rank = rank_actor(ray)
    port = free_port()
    actors = [rank.remote(r, 2, "127.0.0.1", port) for r in range(2)]
    assert ray.get([a.failure.remote() for a in actors]) == [None, None]  # started (the wait below times calls alone)
    return PolicyGroup(actors, hf_rollout=True)


@pytest.mark.timeout(180)
def test_a_rank_that_raises_or_dies_before_a_collective_is_named_and_the_other_does_not_wait(ray_local):
    ray = ray_local
    ok = group(ray)
    assert ray.get(ok.train.remote({})) == [2.0, 2.0]  # both ranks meet in the all-reduce
    for how, detail in (("raise", "failed in step (ValueError: rank 1: a batch of 6 sequences"), ("die", "died (")):
        g = ok if how == "raise" else group(ray)
        t0 = time.monotonic()
        with pytest.raises((ray.exceptions.RayTaskError, ray.exceptions.RayActorError)) as e:
            ray.get(g.train.remote({1: how}))
        waited = time.monotonic() - t0
        assert waited < TIMEOUT_S / 2, f"rank 0 waited {waited:.1f} s for a rank that had {how}d"
        lost = g.diagnose(e.value)
        assert lost is not None and lost.roles == ["policy#1"] and lost.policy_lost, (how, str(e.value)[-2000:])
        assert f"rank 1 of 2 {detail}" in str(lost), str(lost)
        assert "\n" not in str(lost)
        print(f"{how}: rank 0 gave up after {waited:.2f} s; {lost}")
