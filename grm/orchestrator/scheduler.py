"""The scheduler: what runs when. Rollouts are queued up to ``max_staleness`` steps ahead (async),
every landed rollout chunk is handed to every judge from one place (``_land``, through
``grm.orchestrator.judge_dispatch``: concurrency caps, replicas, deadlines, failed calls), and the
prompts taken but not yet trained on are counted so a checkpoint can give them back. Every wait that
lands chunks or judge calls is here (``_advance``): rollout chunks, judge calls, replicas' probes and
the call a step waits for.
When every replica of a judge is lost for good, the probe's error ends the run (the driver names the
role, ``judge:NAME#i``). A call's deadline is the judge spec's ``limits.deadline_s`` if set, else
derived from the judge's sampling and the call's size (``grm.judges.limits``).

Interrupts (Ctrl-C, SIGTERM) only set a flag; it is honoured while a step is still gathering its
rollouts and judgments (``Interrupted``, within a second), never once its training has been
submitted, so a checkpoint always matches the logged steps. ``abandon`` then cancels the rollouts
queued ahead and the judge calls; a rollout the policy is running ends at its next token (the hf
engine checks Ray's cancel flag), so the checkpoint waits at most for a batch pass or a training.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from grm.config.pipeline import PipelineSpec
from grm.data.prompts import PromptStream
from grm.judges.cost import JudgeCost
from grm.orchestrator.anchors import AnchorStore, attach
from grm.orchestrator.handles import RayCalls
from grm.orchestrator.health import NodeWatch
from grm.orchestrator.judge_cache import JudgeCache
from grm.orchestrator.judge_dispatch import JudgeDispatch, add_usage
from grm.orchestrator.live import NoProgress, StepProgress
from grm.orchestrator.roles import Roles
from grm.orchestrator.types import Group, Rollout, StepWork, rollouts_of

if TYPE_CHECKING:
    from ray import ObjectRef

T = TypeVar("T")


def early_batch_pass(cfg: PipelineSpec) -> bool:
    """Whether a step queues its batch pass as soon as its rollouts are in, beside the judges (the
    pass needs no rewards). Not when phases run alone (sync mode, ``schedule.phases_alone``: each
    phase takes the other pools' cores, so side by side they would oversubscribe them), nor with
    dynamic filtering, which may still change the batch: then the pass is queued once the groups
    are final, so no pass is thrown away."""
    return not cfg.schedule.phases_alone and not cfg.algorithm.dynamic_filtering


class Interrupted(Exception):
    """A stop was requested while a step was gathering its data; nothing of that step was trained."""


class Scheduler:
    def __init__(
        self,
        cfg: PipelineSpec,
        roles: Roles,
        stream: PromptStream,
        ray: RayCalls,
        watch: NodeWatch | None = None,
        progress: StepProgress | None = None,
        anchors: AnchorStore | None = None,
        caches: dict[str, JudgeCache] | None = None,
    ) -> None:
        self.cfg, self.roles, self.stream, self.ray = cfg, roles, stream, ray
        self.caches = caches or {}
        """The critique caches of the judges that have one (``grm.orchestrator.judge_cache``)."""
        self.watch = watch
        self.anchors = anchors
        """Earlier steps' greedy responses, for pairwise judges with ``groups.anchor: previous``."""
        self.queue: deque[StepWork] = deque()
        self.in_flight: StepWork | None = None
        self.training = False
        """A training call was submitted for the step in flight (``wait``) and the step is not yet
        logged (``trained``): the policy's weights are then ahead of every logged step."""
        self.next_submit = 0
        self.stop_requested = False
        self.ahead = cfg.schedule.ahead
        self.dispatch = JudgeDispatch(roles.judges, ray, self.caches, progress or NoProgress())
        """Every judge call, from a landed chunk to its results (``grm.orchestrator.judge_dispatch``)."""

    @property
    def progress(self) -> StepProgress:
        """Told of every landed chunk and finished judge call (the live display); the dispatch's,
        so the two can never point at different displays."""
        return self.dispatch.progress

    @progress.setter
    def progress(self, display: StepProgress) -> None:
        self.dispatch.progress = display

    # ------------------------------------------------------------------ prompts and rollouts
    def take(self, step: int) -> StepWork:
        """This step's work: submitted now, or earlier by ``fill_ahead``."""
        if self.next_submit <= step:
            self.queue.append(self._submit(step))
            self.next_submit = step + 1
        self.in_flight = self.queue.popleft()
        return self.in_flight

    def trained(self) -> None:
        """The step in flight is trained and logged: its prompts are spent."""
        self.in_flight, self.training = None, False

    def request_stop(self) -> None:
        """A stop signal: the step in flight is abandoned at the next point that allows it (see the
        module's docstring)."""
        self.stop_requested = True

    def abandon(self) -> None:
        """Cancel the untrained steps' rollout chunks still queued on the policy, and every judge
        call, so a checkpoint's save waits only for the call the policy is running. Their prompts
        stay counted in ``untrained_prompts`` (the checkpoint gives them back). Batch passes are left
        to finish: with ZeRO-3 they are collective, and cancelling rank 0's alone (the one ref a
        group hands out) would leave the other ranks waiting for it."""
        works = [*self.queue, *([self.in_flight] if self.in_flight is not None else [])]
        for ref in [r for w in works for c, r in enumerate(w.chunks) if c not in w.landed]:
            self.ray.cancel(ref)
        self.dispatch.cancel_all()

    def untrained_prompts(self) -> int:
        """Prompts taken from the stream whose step has not been trained (queued or in flight)."""
        works = list(self.queue) + ([self.in_flight] if self.in_flight is not None else [])
        return sum(len(w.prompts) + w.extra_prompts for w in works)

    def _submit(self, step: int, salt: int = 0) -> StepWork:
        a = self.cfg.algorithm
        k = self.cfg.schedule.stream_prompts or a.prompts_per_step
        prompts = self.stream.take(a.prompts_per_step)
        seed = self.cfg.seed * 1_000_003 + step * 101 + salt
        keys = [f"s{step}r{salt}g{i}" for i in range(len(prompts))]
        # an env: pipeline's episodes run beside the policy's other calls, sharing its engine's turns;
        # interruptible rollouts (a served engine) beside training, a sync pausing them
        policy = self.roles.policy
        rollout = policy.rollout_beside if self.cfg.schedule.interruptible else policy.rollout
        rollout = policy.episodes if self.cfg.env is not None else rollout
        chunks = [rollout.remote(prompts[i : i + k], keys[i : i + k], a.group_size, seed) for i in range(0, len(prompts), k)]
        per_replica = [f"{j.name}/{i}" for j in self.roles.judges for i in range(len(j.replicas))]
        return StepWork(
            step, prompts, chunks, replica_items=dict.fromkeys(per_replica, 0), replica_s=dict.fromkeys(per_replica, 0.0)
        )

    def fill_ahead(self, step: int) -> None:
        """Queue the rollouts of the next ``max_staleness`` steps (async) behind this step's work:
        they are generated and judged while this step trains."""
        while self.next_submit <= min(step + self.ahead, self.cfg.train.steps - 1):
            self.queue.append(self._submit(self.next_submit))
            self.next_submit += 1

    # ------------------------------------------------------------------ collecting a step
    def rollouts(self, work: StepWork) -> list[Rollout]:
        """Wait for the step's rollout chunks, each handed to every judge as it lands (judge calls
        finish meanwhile); returns the rollouts in chunk order."""
        self._until(work, lambda: len(work.landed) == len(work.chunks))
        return rollouts_of([g for c in sorted(work.landed) for g in work.landed[c]])

    def collect(self, work: StepWork) -> list[Group]:
        """Wait for the step's rollouts and every judge's results; returns the judged groups."""
        self._until(work, lambda: work.complete)
        return work.groups()

    def _until(self, work: StepWork, done: Callable[[], bool]) -> None:
        while not done():
            if self.stop_requested:
                raise Interrupted()
            # short waits: a stop signal is honoured within a second (it only sets a flag)
            self._advance({ref: (work, c) for c, ref in enumerate(work.chunks) if c not in work.landed}, timeout=1.0)
            if self.watch is not None:
                self.watch.check()

    def more(self, work: StepWork, salt: int) -> list[Group]:
        """Judged groups of fresh prompts for this step (dynamic filtering's refill round ``salt``)."""
        extra = self._submit(work.step, salt=salt)
        work.extra_prompts += len(extra.prompts)
        groups = self.collect(extra)
        for name, n in extra.judge_timeouts.items():
            work.judge_timeouts[name] = work.judge_timeouts.get(name, 0) + n
        for name, n in extra.judge_errors.items():
            work.judge_errors[name] = work.judge_errors.get(name, 0) + n
        for name, cost in extra.judge_cost.items():
            work.judge_cost.setdefault(name, JudgeCost()).add(cost)
        for key, n in extra.replica_items.items():
            work.replica_items[key] = work.replica_items.get(key, 0) + n
            work.replica_s[key] = work.replica_s.get(key, 0.0) + extra.replica_s[key]
        for key, usage in extra.replica_usage.items():
            add_usage(work.replica_usage.setdefault(key, {}), usage)
        return groups

    def prepare(self, work: StepWork, rollouts: Sequence[Rollout]) -> None:
        """Queue the policy's batch pass over ``rollouts`` (the rows the step trains, in order) and,
        on its own pool, the reference pass over that batch; a stopping run queues none."""
        if self.stop_requested:
            raise Interrupted()
        assert work.prepared is None, "one batch pass per step"
        work.prepared = self.roles.policy.prepare.remote(rollouts)
        ref = self.roles.reference
        work.reference = ref.logprobs.remote(work.prepared) if ref is not None else None

    def prepared(self, work: StepWork) -> None:
        """Wait for the batch pass (and the remote reference's pass) without fetching them: their
        tensors go from the actors' object store to the training call, never through this process.
        The last point where a stop is honoured before the step trains: a step whose rollouts and
        judgments all landed within one wait would otherwise train (and, as the last step, end the
        run) after the signal."""
        if self.stop_requested:  # before waiting: nothing of it will be trained
            raise Interrupted()
        assert work.prepared is not None, "prepared() before prepare()"
        for ref in (work.prepared, work.reference):
            if ref is None:
                continue
            if self.watch is not None:
                self.watch.wait(ref)  # a reference on a judge's pool: its node may go
            else:
                self.ray.wait([ref], num_returns=1, fetch_local=False)
        if self.stop_requested:
            raise Interrupted()

    def wait(self, ref: ObjectRef[T], droppable: bool = False) -> T:
        """``ray.get(ref)`` of a training call that meanwhile hands the chunks of queued (async) steps
        to the judges as they land and keeps the judges' calls flowing, so judges work on step t+1
        while step t trains; a live display is told the micro-batches trained, once a second.
        ``droppable``: a call nothing depends on (the held-out check's answers), cancelled by a stop,
        which then ends the wait within a second (``Interrupted``)."""
        progress = self.roles.policy.train_progress if self.progress.wants_training and not droppable else None
        self.training = self.training or not droppable
        while True:
            landing = {r: (w, c) for w in self.queue for c, r in enumerate(w.chunks) if c not in w.landed}
            if self._advance(landing, ref, timeout=1.0 if progress is not None or droppable else 5.0):
                return self.ray.get(ref)
            if droppable and self.stop_requested:
                self.ray.cancel(ref)
                raise Interrupted()
            if progress is not None:
                self.progress.training(*self.ray.get(progress.remote()))

    def _advance(
        self, landing: dict[ObjectRef, tuple[StepWork, int]], target: ObjectRef | None = None, timeout: float = 5.0
    ) -> bool:
        """Wait (up to ``timeout`` s) for a rollout chunk of ``landing``, any judge call in flight, a replica's
        probe or ``target``; land or finish what is ready, then time out judge calls past their
        deadline. True once ``target`` is ready."""
        waits = [*landing, *self.dispatch.refs(), *([target] if target is not None else [])]
        ready, _ = self.ray.wait(waits, num_returns=1, timeout=timeout)
        hit = False
        for r in ready:
            if target is not None and r == target:
                hit = True
            elif r in landing:
                self._land(*landing[r], r)
            else:
                self.dispatch.handle(r)
        self.dispatch.timeouts()
        return hit

    def _land(self, work: StepWork, c: int, ref: ObjectRef[tuple[list[Group], float]]) -> None:
        """Rollout chunk ``c`` is in: keep its groups and hand them to every judge."""
        work.landed[c], secs = self.ray.get(ref)
        work.rollout_s += secs
        if self.anchors is not None:
            attach(self.anchors, work.step + 1, work.landed[c])
        self.progress.landed(work.step, sum(len(g.rollouts) for g in work.landed[c]))
        self.dispatch.land(work, c)
        if work.first_judge_start is None:
            work.first_judge_start = time.perf_counter()
