"""``grm run``: the pipeline driver. One step reads like the data flow:

    rollout (policy pool, streamed in chunks) -> judges (their pools, each chunk as it lands)
    -> rewards -> reference log-probs (+ critic values) -> advantages -> train -> weight sync

In ``async`` mode the rollouts of the next ``max_staleness`` steps are queued on the policy before
this step trains, so they overlap this step's judging; their samples are at most that many weight
versions old and are corrected with truncated importance sampling.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from grm.config import load_judge, load_policy, validate_tree
from grm.config.pipeline import PipelineSpec
from grm.config.paths import resolve_judge, resolve_path
from grm.judges.runtime import Judge
from grm.judges.types import Sample
from grm.orchestrator.errors import RunError
from grm.data.prompts import PromptStream, load_prompts
from grm.orchestrator.rewards import combine_rewards
from grm.orchestrator.rundir import RunDir


@dataclass
class JudgeRole:
    name: str
    weight: float
    required: bool
    local: Judge | None = None       # rule verifiers run in the driver
    actor: Any = None
    spec: Any = None
    base: str = ""


@dataclass
class StepWork:
    """Everything submitted for one step, filled in as results land."""

    step: int
    prompts: list[Any]
    chunks: list[Any]                                   # rollout refs, one per chunk of prompts
    rollouts: dict[int, list[Any]] = field(default_factory=dict)
    judged: dict[tuple[int, str], Any] = field(default_factory=dict)   # (chunk, judge) -> ref or results
    submitted_at: dict[tuple[int, str], float] = field(default_factory=dict)
    retried: set[tuple[int, str]] = field(default_factory=set)
    rollout_s: float = 0.0
    judge_s: dict[str, float] = field(default_factory=dict)
    first_judge_start: float | None = None
    last_judge_end: float = 0.0
    prepared: Any = None                                # ref to the policy's reference/values pass
    reference: Any = None                               # ref to the remote reference's pass over it


class Driver:
    def __init__(self, cfg: PipelineSpec, cfg_path: Path, run_dir: RunDir, address: str | None) -> None:
        import ray

        from grm.orchestrator.pools import create_pools, start_ray
        from grm.orchestrator.roles import JudgeActor, PolicyActor, ReferenceActor

        if cfg.train.backend.ranks > 1:
            raise RunError("train.backend.ranks > 1: multi-rank training inside `grm run` is not implemented yet "
                           "(the DeepSpeed backend itself runs multi-rank; see grm.training.deepspeed_backend)")
        self.cfg, self.run_dir = cfg, run_dir
        self.ray = ray
        base = cfg_path.parent
        self.policy_spec = load_policy(cfg.policy.spec, base, cfg.policy.overrides)
        self.judges: list[JudgeRole] = []
        for jr in cfg.judges:
            jpath = resolve_judge(jr.spec, base, jr.overrides)
            spec = load_judge(jpath, overrides=jr.overrides)
            if spec.mode == "pairwise":
                raise RunError(f"judge '{spec.name}' is pairwise; pipelines score each response, use a pointwise, listwise or rule judge")
            role = JudgeRole(spec.name, jr.weight, jr.required, spec=spec, base=str(jpath.parent))
            role.local = Judge(spec, jpath.parent) if spec.mode == "rule" else None
            self.judges.append(role)
        start_ray(address, cfg.pools)
        pools = create_pools(cfg, [j.name for j in self.judges])
        self.pools = pools
        remote_ref = cfg.reference is not None and cfg.reference.pool != cfg.policy.pool
        colocated_ref = cfg.reference is not None and not remote_ref
        pp = pools[cfg.policy.pool]
        self.policy = PolicyActor.options(**pp.options("policy")).remote(cfg, self.policy_spec, pp.threads, colocated_ref)
        self.reference = None
        ref_args = (self.policy_spec.model, cfg.train.micro_batch_size)
        # a reference on a judge's pool lives in that judge's actor (see Pool.processes)
        host = next((r for jr, r in zip(cfg.judges, self.judges)
                     if remote_ref and r.local is None and jr.pool == cfg.reference.pool), None)  # type: ignore[union-attr]
        if remote_ref and host is None:
            rp = pools[cfg.reference.pool]  # type: ignore[union-attr]
            self.reference = ReferenceActor.options(**rp.options("reference")).remote(*ref_args, rp.threads)
        for jr, role in zip(cfg.judges, self.judges):
            if role.local is None:
                jp = pools[jr.pool]  # type: ignore[index]
                role.actor = JudgeActor.options(max_restarts=cfg.faults.judge_restarts, max_task_retries=2,
                                                **jp.options(f"judge:{role.name}")).remote(
                    role.spec, role.base, jp.threads, ref_args if role is host else None)
                if role is host:
                    self.reference = role.actor
        self.write_placement()
        self.stream = PromptStream(load_prompts(cfg.data), cfg.seed, cfg.data.shuffle)
        self.queue: deque[StepWork] = deque()
        self.start_step = 0
        self.filter_stats: dict[str, int] = {}

    def write_placement(self) -> None:
        """placement.json: the node, pid and resources of every role, reported from inside its actor."""
        roles = {"policy": self.policy.where.remote()}
        if self.reference is not None:
            roles["reference"] = self.reference.where.remote()
        for j in self.judges:
            if j.actor is not None:
                roles[f"judge:{j.name}"] = j.actor.where.remote()
        info = {k: self.ray.get(v) for k, v in roles.items()}
        for k, v in info.items():
            v["pool"] = next(p.name for p in self.pools.values() if k in p.roles)
        (self.run_dir.path / "placement.json").write_text(json.dumps(info, indent=2, default=str))

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        cfg = self.cfg
        a = cfg.algorithm
        ahead = cfg.schedule.max_staleness if cfg.schedule.mode == "async" else 0
        t_prev = time.perf_counter()
        next_submit = self.start_step
        try:
            for step in range(self.start_step, cfg.train.steps):
                if next_submit <= step:
                    self.queue.append(self.submit_rollout(step))
                    next_submit = step + 1
                work = self.queue.popleft()

                def fill(step: int = step) -> None:
                    # queued behind this step's reference pass: the next rollouts overlap this step's judging
                    nonlocal next_submit
                    while next_submit <= min(step + ahead, cfg.train.steps - 1):
                        self.queue.append(self.submit_rollout(next_submit))
                        next_submit += 1

                rollouts, per_judge = self.collect(work, then=fill)                  # rollout + judges
                rewards, rstats = self.rewards(rollouts, per_judge)
                if a.dynamic_filtering:
                    before = [id(r) for r in rollouts]
                    rollouts, per_judge, rewards, rstats = self.refill(step, rollouts, per_judge, rewards, rstats)
                    if [id(r) for r in rollouts] != before:
                        self._prepare(work, rollouts)
                batch, ref_s = self.ray.get(work.prepared)                           # reference + values
                if work.reference is not None:
                    ref_lp, secs = self.ray.get(work.reference)
                    batch, ref_s = batch.with_fields(ref_logprobs=ref_lp), ref_s + secs
                batch, adv_stats = self.advantages(batch, rollouts, rewards)
                version = self.ray.get(self.policy.version.remote())
                train = self._await(self.policy.train.remote(batch))                # train
                sync_s = self.ray.get(self.policy.sync.remote())                     # weight sync
                now = time.perf_counter()
                metrics = self.step_metrics(step, work, rollouts, rewards, per_judge, rstats, adv_stats, train,
                                            ref_s, sync_s, now - t_prev, version)
                t_prev = now
                self.run_dir.log_step(metrics, self.sample_rows(step, rollouts, rewards, per_judge, batch))
                self.report(metrics)
                if rstats["masked"] > cfg.faults.max_masked_fraction * len(rollouts):
                    raise RunError(f"step {step + 1}: {rstats['masked']} of {len(rollouts)} samples masked "
                                   f"(> faults.max_masked_fraction {cfg.faults.max_masked_fraction}); by judge: {rstats['masked_by_judge']}")
                if cfg.checkpoint.every and (step + 1) % cfg.checkpoint.every == 0 and step + 1 < cfg.train.steps:
                    self.checkpoint(step + 1)
        except KeyboardInterrupt:
            done = len(self.run_dir.metrics())
            print(f"\ninterrupted: writing a checkpoint at step {done}", flush=True)
            self.queue.clear()
            self.checkpoint(done)
            raise
        self.checkpoint(cfg.train.steps)
        self.run_dir.write_report()
        self.run_dir.close()
        return self.run_dir.path

    # ------------------------------------------------------------------ rollout and judges
    def submit_rollout(self, step: int, salt: int = 0, first_group: int = 0) -> StepWork:
        a = self.cfg.algorithm
        k = self.cfg.schedule.stream_prompts or a.prompts_per_step
        prompts = self.stream.take(a.prompts_per_step)
        seed = self.cfg.seed * 1_000_003 + step * 101 + salt
        chunks = [self.policy.rollout.remote(prompts[i:i + k], first_group + i, a.group_size, seed)
                  for i in range(0, len(prompts), k)]
        return StepWork(step, prompts, chunks)

    @staticmethod
    def _judge_inputs(work: StepWork, c: int, role: JudgeRole) -> list[Sample]:
        """What ``role`` judges for chunk ``c``: one sample per response, or one per group (listwise)."""
        if role.spec.mode == "listwise":
            return _groups_as_lists(work.rollouts[c])
        return [Sample(prompt=r.prompt, response=r.text, reference=r.reference, id=f"{work.step}:{r.group}:{j}")
                for j, r in enumerate(work.rollouts[c])]

    def _submit_judges(self, work: StepWork, c: int) -> None:
        for role in self.judges:
            inputs = self._judge_inputs(work, c, role)
            if role.local is not None:
                work.judged[(c, role.name)] = role.local.score_batch(inputs)
            else:
                work.judged[(c, role.name)] = role.actor.score.remote(inputs)
            work.submitted_at[(c, role.name)] = time.perf_counter()
        if work.first_judge_start is None:
            work.first_judge_start = time.perf_counter()

    def collect(self, work: StepWork, then: Any = None, prepare: bool = True) -> tuple[list[Any], dict[str, list[Any]]]:
        """Wait for this step's rollout chunks, judging each as soon as it lands. Once all chunks are
        in, the policy's reference/values pass is queued (it needs no rewards), then ``then()``."""
        ray = self.ray
        pending = {ref: c for c, ref in enumerate(work.chunks) if c not in work.rollouts}
        while pending or any(isinstance(v, ray.ObjectRef) for v in work.judged.values()):
            if not pending and work.prepared is None and prepare:
                self._prepare(work, [r for c in sorted(work.rollouts) for r in work.rollouts[c]])
                if then is not None:
                    then()
            refs = list(pending) + [v for v in work.judged.values() if isinstance(v, ray.ObjectRef)]
            ready, _ = ray.wait(refs, num_returns=1, timeout=5.0)
            for ref in ready:
                if ref in pending:
                    self._land(work, pending.pop(ref), ref)
                    continue
                key = next(k for k, v in work.judged.items() if v is ref)
                results = ray.get(ref)
                work.judge_s[key[1]] = work.judge_s.get(key[1], 0.0) + time.perf_counter() - work.submitted_at[key]
                work.judged[key] = results
                work.last_judge_end = time.perf_counter()
            self._timeouts(work)
        rollouts = [r for c in sorted(work.rollouts) for r in work.rollouts[c]]
        if work.prepared is None and prepare:
            self._prepare(work, rollouts)
            if then is not None:
                then()
        per_judge = {}
        for role in self.judges:
            flat: list[Any] = []
            for c in sorted(work.rollouts):
                res = work.judged[(c, role.name)]
                flat += _ungroup(res, work.rollouts[c]) if role.spec.mode == "listwise" else res
            per_judge[role.name] = flat
        return rollouts, per_judge

    def _land(self, work: StepWork, c: int, ref: Any) -> None:
        """Rollout chunk ``c`` of ``work`` is in: keep it and hand it to the judges."""
        work.rollouts[c], secs = self.ray.get(ref)
        work.rollout_s += secs
        self._submit_judges(work, c)

    def _await(self, ref: Any) -> Any:
        """``ray.get(ref)`` that meanwhile hands the chunks of queued (async) steps to the judges as
        they land, so judges work on step t+1 while step t trains."""
        while True:
            waiting = {r: (w, c) for w in self.queue for c, r in enumerate(w.chunks) if c not in w.rollouts}
            ready, _ = self.ray.wait([ref, *waiting], num_returns=1, timeout=5.0)
            for r in ready:
                if r in waiting:
                    self._land(*waiting[r], r)
            if any(r == ref for r in ready):
                return self.ray.get(ref)

    def _prepare(self, work: StepWork, rollouts: list[Any]) -> None:
        """Queue the policy's batch/values pass and, on its own pool, the reference pass over that
        batch: both need the rollouts only, so they run while the judges still work."""
        work.prepared = self.policy.prepare.remote(rollouts)
        work.reference = self.reference.logprobs.remote(work.prepared) if self.reference is not None else None

    def _timeouts(self, work: StepWork) -> None:
        """A judge call past its timeout is cancelled and re-issued once, then its items are masked."""
        limit = self.cfg.faults.judge_timeout_s
        for key, v in list(work.judged.items()):
            if not isinstance(v, self.ray.ObjectRef) or time.perf_counter() - work.submitted_at[key] < limit:
                continue
            self.ray.cancel(v, force=False)
            c, name = key
            if key in work.retried:
                print(f"judge '{name}' timed out twice on step {work.step} chunk {c}: masking {len(work.rollouts[c])} samples")
                work.judged[key] = [None] * len(work.rollouts[c])
                continue
            work.retried.add(key)
            role = next(j for j in self.judges if j.name == name)
            work.judged[key] = role.actor.score.remote(self._judge_inputs(work, c, role))
            work.submitted_at[key] = time.perf_counter()

    def rewards(self, rollouts: Sequence[Any], per_judge: dict[str, list[Any]]) -> tuple[list[float], dict[str, Any]]:
        return combine_rewards(per_judge, {j.name: j.weight for j in self.judges}, {j.name: j.required for j in self.judges},
                               [r.finish_reason for r in rollouts], self.cfg.algorithm.overlong_penalty)

    def refill(self, step: int, rollouts: list[Any], per_judge: dict[str, list[Any]], rewards: list[float],
               rstats: dict[str, Any], rounds: int = 3) -> tuple[list[Any], dict[str, list[Any]], list[float], dict[str, Any]]:
        """DAPO dynamic sampling: groups whose valid rewards are all equal teach nothing; replace them
        with groups of fresh prompts (up to ``rounds`` extra rollouts). If still short, the batch is
        topped up with the uninformative groups so its size stays fixed."""
        def split(rs: list[Any], pj: dict[str, list[Any]], rw: list[float]) -> tuple[list[list[int]], list[list[int]]]:
            groups: dict[int, list[int]] = {}
            for i, r in enumerate(rs):
                groups.setdefault(r.group, []).append(i)
            good, flat = [], []
            for idx in groups.values():
                vals = {rw[i] for i in idx if not math.isnan(rw[i])}
                (good if len(vals) > 1 else flat).append(idx)
            return good, flat

        want = self.cfg.algorithm.prompts_per_step
        pool_r, pool_j, pool_w = list(rollouts), {k: list(v) for k, v in per_judge.items()}, list(rewards)
        good, flat = split(pool_r, pool_j, pool_w)
        extra_round = 0
        while len(good) < want and extra_round < rounds:
            extra_round += 1
            work = self.submit_rollout(step, salt=extra_round, first_group=len(pool_r) + 1000 * extra_round)
            more_r, more_j = self.collect(work, prepare=False)
            more_w, _ = self.rewards(more_r, more_j)
            pool_r += more_r
            for k in pool_j:
                pool_j[k] += more_j[k]
            pool_w += more_w
            good, flat = split(pool_r, pool_j, pool_w)
        chosen = (good + flat)[:want]
        keep = sorted(i for idx in chosen for i in idx)
        self.filter_stats = {"groups_kept_informative": min(len(good), want), "refill_rounds": extra_round}
        out_r = [pool_r[i] for i in keep]
        out_j = {k: [v[i] for i in keep] for k, v in pool_j.items()}
        out_w = [pool_w[i] for i in keep]
        return out_r, out_j, out_w, {**rstats, "masked": sum(math.isnan(x) for x in out_w)}

    # ------------------------------------------------------------------ advantages
    def advantages(self, batch: Any, rollouts: Sequence[Any], rewards: list[float]) -> tuple[Any, dict[str, float]]:
        import torch

        from grm import algorithms as A

        a = self.cfg.algorithm
        r = torch.tensor(rewards, dtype=torch.float32)
        groups = torch.tensor([x.group for x in rollouts])
        mask = batch.loss_mask
        kl_tok = None
        if a.kl.coef > 0:
            # KL in the reward uses the trainer's log-probs; for the logged KL (KL in the loss) the
            # rollout engine's log-probs of the same tokens stand in for them.
            current_lp = batch["old_logprobs"] if "old_logprobs" in batch.fields else batch["behaviour_logprobs"]
            kl_tok = A.kl_penalty(current_lp, batch["ref_logprobs"], a.kl.estimator) * mask
        stats: dict[str, float] = {}
        if kl_tok is not None:
            stats["kl"] = float((kl_tok.sum(-1) / mask.sum(-1).clamp(min=1)).mean())
        current = self.ray.get(self.policy.version.remote())
        stale = torch.tensor([x.version < current for x in rollouts], dtype=torch.float32)
        if a.type == "ppo":
            valid = ~torch.isnan(r)
            tok_r = torch.zeros_like(mask)
            last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & (mask > 0)
            tok_r[last] = torch.nan_to_num(r, nan=0.0).repeat_interleave(last.sum(-1))
            if kl_tok is not None and a.kl.in_reward:
                tok_r = tok_r - a.kl.coef * kl_tok
            tok_mask = mask * valid[:, None]
            adv, ret = A.gae(tok_r, batch["old_values"], tok_mask, gamma=a.gamma, lam=a.lam)
            m = tok_mask > 0
            if m.any():
                adv = torch.where(m, (adv - adv[m].mean()) / (adv[m].std() + 1e-6), torch.zeros_like(adv))
            return batch.with_fields(advantages=adv, returns=ret, stale=stale), stats
        if kl_tok is not None and a.kl.in_reward:
            r = r - a.kl.coef * kl_tok.sum(-1)
        if a.type in ("grpo", "dr_grpo"):
            adv = A.grpo_advantages(r, groups, scale_by_std=a.type == "grpo")
        elif a.type == "rloo":
            adv = A.rloo_advantages(r, groups)
        else:
            adv = A.reinforce_pp_advantages(r, groups)
        stats["zero_advantage_frac"] = float((adv == 0).float().mean())
        return batch.with_fields(advantages=adv, stale=stale), stats

    # ------------------------------------------------------------------ metrics, samples, checkpoints
    def step_metrics(self, step: int, work: StepWork, rollouts: Sequence[Any], rewards: list[float], per_judge: dict[str, list[Any]],
                     rstats: dict[str, Any], adv_stats: dict[str, float], train: dict[str, float], ref_s: float,
                     sync_s: float, step_s: float, version: int) -> dict[str, Any]:
        valid = [x for x in rewards if not math.isnan(x)]
        mean = sum(valid) / len(valid) if valid else float("nan")
        judge_window = (work.last_judge_end - work.first_judge_start) if work.first_judge_start and work.last_judge_end else 0.0
        busy = work.rollout_s + ref_s + train.get("train_seconds", 0.0) + sync_s
        m: dict[str, Any] = {
            "step": step + 1, "policy_version": version,
            "reward_mean": mean, "reward_std": (sum((x - mean) ** 2 for x in valid) / len(valid)) ** 0.5 if valid else float("nan"),
            "masked": rstats["masked"], "masked_by_judge": rstats["masked_by_judge"],
            "response_len_mean": sum(len(r.token_ids) for r in rollouts) / len(rollouts),
            "truncated_frac": sum(r.finish_reason == "length" for r in rollouts) / len(rollouts),
            "staleness_max": max(version - r.version for r in rollouts),
            "seconds_step": step_s, "seconds_rollout": work.rollout_s, "seconds_judging": judge_window,
            "seconds_reference": ref_s, "seconds_training": train.get("train_seconds", 0.0), "seconds_sync": sync_s,
            "seconds_idle": max(0.0, step_s - busy), "judge_share": judge_window / step_s if step_s else 0.0,
            **{f"seconds_judge/{k}": v for k, v in work.judge_s.items()},
            **adv_stats,
            **self.filter_stats,
            **{k: v for k, v in train.items() if k != "train_seconds"},
        }
        for name, res in per_judge.items():
            vals = [x.reward for x in res if x is not None and x.reward is not None]
            m[f"reward/{name}"] = sum(vals) / len(vals) if vals else float("nan")
            m[f"parse_failures/{name}"] = sum(x.parse_failures for x in res if x is not None)
        return m

    def sample_rows(self, step: int, rollouts: Sequence[Any], rewards: list[float], per_judge: dict[str, list[Any]], batch: Any) -> list[dict[str, Any]]:
        adv = batch["advantages"]
        rows = []
        for i, r in enumerate(rollouts):
            a = float(adv[i]) if adv.dim() == 1 else float((adv[i] * batch.loss_mask[i]).sum() / batch.loss_mask[i].sum().clamp(min=1))
            judges = {}
            for name, res in per_judge.items():
                x = res[i]
                judges[name] = None if x is None else {"score": x.score, "reward": x.reward, "masked": x.masked,
                                                       "critiques": [s.text for s in x.samples], "parsed": [s.parsed for s in x.samples]}
            rows.append({"step": step + 1, "prompt_id": r.prompt_id, "group": r.group, "prompt": r.prompt, "response": r.text,
                         "finish_reason": r.finish_reason, "policy_version": r.version, "reward": rewards[i], "advantage": a,
                         "judges": judges})
        return rows

    def report(self, m: dict[str, Any]) -> None:
        from rich.console import Console

        Console().print(
            f"[bold]step {m['step']}/{self.cfg.train.steps}[/] reward {m['reward_mean']:.3f}±{m['reward_std']:.3f} "
            f"masked {m['masked']} kl {m.get('kl', 0.0):.4f} len {m['response_len_mean']:.1f} | "
            f"rollout {m['seconds_rollout']:.1f}s judging {m['seconds_judging']:.1f}s ref {m['seconds_reference']:.1f}s "
            f"train {m['seconds_training']:.1f}s sync {m['seconds_sync']:.2f}s step {m['seconds_step']:.1f}s "
            f"ETA {m['seconds_step'] * (self.cfg.train.steps - m['step']) / 60:.1f} min", highlight=False)

    def checkpoint(self, step: int) -> None:
        from grm.training.core import atomic_dir

        path = self.run_dir.checkpoint_dir(step)
        with atomic_dir(path) as tmp:
            self.ray.get(self.policy.save.remote(str(tmp)))
            # Rollouts queued ahead consumed prompts; the resumed run regenerates them.
            stream = dict(self.stream.state())
            stream["index"] -= sum(len(w.prompts) for w in self.queue)
            (tmp / "driver.json").write_text(json.dumps({"step": step, "stream": stream}))
        self.run_dir.prune(self.cfg.checkpoint.keep)

    def resume(self) -> None:
        ckpt = self.run_dir.latest_checkpoint()
        if ckpt is None:
            raise RunError(f"{self.run_dir.path}: no complete checkpoint to resume from")
        state = json.loads((ckpt / "driver.json").read_text())
        self.ray.get(self.policy.load.remote(str(ckpt)))
        stream = state["stream"]
        while stream["index"] < 0:  # queued-ahead prompts crossed an epoch boundary
            stream["epoch"] -= 1
            stream["index"] += len(self.stream.prompts)
        self.stream.restore(stream)
        self.start_step = state["step"]
        self.run_dir.truncate_after(self.start_step)
        print(f"resuming {self.run_dir.path} from {ckpt.name}", flush=True)


