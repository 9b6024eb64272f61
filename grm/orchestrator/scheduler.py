"""The scheduler: what runs when. Rollouts are queued up to ``max_staleness`` steps ahead (async),
every landed rollout chunk is handed to every judge from one place (``_land``), each judge has at
most ``limits.max_concurrent_calls`` calls in flight (the rest wait in order, across steps), judge
calls past their deadline are re-issued once and then masked, and the prompts taken but not yet
trained on are counted so a checkpoint can give them back.

A judge with ``replicas: R`` has R actors: each call goes to the least-loaded live replica (fewest
calls in flight, then fewest samples judged), the cap applying per replica. A replica whose actor
dies (``RayActorError`` on a call) has every call in flight on it put back at the head of the queue
and re-issued at once to the live replicas (not masked, not counted as a timeout); Ray restarts it
(``faults.judge_restarts``) and a probe call says when it is back. When every replica of a judge is
lost for good, the probe's error ends the run (the driver names the role, ``judge:NAME#i``).

A call's deadline is the judge spec's ``limits.deadline_s`` if set, else derived from the judge's
sampling and the call's size (``grm.judges.limits``); its clock starts when the call is issued, not
when it is queued.

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
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from grm.config.pipeline import PipelineSpec
from grm.data.prompts import PromptStream
from grm.engines.base import EngineError
from grm.judges.cost import JudgeCost
from grm.judges.types import Sample
from grm.orchestrator.anchors import AnchorStore, attach
from grm.orchestrator.handles import RayCalls
from grm.orchestrator.health import NodeWatch
from grm.orchestrator.judge_cache import JudgeCache
from grm.orchestrator.live import NoProgress, StepProgress
from grm.orchestrator.roles import JudgeHandle, Roles
from grm.orchestrator.types import Group, JudgeCall, Judged, Replica, Rollout, StepWork, rollouts_of

if TYPE_CHECKING:
    from ray import ObjectRef

T = TypeVar("T")


class Interrupted(Exception):
    """A stop was requested while a step was gathering its data; nothing of that step was trained."""


class Issued(NamedTuple):
    """A judge call of some step's work, waiting for a slot or in flight."""

    work: StepWork
    call: JudgeCall
    judge: JudgeHandle


def add_usage(into: dict[str, int], usage: dict[str, int]) -> None:
    """Add a server's ``usage`` counters into ``into`` (in place)."""
    for k, v in usage.items():
        into[k] = into.get(k, 0) + v


