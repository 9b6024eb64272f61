"""The RL algorithm's section of a pipeline (``algorithm:``): batch sizes, the clipped policy loss,
KL, filtering, length control, and the per-algorithm fields, chosen by ``type``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Tag, model_validator

from grm.config.base import Strict, by_type


class KLSpec(Strict):
    coef: float = Field(0.0, ge=0)
    """KL coefficient; 0 disables the reference model's KL term."""
    estimator: Literal["k1", "k2", "k3"] = "k3"
    """Schulman's KL estimators."""
    in_reward: bool = False
    """Subtract the KL from the reward (PPO style) instead of adding it to the loss."""


class LengthControlSpec(Strict):
    """Length control of the combined reward, per group (one prompt's responses), after the judges'
    rewards are combined and the overlong penalty is taken. ``length_corr/...`` in metrics.jsonl
    shows how much each judge's reward and the combined reward follow length, before and after."""

    method: Literal["none", "regress", "penalty"] = "none"
    """none: off. regress: fit reward = a + b x length by least squares over the group's unmasked
    responses and subtract b x (length - the group's mean length): the group's mean reward is kept,
    responses of equal length keep their difference, and no linear dependence on length is left;
    groups with fewer than 3 unmasked responses or equal lengths are left as they are. penalty:
    subtract ``coef`` x (length - the group's median length) from responses longer than the median."""
    coef: float | None = Field(None, ge=0)
    """(penalty only, required there) reward taken per unit of length beyond the group median,
    e.g. 0.002 per token: a response 100 tokens past the median loses 0.2 of the combined reward."""
    unit: Literal["tokens", "chars"] = "tokens"
    """How length is counted: response tokens, or characters (the unit of ``grm eval``'s length
    columns and of ``grm eval --length-control penalty:COEF``)."""

    @model_validator(mode="after")
    def _coef_for_penalty(self) -> LengthControlSpec:
        if self.method == "penalty" and self.coef is None:
            raise ValueError(
                f"method penalty needs coef: the reward taken per {self.unit.removesuffix('s')} beyond the group median"
                " (e.g. coef: 0.002)"
            )
        if self.method != "penalty" and self.coef is not None:
            raise ValueError(f"coef only applies to method penalty (method is {self.method}); remove it")
        return self


class _AlgorithmCommon(Strict):
    """Fields every algorithm shares: batch sizes, the clipped policy loss, KL, filtering."""

    group_size: int = Field(4, ge=1, le=1024)
    """Responses sampled per prompt (global)."""
    prompts_per_step: int = Field(8, ge=1, le=65536)
    """Prompts per training step (global); the batch is prompts_per_step x group_size sequences."""
    kl: KLSpec = KLSpec()
    """KL penalty against the frozen reference (``kl.coef`` 0, the default: off, no reference needed)."""
    clip_low: float = Field(0.2, ge=0)
    """Lower PPO ratio clip (dimensionless): a token's ratio is clipped below at 1 - clip_low."""
    clip_high: float = Field(0.2, ge=0)
    """PPO ratio clip range [1 - clip_low, 1 + clip_high] (clip-higher: clip_high > clip_low)."""
    dual_clip: float | None = Field(None, gt=1)
    """Dual-clip PPO: the loss of a negative-advantage token is capped at -A x dual_clip (> 1); None: off."""
    loss_aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """How per-token losses of one optimizer step become one number: ``token-mean`` (every response
    token weighs the same, DAPO), ``seq-mean-token-mean`` (mean per sequence, then over sequences,
    GRPO) or ``seq-mean-token-sum`` (sum per sequence, mean over sequences, Dr. GRPO)."""
    dynamic_filtering: bool = False
    """Drop groups whose rewards have no variance and refill from the next prompts (DAPO)."""
    tis_cap: float | None = Field(2.0, gt=0)
    """Truncated importance-sampling cap for stale samples (async); None disables TIS."""
    overlong_penalty: float = Field(0.0, ge=0)
    """Subtracted from the reward of responses cut by max_new_tokens (finish_reason length)."""
    length_control: LengthControlSpec = LengthControlSpec()
    """Remove (regress) or penalise (penalty) the combined reward's dependence on response length,
    group by group; off by default."""
    epochs: int = Field(1, ge=1, le=100)
    """Optimizer passes over each step's batch. Above 1 (or with mini_batches > 1), old log-probs
    are computed once before the first pass and the ratio clip binds."""
    mini_batches: int = Field(1, ge=1, le=65536)
    """Optimizer steps per pass: the step's batch is split into this many mini-batches."""

    def _check_groups(self, kind: str) -> None:
        if self.group_size < 2:
            raise ValueError(f"{kind} needs group_size >= 2 (advantages are relative within a group)")

    @model_validator(mode="after")
    def _length_control_needs_groups(self) -> _AlgorithmCommon:
        need = {"none": 1, "penalty": 2, "regress": 3}[self.length_control.method]
        if self.group_size < need:
            raise ValueError(
                f"length_control.method {self.length_control.method} works within a prompt's group and needs "
                f"group_size >= {need} (group_size is {self.group_size})"
            )
        return self


