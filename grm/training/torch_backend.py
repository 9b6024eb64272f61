"""Plain torch trainer: AdamW, LR schedule, gradient accumulation and clipping, in one process.

For the smallest runs and as the reference the DeepSpeed backend is checked against.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from grm.base import atomic_dir, check_complete
from grm.models import lora
from grm.models.checkpoints import LORA_FILE, refuse_foreign_pickles
from grm.models.device import scalar, to_cpu
from grm.models.weights import tied_aliases, unique_tensors
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


class TorchTrainer:
    """``device``: where the module is moved (``grm.models.device.role_device``); None leaves it
    where it is."""

    def __init__(
        self,
        module: torch.nn.Module,
        *,
        lr: float,
        micro_batch_size: int,
        max_grad_norm: float = 1.0,
        warmup_steps: int = 0,
        total_steps: int = 1,
        schedule: str = "constant",
        weight_decay: float = 0.0,
        forward: Forward = policy_forward,
        entropy: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        self.module = module if device is None else module.to(device)
        self.module.train()
        self.forward = forward
        self.micro_batch_size = micro_batch_size
        self.max_grad_norm = max_grad_norm
        self.entropy = entropy
        self.optimizer = adamw(module, lr, weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(warmup_steps, total_steps, schedule))  # type: ignore[arg-type]
        self.step_count = 0

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> Tensor:
        return batch.map_micro_batches(self.micro_batch_size, lambda mb: self.forward(self.module, mb, False)[0])

    def step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """The loss of each micro-batch is its share of the whole batch's (see ``LossFn``): the
        shares' gradients add up to the whole batch's gradient."""
        micro = batch.with_totals().micro_batches(self.micro_batch_size)
        self.optimizer.zero_grad(set_to_none=True)
        loss, rows, tokens = accumulate(self.module, micro, self.forward, loss_fn, self.entropy, lambda loss: loss.backward())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.step_count += 1
        return {**step_metrics(loss, rows, weights=tokens), "grad_norm": scalar(grad_norm), "lr": self.scheduler.get_last_lr()[0]}

    def weight_buckets(self, bucket_bytes: int) -> Iterator[list[tuple[str, Tensor]]]:
        from grm.training.weight_group import weight_buckets

        if lora.is_wrapped(self.module):  # the engines hold the merged model
            return weight_buckets(iter(unique_tensors(lora.merged_state_dict(self.module)).items()), bucket_bytes)
        return weight_buckets(((k, v.detach()) for k, v in self.module.named_parameters()), bucket_bytes)

    def state_dict(self) -> dict[str, Tensor]:
        """Weights on the CPU (copies); with adapters, the merged weights under the base model's names."""
        if lora.is_wrapped(self.module):
            return lora.merged_state_dict(self.module)
        return {k: to_cpu(v.detach(), copy=True) for k, v in self.module.state_dict().items()}

    def save(self, path: str | Path) -> None:
        with atomic_dir(path) as tmp:
            if lora.is_wrapped(self.module):  # the adapters alone, and what merging them needs
                save_file({k: to_cpu(v) for k, v in lora.adapter_state(self.module).items()}, str(tmp / "model.safetensors"))
                (tmp / LORA_FILE).write_text(json.dumps(lora.settings_of(self.module)), encoding="utf-8")
            else:  # tied weights (embeddings = lm head) are stored once
                unique = unique_tensors(self.module.state_dict())
                save_file({k: to_cpu(v) for k, v in unique.items()}, str(tmp / "model.safetensors"))
            torch.save(
                {
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "step": self.step_count,
                    "rng": rng_state(),
                },
                tmp / "trainer_state.pt",
            )

    def load(self, path: str | Path) -> None:
        path = check_complete(path)
        saved = load_file(str(path / "model.safetensors"))
        if lora.is_wrapped(self.module):
            lora.load_adapters(self.module, saved, str(path))
            self._load_trainer_state(path)
            return
        # strict but for the tied LM head, which ``save`` stores once under the embedding's name
        missing = set(self.module.state_dict()) - set(saved) - tied_aliases(self.module.state_dict())
        unexpected = set(saved) - set(self.module.state_dict())
        if missing or unexpected:
            raise ValueError(
                f"{path}: checkpoint does not match the model: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
            )
        self.module.load_state_dict(saved, strict=False)
        self._load_trainer_state(path)

    def _load_trainer_state(self, path: Path) -> None:
        refuse_foreign_pickles(path)
        state = torch.load(path / "trainer_state.pt", weights_only=False, map_location="cpu")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step_count = state["step"]
        set_rng_state(state["rng"])
