"""Trainer backends (torch, DeepSpeed), batches, checkpoints and weight sync. Imports torch."""

from grm.loss_fn import LossFn
from grm.training.batch import TrainBatch, token_logprobs
from grm.training.core import TrainerBackend, policy_forward

__all__ = ["LossFn", "TrainBatch", "TrainerBackend", "policy_forward", "token_logprobs"]