def _groups_as_lists(rollouts: Sequence[Any]) -> list[Sample]:
    """Listwise judges see every response of a prompt at once."""
    out: dict[int, list[Any]] = {}
    for r in rollouts:
        out.setdefault(r.group, []).append(r)
    return [Sample(prompt=g[0].prompt, responses=[r.text for r in g], reference=g[0].reference) for g in out.values()]


def _ungroup(results: Sequence[Any], rollouts: Sequence[Any]) -> list[Any]:
    """Per-response results from listwise results (one per group, responses in group order)."""
    from copy import copy

    index: dict[int, int] = {}
    taken: dict[int, int] = {}
    out = []
    for r in rollouts:
        g = index.setdefault(r.group, len(index))
        k = taken.get(r.group, 0)
        taken[r.group] = k + 1
        res = results[g]
        if res is None:
            out.append(None)
            continue
        one = copy(res)
        one.score = res.scores[k] if res.scores else None
        one.reward = res.rewards[k] if res.rewards else None
        out.append(one)
    return out


def run_pipeline(path: str, overrides: Sequence[str] = (), resume: str | None = None, address: str | None = None) -> Path:
    """Validate, place and run a pipeline; returns the run directory."""
    import ray

    cfg_path = resolve_path(path, Path.cwd(), "pipelines") if path.startswith("builtin:") else Path(path)
    cfg = validate_tree(cfg_path, overrides)[0][1]
    assert isinstance(cfg, PipelineSpec)
    run_dir = RunDir.create(cfg, resume)
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        driver = Driver(cfg, cfg_path, run_dir, address)
        if resume:
            driver.resume()
        out = driver.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ray.is_initialized() and not address:
            ray.shutdown()
    return out
