"""The role actors: the policy (trainer + rollout engine + colocated reference/critic), a remote
reference, and judges. Each lives in its pool's placement group, with its pool's thread count."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

import ray


@dataclass
class Rollout:
    """One sampled response and what the rollout engine knew about it."""

    prompt_id: str
    prompt: str
    reference: str | None
    group: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str
    version: int


def _threads(n: int) -> None:
    import torch

    os.environ["OMP_NUM_THREADS"] = str(n)
    torch.set_num_threads(n)


def where() -> dict[str, Any]:
    """Node and resources of the calling actor (asserted by placement tests)."""
    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "pid": os.getpid(), "resources": ctx.get_assigned_resources()}


@ray.remote
class PolicyActor:
    """Trainer, rollout engine and (when colocated) reference and critic of the policy."""

    def __init__(self, cfg: Any, policy: Any, threads: int, with_reference: bool) -> None:
        _threads(threads)
        import torch

        from grm.engines import build_engine
        from grm.engines.hf import load_model
        from grm.training.models import ReferenceModel, ValueModel, value_forward

        self.cfg = cfg
        self.policy = policy
        torch.manual_seed(cfg.seed)
        t = cfg.train
        train_model, self.tok = load_model(policy.model, "fp32")
        # hf: generates with the trainer's own module when dtypes agree (torch backend: no copy,
        # nothing to sync), else with a second copy in the engine's dtype; sglang: servers on the
        # pool's GPUs that sync() feeds from disk
        self.shared = policy.engine.type == "hf" and policy.engine.dtype == "fp32" and t.backend.type == "torch"
        own = {}
        if policy.engine.type == "hf":
            own["model_obj"] = train_model if self.shared else load_model(policy.model, policy.engine.dtype)[0]
        self.engine = build_engine(policy.engine, policy.model, tokenizer=self.tok, **own)
        batch = cfg.algorithm.prompts_per_step * cfg.algorithm.group_size
        common = dict(lr=t.lr, micro_batch_size=t.micro_batch_size, max_grad_norm=t.max_grad_norm,
                      warmup_steps=t.warmup_steps, total_steps=t.steps, schedule=t.lr_schedule)
        self.trainer = self._trainer(train_model, batch, common, entropy=True)
        self.reference = ReferenceModel(policy.model, dtype="fp32", micro_batch_size=t.micro_batch_size) if with_reference else None
        self.critic = None
        if cfg.algorithm.type == "ppo":
            critic = ValueModel.from_pretrained(policy.model, "fp32")
            self.critic = self._trainer(critic, batch, {**common, "lr": t.critic_lr}, forward=value_forward)
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id

    def _trainer(self, module: Any, batch: int, common: dict[str, Any], **kw: Any) -> Any:
        b = self.cfg.train.backend
        if b.type == "deepspeed":
            from grm.training.deepspeed_backend import DeepSpeedTrainer

            return DeepSpeedTrainer(module, global_batch_size=batch, zero_stage=b.zero_stage, dtype=b.dtype,
                                    extra_config=b.deepspeed_config, **common, **kw)
        from grm.training.torch_backend import TorchTrainer

        return TorchTrainer(module, **common, **kw)

    def where(self) -> dict[str, Any]:
        return where()

    # ------------------------------------------------------------- rollout
    def rollout(self, prompts: Sequence[Any], first_group: int, n: int, seed: int) -> tuple[list[Rollout], float]:
        """``n`` responses per prompt with the current weights; returns (rollouts, seconds)."""
        from grm.engines.base import GenerationRequest, SamplingParams

        t0 = time.perf_counter()
        r = self.cfg.rollout
        msgs = []
        for p in prompts:
            m = [{"role": "system", "content": self.policy.system_prompt}] if self.policy.system_prompt else []
            msgs.append(GenerationRequest(messages=m + [{"role": "user", "content": p.text}]))
        sp = SamplingParams(n=n, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                            stop=tuple(self.policy.generation.stop), seed=seed)
        gens = self.engine.generate(msgs, sp)
        out = []
        for g in gens:
            p = prompts[g.request_index]
            out.append(Rollout(prompt_id=p.id, prompt=p.text, reference=p.reference, group=first_group + g.request_index,
                               prompt_ids=self.engine.encode(msgs[g.request_index]), token_ids=g.token_ids, text=g.text,
                               logprobs=g.logprobs, finish_reason=g.finish_reason, version=g.version))
        return out, time.perf_counter() - t0

    # ------------------------------------------------------------- reference, values
    def prepare(self, rollouts: Sequence[Rollout]) -> tuple[Any, float]:
        """Token batch with old (trainer) log-probs, behaviour (rollout) log-probs, reference log-probs
        when the reference is colocated, and critic values for PPO; returns (batch, seconds)."""
        from grm.training import TrainBatch

        t0 = time.perf_counter()
        batch = TrainBatch.from_sequences([r.prompt_ids for r in rollouts], [r.token_ids or [self.pad_id] for r in rollouts],
                                          pad_id=self.pad_id, behaviour_logprobs=[r.logprobs or [0.0] for r in rollouts])
        # The trainer takes one optimizer step per batch, so the policy that scores the batch in
        # training is the one that would compute old log-probs here: the loss uses its detached
        # log-probs instead (one forward saved). Only KL-in-reward needs them before training.
        kl = self.cfg.algorithm.kl
        fields = {"old_logprobs": self.trainer.logprobs(batch)} if kl.in_reward and kl.coef > 0 else {}
        if self.reference is not None:
            fields["ref_logprobs"] = self.reference.logprobs(batch)
        if self.critic is not None:
            fields["old_values"] = self.critic.logprobs(batch)
        return batch.with_fields(**fields), time.perf_counter() - t0

    # ------------------------------------------------------------- train, sync
    def train(self, batch: Any) -> dict[str, float]:
        from grm.algorithms import kl_penalty, masked_mean, ppo_policy_loss, value_loss

        a = self.cfg.algorithm
        kl_in_loss = a.kl.coef > 0 and not a.kl.in_reward
        stale = "stale" in batch.fields and bool(batch["stale"].any())

        def policy_loss(logprobs: Any, mb: Any, entropy: Any) -> tuple[Any, dict[str, float]]:
            loss, m = ppo_policy_loss(
                logprobs, mb["old_logprobs"] if "old_logprobs" in mb.fields else logprobs.detach(), mb["advantages"], mb.loss_mask, clip_low=a.clip_low, clip_high=a.clip_high,
                aggregation=a.loss_aggregation,
                behaviour_logprobs=mb["behaviour_logprobs"] if stale and a.tis_cap else None, tis_cap=a.tis_cap)
            if kl_in_loss:
                kl = masked_mean(kl_penalty(logprobs, mb["ref_logprobs"], a.kl.estimator), mb.loss_mask)
                loss = loss + a.kl.coef * kl
                m["kl"] = float(kl.detach())
            if entropy is not None:
                m["entropy"] = float(masked_mean(entropy, mb.loss_mask))
            return loss, m

        t0 = time.perf_counter()
        metrics = self.trainer.step(batch, policy_loss)
        if self.critic is not None:
            def critic_loss(values: Any, mb: Any, _: Any) -> tuple[Any, dict[str, float]]:
                return value_loss(values, mb["old_values"], mb["returns"], mb.loss_mask, clip=a.value_clip)

            metrics.update({f"critic_{k}": v for k, v in self.critic.step(batch, critic_loss).items()})
        metrics["train_seconds"] = time.perf_counter() - t0
        if self.shared:
            self.engine.version = self.trainer.step_count  # the engine already holds the new weights
        return metrics

    def sync(self) -> float:
        """Push trainer weights into the rollout engine (in process); the engine's version advances."""
        from grm.training.sync import push_weights

        if self.shared:
            self.engine.version = self.trainer.step_count
            return 0.0
        return push_weights(self.engine, self.trainer.state_dict(), self.trainer.step_count)

    def version(self) -> int:
        return self.engine.version

    def save(self, path: str) -> None:
        self.trainer.save(os.path.join(path, "policy"))
        if self.critic is not None:
            self.critic.save(os.path.join(path, "critic"))

    def load(self, path: str) -> int:
        self.trainer.load(os.path.join(path, "policy"))
        if self.critic is not None:
            self.critic.load(os.path.join(path, "critic"))
        self.sync()
        return self.engine.version

    def export(self, path: str) -> float:
        from grm.training.sync import save_weights

        return save_weights(self.trainer.state_dict(), path, self.trainer.step_count)


