"""The algorithm object: everything that differs between GRPO, Dr. GRPO, RLOO, REINFORCE++ and PPO.

The orchestrator asks an ``Algorithm`` what to compute before training (``needs_old_logprobs``,
``needs_critic``), turns rewards into advantages with it, and hands its loss functions to an
algorithm-blind trainer. Objects are plain frozen dataclasses built from keyword settings (the
config layer passes its fields), so they travel to Ray actors by pickling and import nothing from
grm but the loss contract both sides share (``grm.loss_fn``).

Shapes: ``rewards [B]`` (NaN = masked), ``group_ids [B]``, ``mask [B, T]`` (response tokens),
``kl [B, T]`` per-token KL estimate or None, ``values [B, T]`` critic values (PPO).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import torch
from torch import Tensor

from grm.algorithms.advantages import gae, grpo_advantages, reinforce_pp_advantages, rloo_advantages, whiten
from grm.algorithms.losses import Aggregation, aggregate_loss, kl_penalty, masked_mean, ppo_policy_loss, value_loss
from grm.loss_fn import LossBatch, LossFn


def whole_batch_counts(mb: Any) -> dict[str, float]:
    """``tokens`` and ``sequences`` of the whole batch ``mb`` is a micro-batch of (``mb.totals``,
    set by the trainer), as keyword arguments of the losses; ``{}`` when it carries none (the
    micro-batch is then normalised by its own counts)."""
    t = getattr(mb, "totals", None)
    return {} if t is None else {"tokens": float(t.tokens), "sequences": float(t.sequences)}


@dataclass(frozen=True)
class Advantages:
    advantages: Tensor
    """``[B]`` (sequence-level) or ``[B, T]`` (token-level, PPO)."""
    returns: Tensor | None = None
    """``[B, T]`` value targets (PPO), else None."""
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyLoss:
    """The clipped policy surrogate every algorithm here trains with, plus the KL term."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    aggregation: Aggregation = "token-mean"
    tis_cap: float | None = 2.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: bool = False

    @property
    def kl_in_loss(self) -> bool:
        return self.kl_coef > 0 and not self.kl_in_reward

    def token_kl(self, logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor | None:
        """Per-token KL(policy || reference) ``[B, T]`` over ``mask``, or None when the KL is off."""
        if self.kl_coef <= 0:
            return None
        return kl_penalty(logprobs, ref_logprobs, self.kl_estimator) * mask  # type: ignore[arg-type]

    def loss_fn(self, stale: bool) -> LossFn:
        """The policy loss for one batch. ``stale``: the batch holds samples from older weights, so
        the TIS weight (trainer vs rollout log-probs) applies. Without ``old_logprobs`` in the batch
        (one optimizer step per batch) the ratio is taken against the detached current log-probs."""

        def loss(logprobs: Tensor, mb: LossBatch, entropy: Tensor | None) -> tuple[Tensor, dict[str, float]]:
            counts = whole_batch_counts(mb)
            old = mb["old_logprobs"] if "old_logprobs" in mb.fields else logprobs.detach()
            total, m = ppo_policy_loss(
                logprobs,
                old,
                mb["advantages"],
                mb.loss_mask,
                clip_low=self.clip_low,
                clip_high=self.clip_high,
                dual_clip=self.dual_clip,
                aggregation=self.aggregation,
                behaviour_logprobs=mb["behaviour_logprobs"] if stale and self.tis_cap else None,
                tis_cap=self.tis_cap,
                **counts,
            )
            if self.kl_in_loss:
                kl = kl_penalty(logprobs, mb["ref_logprobs"], self.kl_estimator)  # type: ignore[arg-type]
                total = total + self.kl_coef * aggregate_loss(kl, mb.loss_mask, "token-mean", tokens=counts.get("tokens"))
                m["kl"] = float(masked_mean(kl.detach(), mb.loss_mask))
            if entropy is not None:
                m["entropy"] = float(masked_mean(entropy, mb.loss_mask))
            return total, m

        return loss


class Algorithm(Protocol):
    """An RL algorithm as the orchestrator sees it."""

    loss: PolicyLoss
    epochs: int
    mini_batches: int

    @property
    def steps_per_batch(self) -> int:
        """Optimizer steps per batch (``epochs`` x ``mini_batches``)."""
        ...

    @property
    def needs_critic(self) -> bool: ...

    @property
    def needs_old_logprobs(self) -> bool:
        """Old log-probs must be computed before training: more than one optimizer step per batch
        (the ratio must refer to the weights that existed before the first), or KL in the reward."""
        ...

    def advantages(
        self, rewards: Tensor, group_ids: Tensor, mask: Tensor, kl: Tensor | None, values: Tensor | None
    ) -> Advantages: ...

    def critic_loss_fn(self) -> LossFn | None: ...


@dataclass(frozen=True)
class _Steps:
    """What every algorithm carries: its policy loss and ``epochs`` passes of ``mini_batches``
    optimizer steps per batch."""

    loss: PolicyLoss = PolicyLoss()
    epochs: int = 1
    mini_batches: int = 1

    @property
    def steps_per_batch(self) -> int:
        return self.epochs * self.mini_batches

    @property
    def needs_old_logprobs(self) -> bool:
        return self.steps_per_batch > 1 or (self.loss.kl_in_reward and self.loss.kl_coef > 0)


def _kl_stat(kl: Tensor | None, mask: Tensor) -> dict[str, float]:
    return {"kl": float((kl.sum(-1) / mask.sum(-1).clamp(min=1)).mean())} if kl is not None else {}


SEQUENCE_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "grpo": partial(grpo_advantages, scale_by_std=True),
    "dr_grpo": partial(grpo_advantages, scale_by_std=False),
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
}
"""One advantage per sequence from ``(rewards [B], group_ids [B])``: GRPO, Dr. GRPO (no division
by the group std), RLOO (leave-one-out baseline), REINFORCE++ (group mean, then batch whitening)."""