def least_loaded(replicas: list[Replica], in_flight: list[int], cap: int) -> Replica | None:
    """The live replica with the fewest calls in flight (``in_flight[index]``), ties going to the
    one that judged the fewest samples, then the lowest index; None if every live replica has
    ``cap`` calls in flight or none is live."""
    free = [r for r in replicas if r.state == "live" and in_flight[r.index] < cap]
    return min(free, key=lambda r: (in_flight[r.index], r.items, r.index), default=None)


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
        self.progress: StepProgress = progress or NoProgress()
        """Told of every landed chunk and finished judge call (the live display)."""
        self.anchors = anchors
        """Earlier steps' greedy responses, for pairwise judges with ``groups.anchor: previous``."""
        self.queue: deque[StepWork] = deque()
        self.in_flight: StepWork | None = None
        self.training = False
        """A training call was submitted for the step in flight (``wait``) and the step is not yet
        logged (``trained``): the policy's weights are then ahead of every logged step."""
        self.next_submit = 0
        self.stop_requested = False
        self.ahead = cfg.schedule.max_staleness if cfg.schedule.mode == "async" else 0
        self.waiting: dict[str, deque[Issued]] = {j.name: deque() for j in roles.judges}
        """Per judge: calls held back by its concurrency cap, in the order they will be issued."""
        self.running: dict[ObjectRef[Judged], Issued] = {}
        """Every judge call in flight (of any step), by its Ray ref."""
        self.replicas = {j.name: [Replica(i) for i in range(len(j.replicas))] for j in roles.judges}
        """Per judge: its actors' dispatch state (none for a local judge)."""
        self.probes: dict[ObjectRef[int], tuple[JudgeHandle, Replica]] = {}
        """Restarting replicas, by the ref of the probe call that returns once they are back."""

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
        refs = [r for w in works for c, r in enumerate(w.chunks) if c not in w.landed]
        refs += list(self.running)
        for ref in refs:
            self.ray.cancel(ref)
        self.running.clear()
        for q in self.waiting.values():
            q.clear()

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
        # an env: pipeline's episodes run beside the policy's other calls, sharing its engine's turns
        rollout = self.roles.policy.rollout if self.cfg.env is None else self.roles.policy.episodes
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
        waits = [*landing, *self.running, *self.probes, *([target] if target is not None else [])]
        ready, _ = self.ray.wait(waits, num_returns=1, timeout=timeout)
        hit = False
        for r in ready:
            if target is not None and r == target:
                hit = True
            elif r in landing:
                self._land(*landing[r], r)
            elif r in self.running:
                issued = self.running.pop(r)
                try:
                    results = self.ray.get(r)
                except self.ray.exceptions.RayActorError as e:
                    self._replica_died(issued, e)
                    continue
                except self.ray.exceptions.RayTaskError as e:
                    if not isinstance(getattr(e, "cause", None), EngineError):
                        raise  # an error in the judge's own code: its traceback says more
                    self._server_failed(issued, e.cause)
                    continue
                self._finish(issued.work, issued.call, results)
                self._issue(issued.judge)
            elif r in self.probes:
                self._probed(r)
        self._timeouts()
        return hit

    # ------------------------------------------------------------------ judges: one fan-out
    def _land(self, work: StepWork, c: int, ref: ObjectRef[tuple[list[Group], float]]) -> None:
        """Rollout chunk ``c`` is in: keep its groups and hand them to every judge."""
        work.landed[c], secs = self.ray.get(ref)
        work.rollout_s += secs
        if self.anchors is not None:
            attach(self.anchors, work.step + 1, work.landed[c])
        self.progress.landed(work.step, sum(len(g.rollouts) for g in work.landed[c]))
        for judge in self.roles.judges:
            self._call(work, c, judge)
        if work.first_judge_start is None:
            work.first_judge_start = time.perf_counter()

    def _call(self, work: StepWork, c: int, judge: JudgeHandle, retried: bool = False) -> None:
        """Judge chunk ``c``: a local judge at once; an actor judge when its concurrency cap allows,
        after the calls already waiting (a re-issue goes first: it takes its timed-out call's slot).
        A cached judge is sent only the samples its cache has no judgment of (none: no call)."""
        groups = work.landed[c]
        cache = self.caches.get(judge.name)
        plan = cache.plan([g.samples() for g in groups]) if cache is not None else None
        if plan is not None and not retried:  # a re-issue is the same samples: counted once
            work.cache_hits[judge.name] = work.cache_hits.get(judge.name, 0) + plan.hits
            work.cache_misses[judge.name] = work.cache_misses.get(judge.name, 0) + sum(len(m) for m in plan.missing)
            work.cache_saved_s[judge.name] = work.cache_saved_s.get(judge.name, 0.0) + plan.saved_s
        sizes = [len(m) for m in plan.missing] if plan is not None else [len(g.rollouts) for g in groups]
        deadline = judge.limits.deadline(judge.limits.samples_in(sizes))
        call = JudgeCall(judge.name, c, deadline, retried=retried, plan=plan)
        work.calls[(c, judge.name)] = call
        if plan is not None and plan.complete:
            call.submitted_at = time.perf_counter()
            self._finish(work, call, ([], JudgeCost()))
            return
        if judge.local is not None:
            call.submitted_at = time.perf_counter()
            self._finish(work, call, judge.submit(self._sent(work, call)))
            return
        waiting = self.waiting[judge.name]
        (waiting.appendleft if retried else waiting.append)(Issued(work, call, judge))
        self._issue(judge)

    def _issue(self, judge: JudgeHandle) -> None:
        """Issue the judge's waiting calls, each to its least-loaded live replica, while one has
        fewer than the cap in flight."""
        waiting, replicas = self.waiting[judge.name], self.replicas[judge.name]
        in_flight = [0] * len(replicas)
        for i in self.running.values():
            if i.judge is judge:
                in_flight[i.call.replica] += 1  # type: ignore[index]
        while waiting and (rep := least_loaded(replicas, in_flight, judge.limits.max_concurrent_calls)) is not None:
            issued = waiting.popleft()
            work, call = issued.work, issued.call
            call.submitted_at, call.replica = time.perf_counter(), rep.index
            call.pending = judge.submit(self._sent(work, call), rep.index)
            self.running[call.pending] = issued
            in_flight[rep.index] += 1

    @staticmethod
    def _sent(work: StepWork, call: JudgeCall) -> list[list[Sample]]:
        """What a call sends: its chunk's groups, or only what the critique cache lacks."""
        if call.plan is not None:
            return call.plan.missing
        return [g.samples() for g in work.landed[call.chunk]]

    def _finish(self, work: StepWork, call: JudgeCall, judged: Judged) -> None:
        assert call.submitted_at is not None
        secs = time.perf_counter() - call.submitted_at
        results, cost = judged
        if call.plan is not None:  # the cached judgments back in place, the new ones kept
            self.caches[call.judge].store(call.plan, results)
            results = call.plan.merge(results)
        call.pending, call.results = None, results
        work.judge_s[call.judge] = work.judge_s.get(call.judge, 0.0) + secs
        work.judge_cost.setdefault(call.judge, JudgeCost()).add(cost)
        n = sum(len(g.rollouts) for g in work.landed[call.chunk])
        self.progress.judged(work.step, call.judge, call.replica, n)
        if call.replica is not None:  # an actor judge: per-replica counts
            key = f"{call.judge}/{call.replica}"
            work.replica_items[key] = work.replica_items.get(key, 0) + n
            work.replica_s[key] = work.replica_s.get(key, 0.0) + secs
            if cost.usage:
                add_usage(work.replica_usage.setdefault(key, {}), cost.usage)
            self.replicas[call.judge][call.replica].items += n
        work.last_judge_end = time.perf_counter()

    # ------------------------------------------------------------------ judges: replicas that die
    def _replica_died(self, issued: Issued, error: Exception) -> None:
        """``issued`` failed because its replica's actor died: every call in flight on that replica
        goes back to the head of the judge's queue, in issue order, and is re-issued at once to the
        live replicas (its deadline restarts then); the replica is probed until Ray restarts it."""
        judge, index = issued.judge, issued.call.replica
        assert index is not None
        rep = self.replicas[judge.name][index]
        back = [issued] + [
            self.running.pop(ref) for ref, i in list(self.running.items()) if i.judge is judge and i.call.replica == index
        ]
        for i in back:
            i.call.pending = None
        self.waiting[judge.name].extendleft(sorted(back, key=lambda i: i.call.submitted_at or 0.0, reverse=True))
        rep.state, rep.probe = "restarting", judge.probe(index)
        self.probes[rep.probe] = (judge, rep)
        others = any(r.state == "live" for r in self.replicas[judge.name])
        print(
            f"judge '{judge.name}' replica {index} died ({type(error).__name__}): re-issuing its {len(back)} call(s)"
            + (" to the other replicas" if others else " once Ray has restarted it"),
            flush=True,
        )
        self._issue(judge)

    def _probed(self, ref: ObjectRef[int]) -> None:
        """A restarting replica's probe returned: it is back (and takes calls), or lost for good; when
        every replica of the judge is lost, the probe's ``RayActorError`` ends the run."""
        judge, rep = self.probes.pop(ref)
        rep.probe = None
        try:
            self.ray.get(ref)
        except self.ray.exceptions.RayActorError:
            rep.state = "lost"
            left = [r.index for r in self.replicas[judge.name] if r.state != "lost"]
            print(f"judge '{judge.name}' replica {rep.index} is lost (faults.judge_restarts spent); replicas left: {left}")
            if not left:
                raise
            return
        rep.state = "live"
        print(f"judge '{judge.name}' replica {rep.index} is back", flush=True)
        self._issue(judge)

    def _server_failed(self, issued: Issued, error: Exception) -> None:
        """``issued`` failed on its judge's model server (after the engine's own retries, and a
        launched server's restart): re-issued once, then its items are masked; counted either way."""
        work, call, judge = issued
        work.judge_errors[call.judge] = work.judge_errors.get(call.judge, 0) + 1
        n = sum(len(g.rollouts) for g in work.landed[call.chunk])
        reason = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
        if call.retried:
            print(f"judge '{call.judge}' failed twice on step {work.step + 1} chunk {call.chunk}: masking {n} samples ({reason})")
            call.pending, call.results = None, [[None] * len(g.rollouts) for g in work.landed[call.chunk]]
        else:
            print(f"judge '{call.judge}' failed on step {work.step + 1} chunk {call.chunk}: re-issuing it ({reason})")
            self._call(work, call.chunk, judge, retried=True)
        self._issue(judge)

    def _timeouts(self) -> None:
        """A judge call (of any step) past its deadline is cancelled and re-issued once, then its
        items are masked. Ray cannot stop an actor call already running: a re-issue queues behind it."""
        now = time.perf_counter()
        for ref, (work, call, judge) in list(self.running.items()):
            assert call.submitted_at is not None
            if now - call.submitted_at < call.deadline_s:
                continue
            self.ray.cancel(ref, force=False)
            del self.running[ref]
            work.judge_timeouts[call.judge] = work.judge_timeouts.get(call.judge, 0) + 1
            groups = work.landed[call.chunk]
            if call.retried:
                print(
                    f"judge '{call.judge}' timed out twice on step {work.step + 1} chunk {call.chunk}: masking "
                    f"{sum(len(g.rollouts) for g in groups)} samples"
                )
                call.pending, call.results = None, [[None] * len(g.rollouts) for g in groups]
            else:
                print(
                    f"judge '{call.judge}' passed its {call.deadline_s:.0f} s deadline on step {work.step + 1} "
                    f"chunk {call.chunk}: re-issuing it"
                )
                self._call(work, call.chunk, judge, retried=True)
            self._issue(judge)