class GRPOSpec(_AlgorithmCommon):
    """GRPO: advantage = (reward - group mean) / group std."""

    type: Literal["grpo"] = "grpo"
    """Selects GRPO (the default when ``algorithm.type`` is absent)."""

    @model_validator(mode="after")
    def _groups(self) -> GRPOSpec:
        self._check_groups(self.type)
        return self


class DrGRPOSpec(_AlgorithmCommon):
    """Dr. GRPO: advantage = reward - group mean (no division by the std)."""

    type: Literal["dr_grpo"] = "dr_grpo"
    """Selects Dr. GRPO."""

    @model_validator(mode="after")
    def _groups(self) -> DrGRPOSpec:
        self._check_groups(self.type)
        return self


class RLOOSpec(_AlgorithmCommon):
    """REINFORCE leave-one-out: advantage = reward - mean of the group's other rewards."""

    type: Literal["rloo"] = "rloo"
    """Selects RLOO."""

    @model_validator(mode="after")
    def _groups(self) -> RLOOSpec:
        self._check_groups(self.type)
        return self


class ReinforcePPSpec(_AlgorithmCommon):
    """REINFORCE++(-baseline): group mean subtracted, then whitened over the batch."""

    type: Literal["reinforce_pp"] = "reinforce_pp"
    """Selects REINFORCE++."""


class PPOSpec(_AlgorithmCommon):
    """PPO with a critic (a value head on the policy's transformer, trained beside the policy in the
    policy's actor) and GAE over response tokens."""

    type: Literal["ppo"] = "ppo"
    """Selects PPO (adds a critic to the policy's actor)."""
    gamma: float = Field(1.0, ge=0, le=1)
    """Discount for GAE."""
    lam: float = Field(0.95, ge=0, le=1)
    """GAE lambda."""
    value_clip: float | None = Field(0.2, gt=0)
    """Value-loss clip range; None disables clipping."""
    critic_lr: float = Field(1e-5, gt=0, le=1)
    """Critic learning rate."""


AlgorithmSpec = Annotated[
    Annotated[GRPOSpec, Tag("grpo")]
    | Annotated[DrGRPOSpec, Tag("dr_grpo")]
    | Annotated[RLOOSpec, Tag("rloo")]
    | Annotated[ReinforcePPSpec, Tag("reinforce_pp")]
    | Annotated[PPOSpec, Tag("ppo")],
    by_type(["grpo", "dr_grpo", "rloo", "reinforce_pp", "ppo"], default="grpo"),
]
"""The RL algorithm, chosen by ``type`` (default grpo); PPO-only fields exist only on ``ppo``."""
