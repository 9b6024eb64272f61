"""``grm run``: the step loop. One step reads like the data flow:

    rollout (policy pool) -> judges (their pools, each chunk as it lands) -> rewards [-> filtering]
    -> batch pass: reference log-probs (+ critic values) -> advantages -> train -> weight sync

Each remote call is on a line of its own in ``run``; what a step made is gathered in one
``StepOutcome``, which the recorder turns into the step's metrics line.

What runs when is the scheduler's; where each role runs, roles' and pools' (the policy may be a worker
group of N ranks, the same handle); what is written, the recorder's; the math, the algorithm's."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

from grm.config.resolve import LoadedPipeline
from grm.data.prompts import prompt_stream
from grm.orchestrator.anchors import remember, store_for
from grm.orchestrator.canary import Canaries
from grm.orchestrator.filtering import filter_step
from grm.orchestrator.health import NodeWatch
from grm.orchestrator.heldout import HeldoutCheck
from grm.orchestrator.judge_cache import open_caches
from grm.orchestrator.judge_prompts import judge_training_prompts
from grm.orchestrator.keeping import Keeper
from grm.orchestrator.live import RunDisplay
from grm.orchestrator.recorder import Recorder
from grm.orchestrator.rewards import reward_groups
from grm.orchestrator.roles import place_roles
from grm.orchestrator.scheduler import Interrupted, Scheduler, early_batch_pass
from grm.orchestrator.step_rows import check_masked_fraction, sample_rows, step_metrics
from grm.orchestrator.types import AdvantagePlan, Group, StepOutcome, rollouts_of
from grm.process import peak_rss_mb


class Driver:
    def __init__(self, loaded: LoadedPipeline, recorder: Recorder, address: str | None, live: bool = False) -> None:
        import ray

        self.cfg, self.recorder, self.ray = loaded.spec, recorder, ray
        made = judge_training_prompts(self.cfg.data) if self.cfg.data.judge_prompts else None
        self.stream = prompt_stream(self.cfg, [j.spec for j in loaded.judges], made)  # a bad row fails before any actor
        self.canaries = Canaries.load(loaded)  # labelled sets read now: a bad file fails before Ray starts
        self.heldout = HeldoutCheck.load(loaded, recorder.path)  # its prompts too
        self.roles = place_roles(loaded, address)
        self.placement = self.roles.placement()
        recorder.write_placement(self.placement)
        self.watch = NodeWatch(ray, self.placement)
        self.anchors = store_for(self.cfg, [j.spec for j in loaded.judges])  # groups.anchor: previous
        self.display = RunDisplay.for_run(self.cfg, {j.name: len(j.replicas) for j in self.roles.judges}, live)
        caches = open_caches([(j.spec, j.role.cache) for j in loaded.judges], recorder.path)
        self.scheduler = Scheduler(self.cfg, self.roles, self.stream, ray, self.watch, self.display, self.anchors, caches)
        self.keeper = Keeper(
            recorder, self.scheduler, self.roles, self.watch, self.stream, self.anchors, self.cfg.checkpoint.keep
        )
        self.weights = {j.name: j.weight for j in self.roles.judges}
        self.required = {j.name: j.required for j in self.roles.judges}
        self.start_step = 0
        self.version = 0
        """The policy version: a fresh rollout engine's is 0; a resume's and each sync's say what it is."""
        self.early_pass = early_batch_pass(self.cfg)

    def resume(self) -> None:
        state = self.recorder.resume_state(self.roles.policy)
        self.stream.restore(state["stream"])
        if self.anchors is not None and state.get("anchors") is not None:
            self.anchors.restore(state["anchors"])
        self.start_step, self.version = state["step"], state["policy_version"]
        self.canaries.restore(self.recorder.metrics())

    def run(self) -> Path:
        cfg, ray, policy, keeper, show = self.cfg, self.ray, self.roles.policy, self.keeper, self.display
        show.start()
        with keeper.steps():
            try:
                self.heldout_reading(self.start_step)  # the initial policy's (a resume's: when due and not yet read)
                t_prev = time.perf_counter()
                for step in range(self.start_step, cfg.train.steps):
                    if self.scheduler.stop_requested:
                        raise Interrupted()
                    show.begin(step)
                    s = StepOutcome(step, self.scheduler.take(step), self.version)  # rollouts: queued now, or ahead (async)
                    if cfg.env is not None:  # async: the next steps' episodes start beside this step's slow ones
                        self.scheduler.fill_ahead(step)
                    rollouts = self.scheduler.rollouts(s.work)  # each chunk goes to every judge as it lands
                    if self.early_pass:
                        self.scheduler.prepare(s.work, rollouts)  # batch pass, beside the judges
                    self.scheduler.fill_ahead(step)  # async: the next steps' rollouts, behind this step's work
                    s.groups = self.scheduler.collect(s.work)  # judges
                    s.reward_stats = self.rewards(s.groups)  # rewards
                    if cfg.algorithm.dynamic_filtering:  # uninformative groups out, judged groups of fresh prompts in
                        filter_step(s, cfg.algorithm.prompts_per_step, partial(self.scheduler.more, s.work), self.rewards)
                    if s.work.prepared is None:
                        self.scheduler.prepare(s.work, rollouts_of(s.groups))  # batch pass over the final groups
                    show.set_phase("reference")
                    self.scheduler.prepared(s.work)  # reference + values, left in the actors' object store
                    show.set_phase("training")
                    plan = AdvantagePlan.of(s.groups, s.version, self.cfg.env.credit if self.cfg.env is not None else "episode")
                    s.record_training(self.scheduler.wait(policy.train.remote(s.work.prepared, s.work.reference, plan)))  # train
                    show.set_phase("weight sync")
                    synced = ray.get(policy.sync.remote())  # weight sync
                    self.version, s.sync_s, s.sync_by_disk = synced.version, synced.seconds, synced.by_disk
                    s.canary = self.canaries.after_step(step + 1, self.roles.judges)  # canary: judges re-score labelled pairs
                    now = time.perf_counter()
                    s.seconds, t_prev = now - t_prev, now
                    metrics = step_metrics(s)
                    metrics["driver_peak_rss_mb"] = peak_rss_mb()  # this process: it holds no model and no tensor
                    self.recorder.log_step(metrics, sample_rows(step, s.groups, s.advantages))
                    if self.anchors is not None:  # trained and logged: later steps may compare with its answers
                        remember(self.anchors, step + 1, s.groups)
                    self.scheduler.trained()
                    show.done(metrics)
                    if self.heldout_reading(step + 1):
                        t_prev = time.perf_counter()  # the reading's seconds are its own (heldout.jsonl)
                    check_masked_fraction(step, metrics, len(s.advantages), cfg.faults.max_masked_fraction)
                    if cfg.checkpoint.every and (step + 1) % cfg.checkpoint.every == 0 and step + 1 < cfg.train.steps:
                        keeper.checkpoint(step + 1)
            finally:
                show.stop()
        keeper.checkpoint(cfg.train.steps)
        self.heldout.summary()
        self.recorder.write_report()
        self.recorder.close()
        return self.recorder.path

    def heldout_reading(self, step: int) -> bool:
        """The held-out check after ``step`` steps, when due: the policy's greedy answers, rule-scored."""
        h = self.heldout
        if not h.due(step):
            return False
        self.display.set_phase("held-out check")
        t0 = time.perf_counter()
        answers = self.scheduler.wait(self.roles.policy.answers.remote(h.prompts, h.max_new_tokens), droppable=True)
        h.record(step, answers, time.perf_counter() - t0)
        return True

    def rewards(self, groups: list[Group]) -> dict[str, Any]:
        return reward_groups(groups, self.weights, self.required, self.cfg.algorithm)  # overlong penalty, length control
