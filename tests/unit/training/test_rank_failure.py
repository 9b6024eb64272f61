"""Which rank a worker group's failure started on (no Ray, no process group): what each rank records,
and how the driver's diagnosis weighs the ranks' answers. The 2-rank gloo run with Ray is in
tests/integration/orchestrator/test_rank_failure.py."""

from __future__ import annotations

import pytest

from grm.orchestrator.policy_group import actors_named, blame
from grm.training import distributed
from grm.training.distributed import RankFailure, failing_together, peer_gone

GLOO_CLOSED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:55019. This is typically caused by a remote worker crashing."
)
GLOO_TIMEOUT = "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation"


def fail(rank: int, error: str, gone: bool, at: float, call: str = "step") -> RankFailure:
    return RankFailure(rank, call, error, gone, at)


def test_a_broken_collective_is_told_from_a_rank_s_own_error():
    assert peer_gone(RuntimeError(GLOO_CLOSED)) and peer_gone(RuntimeError(GLOO_TIMEOUT))
    assert not peer_gone(ValueError("batch of 6 sequences; this trainer was built for 8"))
    assert not peer_gone(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))


@pytest.fixture
def fresh(monkeypatch):
    aborted = []
    monkeypatch.setattr(distributed, "_first", None)
    monkeypatch.setattr(distributed, "abort_collectives", lambda: aborted.append(True))
    return aborted


def test_a_failing_rank_records_its_first_failure_and_tears_the_group_down(fresh):
    with pytest.raises(ValueError), failing_together(1, 2, "step"):
        raise ValueError("boom\nsecond line")
    with pytest.raises(RuntimeError), failing_together(1, 2, "save"):
        raise RuntimeError(GLOO_CLOSED)  # a later failure does not replace the first
    first = distributed.first_failure()
    assert (first.rank, first.call, first.error, first.peer_gone) == (1, "step", "ValueError: boom", False)
    assert fresh == [True, True]


def test_one_rank_has_no_group_to_tear_down(fresh):
    with pytest.raises(KeyError), failing_together(0, 1, "step"):
        raise KeyError("x")
    with failing_together(0, 1, "step"):
        pass
    assert fresh == [] and distributed.first_failure().error == "KeyError: 'x'"


def test_the_rank_whose_own_error_came_first_is_blamed_not_the_ranks_whose_collectives_broke():
    seen = {
        0: fail(0, f"RuntimeError: {GLOO_CLOSED}", True, at=10.2),
        1: fail(1, "ValueError: bad shard", False, at=10.0),
        2: fail(2, f"RuntimeError: {GLOO_CLOSED}", True, at=10.1),
        3: fail(3, "torch.OutOfMemoryError: CUDA out of memory", False, at=10.05),
    }
    lost = blame(4, seen, {}, None)
    assert lost.roles == ["policy#1"] and lost.policy_lost
    assert str(lost) == "policy#1 lost: rank 1 of 4 failed in step (ValueError: bad shard)"


def test_a_failure_that_starts_in_rank_0_s_own_code_keeps_its_traceback():
    seen = {0: fail(0, "TypeError: bug", False, at=1.0), 1: fail(1, f"RuntimeError: {GLOO_CLOSED}", True, at=1.1)}
    assert blame(2, seen, {}, None) is None


def test_a_gathered_error_a_dead_rank_and_a_rank_that_never_came_are_named():
    gathered = blame(2, {0: None, 1: None}, {}, (1, "ValueError: no such prompt"))
    assert str(gathered) == "policy#1 lost: rank 1 of 2 failed (ValueError: no such prompt)"
    dead = blame(3, {0: fail(0, f"RuntimeError: {GLOO_CLOSED}", True, 5.0)}, {2: "ActorDiedError: The actor died"}, None)
    assert str(dead) == "policy#2 lost: rank 2 of 3 died (ActorDiedError: The actor died)"
    hung = blame(3, {0: fail(0, f"RuntimeError: {GLOO_TIMEOUT}", True, 9.0, "save"), 1: None, 2: None}, {}, None)
    assert hung.roles == ["policy#1"]
    assert str(hung).startswith("policy#1 lost: rank 1 of 3 never came to the collective (and 1 more): rank 0's save gave up")
    assert blame(2, {0: None, 1: None}, {}, None) is None


def test_the_actors_a_ray_error_names_come_outermost_first():
    text = (
        "ray::PolicyActor.train() (pid=1, ip=10.0.0.1, actor_id=aaaa5103e81b70f2d1ede2e5901000000, repr=x)\n"
        "  File ...\nray.exceptions.RayTaskError(ValueError): ray::PolicyActor.train() (pid=2, ip=10.0.0.1, "
        "actor_id=bbbb83f61f74cd1bb5608ab701000000, repr=y)\nValueError: boom"
    )

    class Died(Exception):
        actor_id = "cccc83f61f74cd1bb5608ab701000000"

    assert actors_named(RuntimeError(text)) == ["aaaa5103e81b70f2d1ede2e5901000000", "bbbb83f61f74cd1bb5608ab701000000"]
    err = RuntimeError("x")
    err.cause = Died("The actor died unexpectedly")  # type: ignore[attr-defined]
    assert actors_named(err) == ["cccc83f61f74cd1bb5608ab701000000"]


def test_a_rank_that_fails_to_start_stops_the_run_without_waiting_for_the_ranks_before_it():
    """Rank 0 waits at the rendezvous for rank 1, whose model would not load: placement takes the
    answers as they come, so rank 1's failure is reported while rank 0 still waits."""
    from types import SimpleNamespace

    from grm.orchestrator.roles import started

    class ActorError(Exception):
        pass

    class Ref:
        def __init__(self, value, ready=True):
            self.value, self.ready = value, ready

    died = ActorError("The actor died because of an error raised in its creation task\n  File x\nOSError: no model at /m\n")
    waiting, failed, fine = Ref(None, ready=False), Ref(died), Ref({"pid": 3})

    def get(ref):
        assert ref.ready, "waited for a role that never answers"
        if isinstance(ref.value, Exception):
            raise ref.value
        return ref.value

    fake = SimpleNamespace(
        wait=lambda refs, num_returns: ([r for r in refs if r.ready][:num_returns], None),
        get=get,
        exceptions=SimpleNamespace(RayActorError=ActorError),
    )
    with pytest.raises(Exception) as e:
        started(fake, {"policy#0": waiting, "judge:a#0": fine, "policy#1": failed})
    assert str(e.value) == "policy#1 lost: its actor failed to start (OSError: no model at /m)"
    assert e.value.policy_lost
    assert started(fake, {"judge:a#0": fine, "judge:b#0": Ref({"pid": 4})}) == {"judge:a#0": {"pid": 3}, "judge:b#0": {"pid": 4}}