class _HostsReference:
    """A frozen reference model inside an actor: ``logprobs`` of a prepared batch."""

    ref: Any = None

    def _load_reference(self, model: str, micro_batch_size: int) -> None:
        from grm.training.models import ReferenceModel

        self.ref = ReferenceModel(model, dtype="fp32", micro_batch_size=micro_batch_size)

    def logprobs(self, prepared: Any) -> tuple[Any, float]:
        """Reference log-probs of a batch, or of ``PolicyActor.prepare``'s ``(batch, seconds)``
        (passed as an object ref, so the pass starts as soon as the batch exists); returns
        (log-probs, seconds)."""
        t0 = time.perf_counter()
        batch = prepared[0] if isinstance(prepared, tuple) else prepared
        return self.ref.logprobs(batch), time.perf_counter() - t0


@ray.remote
class ReferenceActor(_HostsReference):
    """Frozen reference model on its own pool."""

    def __init__(self, model: str, micro_batch_size: int, threads: int) -> None:
        _threads(threads)
        self._load_reference(model, micro_batch_size)

    def where(self) -> dict[str, Any]:
        return where()


@ray.remote
class JudgeActor(_HostsReference):
    """One judge (spec + model) on its pool; Ray restarts it if it dies. Hosts the reference model
    too when the pipeline places the reference on this judge's pool (``reference`` = (model,
    micro-batch size)): Ray runs an actor's calls one at a time, so judging and reference passes
    take turns on the pool's cores."""

    def __init__(self, spec: Any, base_dir: str, threads: int, reference: tuple[str, int] | None = None) -> None:
        _threads(threads)
        from grm.judges.runtime import Judge

        self.judge = Judge(spec, base_dir)
        if spec.mode != "rule":
            _ = self.judge.engine  # load the model now, not inside the first timed call
        if reference is not None:
            self._load_reference(*reference)

    def score(self, samples: Sequence[Any]) -> list[Any]:
        return self.judge.score_batch(samples)

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict[str, Any]:
        return where()
