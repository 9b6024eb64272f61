"""One rank of a 2-rank DeepSpeed run on CPU (launched by test_two_ranks_gloo_match_one_rank):
``python two_ranks.py OUT.pt ZERO_STAGE``."""

import sys

import torch

from grm.training.deepspeed_backend import DeepSpeedTrainer
from tests.integration.training.tiny import fixed_batch, mixed_steps, tiny_llama

t = DeepSpeedTrainer(tiny_llama(), micro_batch_size=2, global_batch_size=8, zero_stage=int(sys.argv[2]), dtype="fp32", lr=1e-2)
metrics = mixed_steps(t)
shard = fixed_batch().with_totals().shard(t.rank, t.world)
torch.save({"metrics": metrics, "weights": t.state_dict(), "shard": shard.ids}, sys.argv[1])
# leave the process group before exiting: at interpreter exit a live gloo group's threads may
# abort the process ("terminate called without an active exception", exit code -6)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
