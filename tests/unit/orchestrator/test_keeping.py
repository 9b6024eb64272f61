"""What a run keeps when it ends early (``grm.orchestrator.keeping.Keeper``), with stand-ins for the
recorder, scheduler and roles: the decisions only (the real paths run in test_stop.py and
test_rank_failure.py)."""

from types import SimpleNamespace

import pytest

from grm.orchestrator.errors import RunError
from grm.orchestrator.health import RoleLost
from grm.orchestrator.keeping import Keeper
from grm.orchestrator.scheduler import Interrupted


class Recorder:
    def __init__(self, logged: int, latest: int | None = None) -> None:
        self.logged, self.latest, self.saved = logged, latest, []

    def metrics(self):
        return [{}] * self.logged

    def checkpoint(self, step, policy, stream, untrained, keep, anchors=None):
        self.saved.append((step, untrained, keep))
        self.latest = step

    def latest_checkpoint(self):
        return self.latest

    def checkpoint_dir(self, step):
        return step

    def how_to_resume(self):
        return f"resume from step-{self.latest}"


class Scheduler:
    def __init__(self, training: bool = False) -> None:
        self.training, self.abandoned = training, False

    def untrained_prompts(self):
        return 3

    def abandon(self):
        self.abandoned = True


def keeper(recorder, scheduler):
    roles = SimpleNamespace(policy=SimpleNamespace(diagnose=lambda e: None))
    return Keeper(recorder, scheduler, roles, SimpleNamespace(lost=lambda: None, placement={}), None, None, keep=2)


def test_a_lost_judge_between_steps_checkpoints_the_trained_steps():
    rec = Recorder(logged=4, latest=2)
    with pytest.raises(RunError, match=r"step 5: .*judge gone.*resume from step-4"):
        with keeper(rec, Scheduler()).steps():
            raise RoleLost(["judge:x"], "judge gone", policy_lost=False)
    assert rec.saved == [(4, 3, 2)]


def test_a_lost_judge_while_the_policy_trains_writes_no_mislabelled_checkpoint(capsys):
    rec = Recorder(logged=4, latest=2)
    with pytest.raises(RunError, match="resume from step-2"):
        with keeper(rec, Scheduler(training=True)).steps():
            raise RoleLost(["judge:x"], "judge gone", policy_lost=False)
    assert rec.saved == [] and "step 5 was training, so no checkpoint of step 4" in capsys.readouterr().out


def test_a_lost_policy_writes_nothing():
    rec = Recorder(logged=4, latest=2)
    with pytest.raises(RunError, match="resume from step-2"):
        with keeper(rec, Scheduler()).steps():
            raise RoleLost(["policy"], "node gone", policy_lost=True)
    assert rec.saved == []


def test_a_stop_abandons_the_queued_work_and_checkpoints_once():
    rec, sched = Recorder(logged=3, latest=2), Scheduler()
    with pytest.raises(Interrupted):
        with keeper(rec, sched).steps():
            raise Interrupted()
    assert sched.abandoned and rec.saved == [(3, 3, 2)]
    with pytest.raises(Interrupted):  # the step-3 checkpoint exists already: not written again
        with keeper(rec, Scheduler()).steps():
            raise Interrupted()
    assert rec.saved == [(3, 3, 2)]


def test_an_error_in_a_roles_own_code_keeps_its_traceback():
    with pytest.raises(ValueError, match="a bug"):
        with keeper(Recorder(logged=1), Scheduler()).steps():
            raise ValueError("a bug")