@dataclass(frozen=True)
class SequenceLevel(_Steps):
    """Critic-free algorithms: sequence rewards (minus the summed KL when it is in the reward) ->
    one advantage per sequence by ``estimator`` (a key of ``SEQUENCE_ESTIMATORS``)."""

    estimator: str = "grpo"
    needs_critic = False

    def advantages(
        self, rewards: Tensor, group_ids: Tensor, mask: Tensor, kl: Tensor | None, values: Tensor | None
    ) -> Advantages:
        if kl is not None and self.loss.kl_in_reward and self.loss.kl_coef > 0:
            rewards = rewards - self.loss.kl_coef * kl.sum(-1)
        adv = SEQUENCE_ESTIMATORS[self.estimator](rewards, group_ids)
        return Advantages(adv, stats={**_kl_stat(kl, mask), "zero_advantage_frac": float((adv == 0).float().mean())})

    def critic_loss_fn(self) -> LossFn | None:
        return None


@dataclass(frozen=True)
class PPO(_Steps):
    """PPO: the sequence reward on its last response token (minus the per-token KL when it is in the
    reward), GAE against the critic's values, advantages whitened over valid tokens."""

    gamma: float = 1.0
    lam: float = 0.95
    value_clip: float | None = 0.2
    needs_critic = True

    def advantages(
        self, rewards: Tensor, group_ids: Tensor, mask: Tensor, kl: Tensor | None, values: Tensor | None
    ) -> Advantages:
        if values is None:
            raise ValueError("PPO advantages need the critic's values")
        valid = ~torch.isnan(rewards)
        tok_r = sequence_reward_on_last_token(torch.nan_to_num(rewards, nan=0.0), mask)
        if kl is not None and self.loss.kl_in_reward and self.loss.kl_coef > 0:
            tok_r = tok_r - self.loss.kl_coef * kl
        tok_mask = mask * valid[:, None]  # a masked sample trains neither the policy nor the critic
        adv, ret = gae(tok_r, values, tok_mask, gamma=self.gamma, lam=self.lam)
        return Advantages(whiten(adv, tok_mask), ret, _kl_stat(kl, mask))

    def critic_loss_fn(self) -> LossFn | None:
        clip = self.value_clip

        def loss(values: Tensor, mb: LossBatch, _: Tensor | None) -> tuple[Tensor, dict[str, float]]:
            # ``valid [b]``: 0 for a sample whose reward was masked; its returns are not a target
            # (its tokens still count in the whole-batch token count, as in the policy loss)
            mask = mb.loss_mask * mb["valid"][:, None] if "valid" in mb.fields else mb.loss_mask
            return value_loss(
                values, mb["old_values"], mb["returns"], mask, clip=clip, tokens=whole_batch_counts(mb).get("tokens")
            )

        return loss


def sequence_reward_on_last_token(rewards: Tensor, mask: Tensor) -> Tensor:
    """``[B, T]`` zeros with each sequence's reward ``[B]`` on its last response token."""
    tok_r = torch.zeros_like(mask, dtype=rewards.dtype)
    last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & (mask > 0)
    tok_r[last] = rewards.repeat_interleave(last.sum(-1))
    return tok_r


ALGORITHMS: dict[str, Callable[..., Algorithm]] = {
    **{name: partial(SequenceLevel, estimator=name) for name in SEQUENCE_ESTIMATORS},
    "ppo": PPO,
}
"""``algorithm.type`` -> constructor (keyword settings: ``loss``, ``epochs``, ``mini_batches`` and
the algorithm's own fields)."""


def build_algorithm(type: str, **settings: Any) -> Algorithm:
    if type not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {type!r}; known: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[type](**settings)
