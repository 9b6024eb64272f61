"""A bf16 (or fp16) model's LM head computed in fp32, which the hf engine installs on the models it
runs in those dtypes."""

from __future__ import annotations

from typing import Any

import torch


class Fp32Head:
    """A bf16 (or fp16) model's LM head computed in fp32: the last hidden state and an fp32 copy of
    the head's weight, so logits are not rounded to bf16. Rounded logits are ~3 significant digits:
    at the size of an LM's logits (10-30) that is steps of 0.06-0.125, so a judge's log-odds between
    two candidates came in multiples of 0.125 and tied on 41% of mt-bench pairs for Qwen2.5-Coder-0.5B
    in bf16 (8% for 1.5B). Costs one fp32 copy of the head (vocab x hidden x 4 bytes: 0.9 GB for
    Qwen 1.5B, 0.11 GB for SmolLM2) and the head's matmul in fp32 (a few positions per call in
    scoring and decoding). Installed as the head module's ``forward``, so every call of the model
    returns fp32 logits and its parameter names stay as they are."""

    def __init__(self, head: torch.nn.Linear) -> None:
        self.head = head
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None

    @classmethod
    def install(cls, model: Any) -> Fp32Head | None:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if not isinstance(head, torch.nn.Linear) or head.weight.dtype == torch.float32:
            return None
        out = cls(head)
        head.forward = out  # type: ignore[method-assign]
        return out

    def refresh(self) -> None:
        """The weights changed in place (``update_weights``): copy them again at the next call."""
        self.weight = self.bias = None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.weight is None:
            self.weight = self.head.weight.detach().float()
            self.bias = None if self.head.bias is None else self.head.bias.detach().float()
        return torch.nn.functional.linear(hidden.float(), self.weight, self.bias)
