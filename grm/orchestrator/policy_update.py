"""From judged groups to trained weights, Ray-free: advantages by sample id, then one training step's
optimizer steps over the batch: ``epochs`` passes of ``mini_batches``
optimizer steps for the policy (loss from the algorithm), then the same for the critic (PPO).

Old log-probs, when the algorithm needs them, were computed once before the first step (in the
policy's prepare pass), so after the first optimizer step the ratio moves away from 1 and the clip
binds; with one step per batch the loss uses the detached current log-probs and ratio = 1.
"""

from __future__ import annotations

from grm.algorithms import Algorithm, PolicyLoss, build_algorithm
from grm.config.pipeline import PipelineSpec
from grm.orchestrator.types import AdvantagePlan
from grm.training import TrainBatch, TrainerBackend
from grm.training.core import mean_metrics


def algorithm_of(cfg: PipelineSpec) -> Algorithm:
    """The pipeline's algorithm object, from its typed config."""
    a = cfg.algorithm
    loss = PolicyLoss(
        clip_low=a.clip_low,
        clip_high=a.clip_high,
        dual_clip=a.dual_clip,
        aggregation=a.loss_aggregation,
        tis_cap=a.tis_cap,
        kl_coef=a.kl.coef,
        kl_estimator=a.kl.estimator,
        kl_in_reward=a.kl.in_reward,
    )
    own = a.model_dump(include={"gamma", "lam", "value_clip"})
    return build_algorithm(a.type, loss=loss, epochs=a.epochs, mini_batches=a.mini_batches, **own)


def mini_batches(batch: TrainBatch, n: int) -> list[TrainBatch]:
    """``batch`` cut into ``n`` consecutive mini-batches of equal size (divisibility is checked
    when the pipeline loads)."""
    size = len(batch) // n
    return [batch.select(slice(i * size, (i + 1) * size)) for i in range(n)]


def train_on_batch(
    trainer: TrainerBackend, critic: TrainerBackend | None, algorithm: Algorithm, batch: TrainBatch
) -> dict[str, float]:
    """All optimizer steps of one batch; returns metrics averaged over the steps (critic's prefixed
    ``critic_``) and ``optimizer_steps``."""
    stale = "stale" in batch.fields and bool(batch["stale"].any())
    policy_loss = algorithm.loss.loss_fn(stale)
    rows: list[dict[str, float]] = []
    for _ in range(algorithm.epochs):
        for mb in mini_batches(batch, algorithm.mini_batches):
            rows.append(trainer.step(mb, policy_loss))
    metrics = mean_metrics(rows)
    critic_loss = algorithm.critic_loss_fn()
    if critic is not None and critic_loss is not None:
        crows = [
            critic.step(mb, critic_loss) for _ in range(algorithm.epochs) for mb in mini_batches(batch, algorithm.mini_batches)
        ]
        metrics.update({f"critic_{k}": v for k, v in mean_metrics(crows).items()})
    metrics["optimizer_steps"] = float(len(rows))
    return metrics


def with_advantages(
    algorithm: Algorithm, batch: TrainBatch, plan: AdvantagePlan
) -> tuple[TrainBatch, dict[str, float], dict[str, list[float]]]:
    """The batch with ``advantages`` (+ ``returns`` for PPO), ``stale`` and ``valid`` per row, each
    row's reward and group found by its sample id in ``plan``; the advantage statistics; and, for
    ``credit: process`` (``env.credit``), each credited episode's per-turn credit. The KL in the
    reward uses the trainer's old log-probs; for the logged KL (KL in the loss) the rollout engine's
    log-probs stand in. Process credit: token-level advantages that spare an episode's turns before
    the first faulty turn a judge named (``grm.orchestrator.episodes.process_credit``)."""
    import torch

    rewards = torch.tensor([plan.rewards[i] for i in batch.ids], dtype=torch.float32)
    group_ids = torch.tensor([plan.groups[i] for i in batch.ids])
    current = batch["old_logprobs"] if "old_logprobs" in batch.fields else batch["behaviour_logprobs"]
    kl = algorithm.loss.token_kl(current, batch["ref_logprobs"], batch.loss_mask) if algorithm.loss.kl_coef > 0 else None
    out = algorithm.advantages(rewards, group_ids, batch.loss_mask, kl, batch.fields.get("old_values"))
    advantages = out.advantages
    per_turn: dict[str, list[float]] = {}
    if plan.credit == "process":
        from grm.orchestrator.episodes import process_credit

        advantages, per_turn = process_credit(advantages, batch.loss_mask, batch.ids, plan.episodes or [])
    fields = {
        "advantages": advantages,
        "valid": (~torch.isnan(rewards)).float(),
        "stale": torch.tensor([plan.versions[i] < plan.version for i in batch.ids], dtype=torch.float32),
    }
    if out.returns is not None:
        fields["returns"] = out.returns
    return batch.with_fields(**fields), out.stats, per_turn


def row_advantages(batch: TrainBatch) -> dict[str, float]:
    """Sample id -> its advantage (token-level advantages: the mean over its response tokens)."""
    adv, mask = batch["advantages"], batch.loss_mask
    if adv.dim() == 1:
        return {i: float(a) for i, a in zip(batch.ids, adv, strict=True)}
    per_row = (adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return {i: float(a) for i, a in zip(batch.ids, per_row, strict=True)}
