"""``grm run``: the step loop. One step reads like the data flow:

    rollout (policy pool) -> judges (their pools, each chunk as it lands) -> rewards
    -> reference log-probs (+ critic values) -> advantages -> train -> weight sync

What runs when is the scheduler's; where each role runs, roles' and pools' (the policy may be a worker
group of N ranks, the same handle); what is written, the recorder's; the math, the algorithm's."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from grm.config.resolve import LoadedPipeline
from grm.data.prompts import prompt_stream
from grm.orchestrator.anchors import remember, store_for
from grm.orchestrator.canary import Canaries
from grm.orchestrator.errors import RunError
from grm.orchestrator.filtering import refill, same_groups
from grm.orchestrator.health import NodeWatch, RoleLost, actor_lost
from grm.orchestrator.live import RunDisplay
from grm.orchestrator.policy_update import algorithm_of, row_advantages, with_advantages
from grm.orchestrator.recorder import Recorder, sample_rows, step_metrics
from grm.orchestrator.rewards import reward_groups
from grm.orchestrator.roles import place_roles
from grm.orchestrator.scheduler import Interrupted, Scheduler
from grm.orchestrator.types import Group, StepWork


class Driver:
    def __init__(self, loaded: LoadedPipeline, recorder: Recorder, address: str | None, live: bool = False) -> None:
        import ray

        self.cfg, self.recorder, self.ray = loaded.spec, recorder, ray
        self.algorithm = algorithm_of(self.cfg)
        self.stream = prompt_stream(self.cfg, [j.spec for j in loaded.judges])  # a bad row fails before any actor
        self.canaries = Canaries.load(loaded)  # labelled sets read now: a bad file fails before Ray starts
        self.roles = place_roles(loaded, self.algorithm, address)
        self.placement = self.roles.placement()
        recorder.write_placement(self.placement)
        self.watch = NodeWatch(ray, self.placement)
        self.anchors = store_for(self.cfg, [j.spec for j in loaded.judges])  # groups.anchor: previous
        self.display = RunDisplay.for_run(self.cfg, {j.name: len(j.replicas) for j in self.roles.judges}, live)
        self.scheduler = Scheduler(self.cfg, self.roles, self.stream, ray, self.watch, self.display, self.anchors)
        self.weights = {j.name: j.weight for j in self.roles.judges}
        self.required = {j.name: j.required for j in self.roles.judges}
        self.start_step = 0

    def resume(self) -> None:
        state = self.recorder.resume_state(self.roles.policy)
        self.stream.restore(state["stream"])
        if self.anchors is not None and state.get("anchors") is not None:
            self.anchors.restore(state["anchors"])
        self.start_step = state["step"]
        self.canaries.restore(self.recorder.metrics())

    def run(self) -> Path:
        cfg, ray, policy = self.cfg, self.ray, self.roles.policy
        t_prev = time.perf_counter()
        show = self.display
        show.start()
        try:
            for step in range(self.start_step, cfg.train.steps):
                if self.scheduler.stop_requested:
                    raise Interrupted()
                show.begin(step)
                work = self.scheduler.take(step)
                groups = self.scheduler.collect(work)  # rollout + judges
                reward_stats = self.rewards(groups)  # rewards
                extra: dict[str, Any] = {}
                if cfg.algorithm.dynamic_filtering:
                    kept, extra = refill(groups, cfg.algorithm.prompts_per_step, partial(self.more, work))
                    if not same_groups(kept, groups):
                        groups, reward_stats = kept, self.rewards(kept)
                        self.scheduler.prepare(work, [r for g in groups for r in g.rollouts])
                show.set_phase("reference")
                batch, ref_s = self.scheduler.prepared(work)  # reference + values
                version = ray.get(policy.version.remote())
                batch, adv_stats = with_advantages(self.algorithm, batch, groups, version)  # advantages
                show.set_phase("training")
                train = self.scheduler.wait(policy.train.remote(batch))  # train
                show.set_phase("weight sync")
                sync_s = ray.get(policy.sync.remote())  # weight sync
                extra.update(self.canaries.after_step(step + 1, self.roles.judges))  # canary: judges re-score labelled pairs
                now = time.perf_counter()
                metrics = step_metrics(
                    step, work, groups, reward_stats, {**adv_stats, **extra}, train, ref_s, sync_s, now - t_prev, version
                )
                t_prev = now
                self.recorder.log_step(metrics, sample_rows(step, groups, row_advantages(batch)))
                if self.anchors is not None:  # trained and logged: later steps may compare with its answers
                    remember(self.anchors, step + 1, groups)
                self.scheduler.trained()
                show.done(metrics)
                if metrics["masked"] > cfg.faults.max_masked_fraction * len(batch):
                    raise RunError(
                        f"step {step + 1}: {metrics['masked']} of {len(batch)} samples masked (> faults."
                        f"max_masked_fraction {cfg.faults.max_masked_fraction}); by judge: {metrics['masked_by_judge']}"
                    )
                if cfg.checkpoint.every and (step + 1) % cfg.checkpoint.every == 0 and step + 1 < cfg.train.steps:
                    self.checkpoint(step + 1)
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
                lost = actor_lost(e, self.roles, self.placement)
            if lost is None:  # an error in a role's own code: its traceback says more
                raise
            self.lost(lost)
        finally:
            show.stop()
        self.checkpoint(cfg.train.steps)
        self.recorder.write_report()
        self.recorder.close()
        return self.recorder.path

    def rewards(self, groups: list[Group]) -> dict[str, Any]:
        return reward_groups(groups, self.weights, self.required, self.cfg.algorithm)  # overlong penalty, length control

    def more(self, work: StepWork, salt: int) -> list[Group]:
        """Judged and rewarded groups of fresh prompts for a refill round."""
        groups = self.scheduler.more(work, salt)
        self.rewards(groups)
        return groups

    def checkpoint(self, step: int) -> None:
        untrained = self.scheduler.untrained_prompts()  # taken for steps not trained: given back
        anchors = None if self.anchors is None else self.anchors.state()
        self.recorder.checkpoint(step, self.roles.policy, self.stream, untrained, self.cfg.checkpoint.keep, anchors=anchors)

    def lost(self, e: RoleLost) -> NoReturn:
        """A role is gone: checkpoint the trained steps if the policy survived; say how to resume."""
        done = len(self.recorder.metrics())
        if not e.policy_lost:
            print(f"\n{e}: writing a checkpoint at step {done}", flush=True)
            self.checkpoint(done)
        raise RunError(f"step {done + 1}: {e}; {self.recorder.how_to_resume()}") from None
