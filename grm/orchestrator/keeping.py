"""What a run keeps when it ends before its last step: a stop signal writes a checkpoint of the
trained steps; a lost node or actor becomes one ``RunError`` naming the role, after a checkpoint
when the policy survived, with the command that resumes the run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from grm.data.prompts import PromptStream
from grm.orchestrator.anchors import AnchorStore
from grm.orchestrator.errors import RunError
from grm.orchestrator.health import NodeWatch, RoleLost, actor_lost
from grm.orchestrator.recorder import Recorder
from grm.orchestrator.roles import Roles
from grm.orchestrator.scheduler import Interrupted, Scheduler


class Keeper:
    def __init__(
        self,
        recorder: Recorder,
        scheduler: Scheduler,
        roles: Roles,
        watch: NodeWatch,
        stream: PromptStream,
        anchors: AnchorStore | None,
        keep: int,
    ) -> None:
        self.recorder, self.scheduler, self.roles, self.watch = recorder, scheduler, roles, watch
        self.stream, self.anchors, self.keep = stream, anchors, keep

    def checkpoint(self, step: int) -> None:
        untrained = self.scheduler.untrained_prompts()  # taken for steps not trained: given back
        anchors = None if self.anchors is None else self.anchors.state()
        self.recorder.checkpoint(step, self.roles.policy, self.stream, untrained, self.keep, anchors=anchors)

    @contextmanager
    def steps(self) -> Iterator[None]:
        """Around the step loop: an interrupt keeps what is trained; a lost role ends the run with
        grm's message; an error in a role's own code keeps its traceback."""
        import ray

        try:
            yield
        except Interrupted:  # a stop signal (grm.orchestrator.launch): keep what is trained
            done = len(self.recorder.metrics())
            self.scheduler.abandon()  # the policy's save then waits only for the call it is running
            if self.recorder.latest_checkpoint() != self.recorder.checkpoint_dir(done):
                print(f"\ninterrupted: writing a checkpoint at step {done}", flush=True)
                self.checkpoint(done)
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError, RoleLost) as e:
            # a lost node says more than the actor it took; a policy rank's failure, than rank 0's error
            lost = e if isinstance(e, RoleLost) else self.watch.lost() or self.roles.policy.diagnose(e)
            if lost is None and isinstance(e, ray.exceptions.RayActorError):
                lost = actor_lost(e, self.roles, self.watch.placement)
            if lost is None:  # an error in a role's own code: its traceback says more
                raise
            self.lost(lost)

    def lost(self, e: RoleLost) -> NoReturn:
        """A role is gone: checkpoint the trained steps if the policy survived and is not training
        the next one (its save would run after that training: step N's checkpoint would hold step
        N+1's weights, and a resume would train that batch twice); say how to resume."""
        done = len(self.recorder.metrics())
        if not e.policy_lost and self.scheduler.training:
            print(f"\n{e}: step {done + 1} was training, so no checkpoint of step {done} can be written now", flush=True)
        elif not e.policy_lost:
            print(f"\n{e}: writing a checkpoint at step {done}", flush=True)
            self.checkpoint(done)
        raise RunError(f"step {done + 1}: {e}; {self.recorder.how_to_resume()}") from None
