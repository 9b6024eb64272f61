"""Models the trainer works with besides the policy: a frozen reference and a critic (value model)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from grm.models.device import module_device
from grm.training.batch import TrainBatch
from grm.training.core import policy_forward


class ReferenceModel:
    """Frozen copy of the initial policy; gives reference log-probs for the KL term. ``device``:
    where the model runs (``grm.models.device.role_device``); None leaves it where it is."""

    def __init__(
        self, model: str | nn.Module, *, dtype: str = "fp32", micro_batch_size: int = 8, device: torch.device | str | None = None
    ) -> None:
        if isinstance(model, str):
            from grm.models.loading import load_model

            model = load_model(model, dtype)[0]
        self.module = model if device is None else model.to(device)
        self.module.eval().requires_grad_(False)
        self.micro_batch_size = micro_batch_size

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> Tensor:
        """``[B, L-1]`` on the CPU, 0 outside ``loss_mask``."""
        return batch.map_micro_batches(
            self.micro_batch_size,
            lambda mb: policy_forward(self.module, mb, False)[0],
        )


class AdapterOffReference:
    """The reference of a LoRA policy (``train.lora``) colocated with it: the trainer's own module
    with its adapters switched off is the base model, so no second copy of the weights is held. Its
    passes run under the policy actor's model lock, never beside training."""

    def __init__(self, module: nn.Module, micro_batch_size: int = 8) -> None:
        self.module = module
        self.micro_batch_size = micro_batch_size

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> Tensor:
        """``[B, L-1]`` on the CPU, 0 outside ``loss_mask``: the base model's (adapters off, eval mode)."""
        training = self.module.training
        self.module.eval()
        try:
            with self.module.disable_adapter():
                return batch.map_micro_batches(self.micro_batch_size, lambda mb: policy_forward(self.module, mb, False)[0])
        finally:
            self.module.train(training)


class ValueModel(nn.Module):
    """Critic: the policy's transformer body with a scalar value head, ``values [B, L]``."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.value_head.weight, std=1.0 / (hidden_size + 1))
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_pretrained(cls, model: str, dtype: str = "fp32") -> ValueModel:
        from grm.models.loading import load_body

        body = load_body(model, dtype)
        return cls(body, body.config.hidden_size)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self.value_head(h.to(self.value_head.weight.dtype)).squeeze(-1)


def value_forward(module: nn.Module, mb: TrainBatch, with_entropy: bool) -> tuple[Tensor, None]:
    """Forward for a critic trainer: the value of the state before each target token, ``[b, L-1]``,
    on the module's device."""
    device = module_device(module)
    return module(mb.input_ids.to(device), mb.attention_mask.to(device))[:, :-1].float(), None
