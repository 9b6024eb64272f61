"""The scheduler: what runs when. Rollouts are queued up to ``max_staleness`` steps ahead (async),
every landed rollout chunk is handed to every judge from one place (``_land``), judge calls past
their timeout are re-issued once and then masked, and the prompts taken but not yet trained on are
counted so a checkpoint can give them back.

Interrupts (Ctrl-C, SIGTERM) only set a flag; it is honoured while a step is still gathering its
rollouts and judgments (``Interrupted``), never once its training has been submitted, so a
checkpoint always matches the logged steps.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from grm.config.pipeline import PipelineSpec
from grm.data.prompts import PromptStream
from grm.orchestrator.placement import JudgeHandle, Roles
from grm.orchestrator.types import Group, JudgeCall, StepWork, rollouts_of


class Interrupted(Exception):
    """A stop was requested while a step was gathering its data; nothing of that step was trained."""


class Scheduler:
    def __init__(self, cfg: PipelineSpec, roles: Roles, stream: PromptStream, ray: Any) -> None:
        self.cfg, self.roles, self.stream, self.ray = cfg, roles, stream, ray
        self.queue: deque[StepWork] = deque()
        self.in_flight: StepWork | None = None
        self.next_submit = 0
        self.stop_requested = False
        self.ahead = cfg.schedule.max_staleness if cfg.schedule.mode == "async" else 0

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
        self.in_flight = None

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
        chunks = [
            self.roles.policy.rollout.remote(prompts[i : i + k], keys[i : i + k], a.group_size, seed)
            for i in range(0, len(prompts), k)
        ]
        return StepWork(step, prompts, chunks)

    def fill_ahead(self, step: int) -> None:
        """Queue the rollouts of the next ``max_staleness`` steps (async) behind this step's work."""
        while self.next_submit <= min(step + self.ahead, self.cfg.train.steps - 1):
            self.queue.append(self._submit(self.next_submit))
            self.next_submit += 1

    # ------------------------------------------------------------------ collecting a step
    def collect(self, work: StepWork, prepare: bool = True) -> list[Group]:
        """Wait for the step's rollout chunks, judging each as it lands; once all are in, queue the
        reference/values pass (it needs no rewards) and the rollouts ahead. Returns the judged groups."""
        ray = self.ray
        while not work.complete:
            if self.stop_requested:
                raise Interrupted()
            if prepare and work.prepared is None and len(work.landed) == len(work.chunks):
                self.prepare(work, rollouts_of([g for c in sorted(work.landed) for g in work.landed[c]]))
            pending = {ref: c for c, ref in enumerate(work.chunks) if c not in work.landed}
            calls = {c.pending: c for c in work.calls.values() if c.pending is not None}
            ready, _ = ray.wait([*pending, *calls], num_returns=1, timeout=5.0)
            for ref in ready:
                if ref in pending:
                    self._land(work, pending[ref], ref)
                else:
                    self._finish(work, calls[ref], ray.get(ref))
            self._timeouts(work)
        if prepare and work.prepared is None:
            self.prepare(work, rollouts_of(work.groups()))
        return work.groups()

    def more(self, work: StepWork, salt: int) -> list[Group]:
        """Judged groups of fresh prompts for this step (dynamic filtering's refill round ``salt``)."""
        extra = self._submit(work.step, salt=salt)
        work.extra_prompts += len(extra.prompts)
        return self.collect(extra, prepare=False)

    def prepare(self, work: StepWork, rollouts: list[Any]) -> None:
        """Queue the policy's batch pass and, on its own pool, the reference pass over that batch;
        then the next steps' rollouts, so they overlap this step's judging."""
        work.prepared = self.roles.policy.prepare.remote(rollouts)
        ref = self.roles.reference
        work.reference = ref.logprobs.remote(work.prepared) if ref is not None and ref is not self.roles.policy else None
        self.fill_ahead(work.step)

    def prepared(self, work: StepWork) -> tuple[Any, float]:
        """(batch with reference log-probs and values, seconds of those passes)."""
        batch, secs = self.ray.get(work.prepared)
        if work.reference is not None:
            ref_lp, ref_s = self.ray.get(work.reference)
            batch, secs = batch.with_fields(ref_logprobs=ref_lp), secs + ref_s
        return batch, secs

    def wait(self, ref: Any) -> Any:
        """``ray.get(ref)`` that meanwhile hands the chunks of queued (async) steps to the judges as
        they land, so judges work on step t+1 while step t trains."""
        while True:
            waiting = {r: (w, c) for w in self.queue for c, r in enumerate(w.chunks) if c not in w.landed}
            ready, _ = self.ray.wait([ref, *waiting], num_returns=1, timeout=5.0)
            for r in ready:
                if r in waiting:
                    self._land(*waiting[r], r)
            if any(r == ref for r in ready):
                return self.ray.get(ref)

    # ------------------------------------------------------------------ judges: one fan-out
    def _land(self, work: StepWork, c: int, ref: Any) -> None:
        """Rollout chunk ``c`` is in: keep its groups and hand them to every judge."""
        work.landed[c], secs = self.ray.get(ref)
        work.rollout_s += secs
        for judge in self.roles.judges:
            self._call(work, c, judge)
        if work.first_judge_start is None:
            work.first_judge_start = time.perf_counter()

    def _call(self, work: StepWork, c: int, judge: JudgeHandle, retried: bool = False) -> None:
        call = JudgeCall(judge.name, c, time.perf_counter(), retried=retried)
        work.calls[(c, judge.name)] = call
        out = judge.submit([g.samples() for g in work.landed[c]])
        if judge.local is not None:
            self._finish(work, call, out)
        else:
            call.pending = out

    def _finish(self, work: StepWork, call: JudgeCall, results: Any) -> None:
        call.pending, call.results = None, results
        work.judge_s[call.judge] = work.judge_s.get(call.judge, 0.0) + time.perf_counter() - call.submitted_at
        work.last_judge_end = time.perf_counter()

    def _timeouts(self, work: StepWork) -> None:
        """A judge call past its timeout is cancelled and re-issued once, then its items are masked."""
        limit = self.cfg.faults.judge_timeout_s
        for call in list(work.calls.values()):
            if call.pending is None or time.perf_counter() - call.submitted_at < limit:
                continue
            self.ray.cancel(call.pending, force=False)
            groups = work.landed[call.chunk]
            if call.retried:
                print(
                    f"judge '{call.judge}' timed out twice on step {work.step + 1} chunk {call.chunk}: masking "
                    f"{sum(len(g.rollouts) for g in groups)} samples"
                )
                call.pending, call.results = None, [[None] * len(g.rollouts) for g in groups]
                continue
            judge = next(j for j in self.roles.judges if j.name == call.judge)
            self._call(work, call.chunk, judge, retried=True)
