"""Judge dispatch: every judge call of every step, from the landed rollout chunk to its results.

Each judge has at most ``limits.max_concurrent_calls`` calls in flight per replica; the rest wait
in order, across steps. A judge with ``replicas: R`` has R actors: each call goes to the
least-loaded live replica (fewest calls in flight, then fewest samples judged). A replica whose
actor dies (``RayActorError`` on a call) has every call in flight on it put back at the head of the
queue and re-issued at once to the live replicas (not masked, not counted as a timeout); Ray
restarts it (``faults.judge_restarts``) and a probe call says when it is back. When every replica
of a judge is lost for good, the probe's error ends the run. A call past its deadline (its clock
starts when it is issued, not when it is queued), or one its model server failed, is re-issued
once, then its items are masked; counted either way. A judge with a critique cache is sent only the
samples the cache has no judgment of.

``grm.orchestrator.scheduler`` owns the waiting: it hands this class the refs that became ready
(``handle``) and lets it time out calls (``timeouts``) after each wait.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from grm.engines.base import EngineError
from grm.judges.cost import JudgeCost
from grm.judges.types import Sample
from grm.orchestrator.handles import RayCalls
from grm.orchestrator.judge_cache import JudgeCache
from grm.orchestrator.live import StepProgress
from grm.orchestrator.roles import JudgeHandle
from grm.orchestrator.types import JudgeCall, Judged, Replica, StepWork

if TYPE_CHECKING:
    from ray import ObjectRef


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


class JudgeDispatch:
    def __init__(self, judges: list[JudgeHandle], ray: RayCalls, caches: dict[str, JudgeCache], progress: StepProgress) -> None:
        self.judges, self.ray, self.caches, self.progress = judges, ray, caches, progress
        self.waiting: dict[str, deque[Issued]] = {j.name: deque() for j in judges}
        """Per judge: calls held back by its concurrency cap, in the order they will be issued."""
        self.running: dict[ObjectRef[Judged], Issued] = {}
        """Every judge call in flight (of any step), by its Ray ref."""
        self.replicas = {j.name: [Replica(i) for i in range(len(j.replicas))] for j in judges}
        """Per judge: its actors' dispatch state (none for a local judge)."""
        self.probes: dict[ObjectRef[int], tuple[JudgeHandle, Replica]] = {}
        """Restarting replicas, by the ref of the probe call that returns once they are back."""

    def refs(self) -> list[ObjectRef]:
        """What a wait should also wake for: the calls in flight and the replicas' probes."""
        return [*self.running, *self.probes]

    def land(self, work: StepWork, c: int) -> None:
        """Rollout chunk ``c`` of ``work`` is in: every judge's call for it."""
        for judge in self.judges:
            self._call(work, c, judge)

    def handle(self, ref: ObjectRef) -> None:
        """``ref`` (one of ``refs()``) is ready: a call's results (kept, and the judge's next call
        issued; a dead replica's or failed server's call re-issued) or a probe's answer."""
        if ref in self.probes:
            self._probed(ref)
            return
        issued = self.running.pop(ref, None)
        if issued is None:  # dropped meanwhile (cancel_all)
            return
        try:
            results = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as e:
            self._replica_died(issued, e)
            return
        except self.ray.exceptions.RayTaskError as e:
            if not isinstance(getattr(e, "cause", None), EngineError):
                raise  # an error in the judge's own code: its traceback says more
            self._server_failed(issued, e.cause)
            return
        self._finish(issued.work, issued.call, results)
        self._issue(issued.judge)

    def cancel_all(self) -> None:
        """Cancel every call in flight and drop the waiting ones (the run is stopping)."""
        for ref in self.running:
            self.ray.cancel(ref)
        self.running.clear()
        for q in self.waiting.values():
            q.clear()

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

    def timeouts(self) -> None:
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
