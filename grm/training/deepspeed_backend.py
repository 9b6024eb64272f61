"""DeepSpeed trainer: ZeRO stage 0-3, bf16 or fp32, CPU (gloo) or GPU, one or more ranks.

On CPU set ``DS_ACCELERATOR=cpu`` (done here when no GPU is visible). We pass torch's AdamW so
DeepSpeed does not JIT-compile its fused CPU Adam (45-105 s on first use). DeepSpeed moves the
module to its accelerator (``engine.device``); micro-batches follow it there.

Every rank gets the whole batch and trains on its token-balanced shard; each micro-batch's loss
is its share of the whole batch's loss (``LossFn``). DeepSpeed divides gradients by the
accumulation steps and averages them over ranks, so the trainer backpropagates share x ranks
without the 1/gas scaling: the update is the whole batch's gradient, as with one rank.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from grm.base import atomic_dir, check_complete, free_port
from grm.training.batch import TrainBatch
from grm.training.core import Forward, LossFn, accumulate, lr_lambda, policy_forward, rng_state, set_rng_state, step_metrics


def init_distributed(port: int | None = None) -> None:
    """Start torch.distributed for a single process if no launcher did (gloo on CPU)."""
    import deepspeed
    import torch.distributed as dist

    if dist.is_initialized():
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port or free_port()))
    deepspeed.init_distributed(dist_backend="gloo" if not torch.cuda.is_available() else "nccl")


class DeepSpeedTrainer:
    def __init__(
        self,
        module: torch.nn.Module,
        *,
        lr: float,
        micro_batch_size: int,
        global_batch_size: int,
        zero_stage: int = 2,
        dtype: str = "bf16",
        max_grad_norm: float = 1.0,
        warmup_steps: int = 0,
        total_steps: int = 1,
        schedule: str = "constant",
        weight_decay: float = 0.0,
        forward: Forward = policy_forward,
        entropy: bool = False,
        extra_config: dict[str, Any] | None = None,
    ) -> None:
        if not torch.cuda.is_available():
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed
        import torch.distributed as dist

        init_distributed()
        world = dist.get_world_size()
        if global_batch_size % (micro_batch_size * world):
            raise ValueError(
                f"global batch {global_batch_size} is not divisible by micro_batch_size {micro_batch_size} x ranks {world}"
            )
        self.world = world
        self.rank = dist.get_rank()
        self.micro_batch_size = micro_batch_size
        self.global_batch_size = global_batch_size
        self.gas = global_batch_size // (micro_batch_size * world)
        self.forward = forward
        self.entropy = entropy
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": micro_batch_size,
            "gradient_accumulation_steps": self.gas,
            "gradient_clipping": max_grad_norm,
            "zero_optimization": {"stage": zero_stage},
            "bf16": {"enabled": dtype == "bf16"},
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        config = _merge(config, extra_config or {})
        module.train()
        optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup_steps, total_steps, schedule))  # type: ignore[arg-type]
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=module, optimizer=optimizer, lr_scheduler=scheduler, config=config
        )
        self.zero_stage = zero_stage
        self.step_count = 0

    @property
    def module(self) -> torch.nn.Module:
        return self.engine.module

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> Tensor:
        """Outputs for the whole batch given to this rank (not sharded: every rank may ask), on the CPU."""
        self.engine.eval()
        out = batch.map_micro_batches(self.micro_batch_size, lambda mb: self.forward(self.engine, mb, False)[0])
        self.engine.train()
        return out

    def step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over the global ``batch`` (every rank passes the same one); returns
        the global metrics on every rank."""
        if len(batch) != self.global_batch_size:
            raise ValueError(f"batch of {len(batch)} sequences; this trainer was built for {self.global_batch_size}")
        micro = batch.with_totals().shard(self.rank, self.world).micro_batches(self.micro_batch_size)

        def backward(loss: Tensor) -> None:
            self.engine.backward(loss * self.world, scale_wrt_gas=False)
            self.engine.step()  # steps the optimizer at the accumulation boundary only

        loss, rows, tokens = accumulate(self.engine, micro, self.forward, loss_fn, self.entropy, backward)
        self.step_count += 1
        grad_norm = self.engine.get_global_grad_norm()
        return {
            **step_metrics(loss, rows, self._all_reduce if self.world > 1 else None, tokens),
            "grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
            "lr": self.scheduler.get_last_lr()[0],
        }

    def _all_reduce(self, t: Tensor) -> Tensor:
        """Sum over ranks (on the engine's device: NCCL reduces accelerator tensors only)."""
        import torch.distributed as dist

        on_device = t.to(self.engine.device)
        dist.all_reduce(on_device)
        return on_device.cpu()

    def state_dict(self) -> dict[str, Tensor]:
        """Full weights on CPU (gathered from every rank under ZeRO-3), in the module's dtype."""
        if self.zero_stage == 3:
            import deepspeed

            params = list(self.engine.module.parameters())
            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                return {k: v.detach().clone().cpu() for k, v in self.engine.module.state_dict().items()}
        return {k: v.detach().clone().cpu() for k, v in self.engine.module.state_dict().items()}

    def save(self, path: str | Path) -> None:
        import torch.distributed as dist

        path = Path(path)
        with atomic_dir(path, is_writer=self.rank == 0) as tmp:
            dist.barrier()
            self.engine.save_checkpoint(str(tmp), tag="state", client_state={"step": self.step_count, "rng": rng_state()})
            dist.barrier()
        dist.barrier()

    def load(self, path: str | Path) -> None:
        path = check_complete(path)
        _, client = self.engine.load_checkpoint(str(path), tag="state", load_optimizer_states=True, load_lr_scheduler_states=True)
        self.step_count = client["step"]
        set_rng_state(client["rng"])


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
