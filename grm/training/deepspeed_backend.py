"""DeepSpeed trainer: ZeRO stage 0-3, bf16 or fp32, CPU (gloo) or GPU, one or more ranks.

On CPU set ``DS_ACCELERATOR=cpu`` (done here when no GPU is visible). We pass torch's AdamW so
DeepSpeed does not JIT-compile its fused CPU Adam (45-105 s on first use). DeepSpeed moves the
module to its accelerator (``engine.device``); micro-batches follow it there.

Every rank gets the whole batch and trains on its token-balanced shard; each micro-batch's loss
is its share of the whole batch's loss (``LossFn``). DeepSpeed divides gradients by the
accumulation steps and averages them over ranks, so the trainer backpropagates share x ranks
without the 1/gas scaling: the update is the whole batch's gradient, as with one rank.

Each call with collectives runs ``failing_together`` (``grm.training.distributed``): a rank that
fails there tears the process group down, so the other ranks stop waiting for it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from grm.base import atomic_dir, check_complete
from grm.models import lora
from grm.models.checkpoints import LORA_FILE, refuse_foreign_pickles
from grm.models.weights import unique_tensors
from grm.training.batch import TrainBatch
from grm.training.core import (
    Forward,
    LossFn,
    accumulate,
    adamw,
    lr_lambda,
    policy_forward,
    rng_state,
    set_rng_state,
    step_metrics,
)
from grm.training.distributed import COLLECTIVE_TIMEOUT_S, failing_together, init_distributed


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
        collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
    ) -> None:
        """``collective_timeout_s``: how long a rank waits for the others in one collective."""
        if not torch.cuda.is_available():
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed
        import torch.distributed as dist

        init_distributed(timeout_s=collective_timeout_s)
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
        optimizer = adamw(module, lr, weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup_steps, total_steps, schedule))  # type: ignore[arg-type]
        with self._together("initialize"):  # broadcasts the weights from rank 0
            self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=module, optimizer=optimizer, lr_scheduler=scheduler, config=config
            )
        self.zero_stage = zero_stage
        self.lora = lora.is_wrapped(module)
        if self.lora and zero_stage == 3:
            raise ValueError("LoRA adapters with ZeRO stage 3 are not supported (use zero_stage 0-2)")
        self.step_count = 0

    @property
    def module(self) -> torch.nn.Module:
        return self.engine.module

    @contextmanager
    def _together(self, call: str) -> Iterator[None]:
        with failing_together(self.rank, self.world, call):
            yield

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> Tensor:
        """Outputs for the whole batch given to this rank (not sharded: every rank may ask), on the CPU."""
        with self._together("logprobs"):  # ZeRO-3 gathers each layer's weights
            self.engine.eval()
            out = batch.map_micro_batches(self.micro_batch_size, lambda mb: self.forward(self.engine, mb, False)[0])
            self.engine.train()
        return out

    def step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over the global ``batch`` (every rank passes the same one); returns
        the global metrics on every rank."""
        with self._together("step"):
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
        """Full weights on CPU (gathered from every rank under ZeRO-3), in the module's dtype; with
        adapters (ZeRO 0-2), the merged weights under the base model's names."""
        if self.lora:
            return lora.merged_state_dict(self.engine.module)
        if self.zero_stage == 3:
            import deepspeed

            params = list(self.engine.module.parameters())
            with self._together("state_dict"), deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                return {k: v.detach().clone().cpu() for k, v in self.engine.module.state_dict().items()}
        return {k: v.detach().clone().cpu() for k, v in self.engine.module.state_dict().items()}

    def weight_buckets(self, bucket_bytes: int) -> Iterator[list[tuple[str, Tensor]]]:
        """Under ZeRO-3 each bucket's parameters are gathered while it is in use (a bucket's size
        counts their full sizes), then released."""
        from grm.training.weight_group import weight_buckets

        if self.lora:  # the engines hold the merged model
            yield from weight_buckets(iter(unique_tensors(lora.merged_state_dict(self.engine.module)).items()), bucket_bytes)
            return
        named = list(self.engine.module.named_parameters())
        if self.zero_stage != 3:
            yield from weight_buckets(((k, v.detach()) for k, v in named), bucket_bytes)
            return
        import deepspeed

        full = [(k, v, v.ds_numel * v.element_size()) for k, v in named]
        bucket: list[tuple[str, Tensor]] = []
        size = 0
        for i, (k, v, n) in enumerate(full):
            bucket.append((k, v))
            size += n
            if i + 1 == len(full) or size + full[i + 1][2] > bucket_bytes:
                params = [p for _, p in bucket]
                with self._together("weight_buckets"), deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                    yield [(name, p.detach()) for name, p in bucket]
                bucket, size = [], 0

    def save(self, path: str | Path) -> None:
        import torch.distributed as dist

        path = Path(path)
        with self._together("save"):
            with atomic_dir(path, is_writer=self.rank == 0) as tmp:
                dist.barrier()
                self.engine.save_checkpoint(
                    str(tmp),
                    tag="state",
                    client_state={"step": self.step_count, "rng": rng_state()},
                    exclude_frozen_parameters=self.lora,  # with adapters, the base weights are the base model's
                )
                if self.lora and self.rank == 0:
                    (tmp / LORA_FILE).write_text(json.dumps(lora.settings_of(self.engine.module)), encoding="utf-8")
                dist.barrier()
            dist.barrier()

    def load(self, path: str | Path) -> None:
        with self._together("load"):
            path = check_complete(path)
            refuse_foreign_pickles(path)  # DeepSpeed unpickles with weights_only=False
            if self.lora:  # DeepSpeed loads a module non-strictly: check the adapters' names first
                files = sorted((Path(path) / "state").glob("mp_rank_*_model_states.pt"))
                if not files:
                    raise ValueError(f"{path}: no DeepSpeed model states file (state/mp_rank_*_model_states.pt)")
                saved = torch.load(files[0], map_location="cpu", weights_only=False)["module"]
                saved = {k: v for k, v in saved.items() if ".lora_" in k}  # it also keeps a tied head
                lora.load_adapters(self.engine.module, saved, str(path))
            _, client = self.engine.load_checkpoint(
                str(path),
                tag="state",
                load_optimizer_states=True,
                load_lr_scheduler_states=True,
                load_module_strict=not self.lora,  # adapters only: the base weights stay as loaded
            )
        self.step_count = client["step"]
        set_rng_state(client["rng"])


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
