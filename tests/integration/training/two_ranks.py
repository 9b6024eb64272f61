"""One rank of a 2-rank DeepSpeed ZeRO-2 run on CPU (launched by test_two_ranks_gloo_match_one_rank)."""

import sys

import torch

from grm.training.deepspeed_backend import DeepSpeedTrainer
from tests.integration.training.tiny import fixed_batch, nll_loss, tiny_llama

t = DeepSpeedTrainer(tiny_llama(), micro_batch_size=2, global_batch_size=8, zero_stage=2, dtype="fp32", lr=1e-2)
batch = fixed_batch()
losses = [t.step(batch, nll_loss)["loss"] for _ in range(3)]
torch.save({"losses": losses, "weights": t.state_dict()}, sys.argv[1])
