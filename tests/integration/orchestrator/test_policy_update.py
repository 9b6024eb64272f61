"""Several optimizer steps per batch: old log-probs computed once, so the clip binds (real tiny
Llama, real TorchTrainer; no Ray)."""

import pytest
import torch

from grm.algorithms import PolicyLoss, build_algorithm
from grm.orchestrator.policy_update import mini_batches, train_on_batch
from grm.training.core import MICRO_BATCHES
from grm.training.torch_backend import TorchTrainer
from tests.integration.training.tiny import fixed_batch, tiny_llama

pytestmark = pytest.mark.slow


def run(epochs: int, mini: int) -> dict[str, float]:
    torch.manual_seed(0)
    algorithm = build_algorithm("grpo", loss=PolicyLoss(clip_low=0.2, clip_high=0.2), epochs=epochs, mini_batches=mini)
    trainer = TorchTrainer(tiny_llama(), lr=5e-2, micro_batch_size=2)
    batch = fixed_batch(8)
    if algorithm.needs_old_logprobs:  # what the policy actor's prepare pass does
        batch = batch.with_fields(old_logprobs=trainer.logprobs(batch))
    return train_on_batch(trainer, None, algorithm, batch)


def test_clip_binds_only_with_several_optimizer_steps():
    one = run(1, 1)
    assert one["optimizer_steps"] == 1 and one["clip_frac"] == 0.0 and one["ratio_mean"] == pytest.approx(1.0)
    MICRO_BATCHES.reset()
    many = run(3, 2)
    assert many["optimizer_steps"] == 6
    assert MICRO_BATCHES.done == 3 * 2 * 2  # epochs x mini-batches x micro-batches of 2: the live panel's count
    assert many["clip_frac"] > 0.0, many


def test_mini_batches_split_in_order():
    b = fixed_batch(8)
    parts = mini_batches(b, 4)
    assert [len(p) for p in parts] == [2, 2, 2, 2]
    assert torch.equal(torch.cat([p["advantages"] for p in parts]), b["advantages"])
