"""RL math as pure tensor functions (shapes documented in each module) and the ``Algorithm`` objects
built from them. Imports torch; from grm only the loss contract (``grm.loss_fn``)."""

from grm.algorithms.advantages import gae, grpo_advantages, reinforce_pp_advantages, rloo_advantages, whiten
from grm.algorithms.algorithm import (
    ALGORITHMS,
    PPO,
    SEQUENCE_ESTIMATORS,
    Advantages,
    Algorithm,
    PolicyLoss,
    SequenceLevel,
    build_algorithm,
    sequence_reward_on_last_token,
)
from grm.algorithms.losses import aggregate_loss, entropy_from_logits, kl_penalty, masked_mean, ppo_policy_loss, value_loss

__all__ = [
    "ALGORITHMS",
    "PPO",
    "Advantages",
    "Algorithm",
    "SEQUENCE_ESTIMATORS",
    "PolicyLoss",
    "SequenceLevel",
    "aggregate_loss",
    "build_algorithm",
    "entropy_from_logits",
    "gae",
    "grpo_advantages",
    "kl_penalty",
    "masked_mean",
    "ppo_policy_loss",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "sequence_reward_on_last_token",
    "value_loss",
    "whiten",
]
