"""RL math as pure tensor functions (shapes documented in each module). Imports torch."""

from grm.algorithms.advantages import gae, grpo_advantages, reinforce_pp_advantages, rloo_advantages
from grm.algorithms.losses import (
    aggregate_loss, entropy_from_logits, kl_penalty, masked_mean, ppo_policy_loss, value_loss,
)

__all__ = [
    "aggregate_loss", "entropy_from_logits", "gae", "grpo_advantages", "kl_penalty", "masked_mean",
    "ppo_policy_loss", "reinforce_pp_advantages", "rloo_advantages", "value_loss",
]
