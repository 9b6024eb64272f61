"""Training batches: right-padded prompt+response token ids and per-token fields.

Token-level tensors are ``[B, L - 1]``, aligned with the *targets* ``input_ids[:, 1:]``: position t
holds the quantity for predicting token t + 1. ``loss_mask`` is 1 where that target is a response
token. Sequence-level fields (advantages, rewards) are ``[B]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from grm.models.weights import token_logprobs

__all__ = ["TrainBatch", "first_target", "token_logprobs"]


@dataclass
class TrainBatch:
    input_ids: Tensor
    """[B, L] prompt + response, right padded."""
    attention_mask: Tensor
    """[B, L] 1 on real tokens."""
    loss_mask: Tensor
    """[B, L-1] 1 where the target token input_ids[:, t+1] is a response token."""
    fields: dict[str, Tensor] = field(default_factory=dict)
    """Extra tensors: [B, L-1] token-level (old_logprobs, ref_logprobs, behaviour_logprobs, values,
    returns) or [B] sequence-level (advantages)."""
    ids: tuple[str, ...] = ()
    """Stable id of each row's sample (from rollout to loss row), when the caller gave them."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def __getitem__(self, key: str) -> Tensor:
        return self.fields[key]

    def with_fields(self, **extra: Tensor) -> TrainBatch:
        return TrainBatch(self.input_ids, self.attention_mask, self.loss_mask, {**self.fields, **extra}, self.ids)

    def select(self, idx: slice | Tensor) -> TrainBatch:
        ids = self.ids[idx] if isinstance(idx, slice) else tuple(self.ids[int(i)] for i in idx) if self.ids else ()
        return TrainBatch(
            self.input_ids[idx], self.attention_mask[idx], self.loss_mask[idx], {k: v[idx] for k, v in self.fields.items()}, ids
        )

    def micro_batches(self, size: int) -> list[TrainBatch]:
        """Split into consecutive micro-batches of ``size`` sequences, each trimmed to its longest row."""
        out = []
        for s in range(0, len(self), size):
            mb = self.select(slice(s, s + size))
            width = int(mb.attention_mask.sum(-1).max())
            out.append(mb.trim(width))
        return out

    def map_micro_batches(self, size: int, fn: Callable[[TrainBatch], Tensor]) -> Tensor:
        """``fn`` over micro-batches of ``size`` rows, its ``[b, w]`` outputs right-padded back to the
        batch's width and concatenated: ``[B, L-1]``, 0 outside ``loss_mask``."""
        width = self.loss_mask.shape[1]
        outs = [fn(mb) for mb in self.micro_batches(size)]
        return torch.cat([torch.nn.functional.pad(o, (0, width - o.shape[1])) for o in outs]) * self.loss_mask

    def trim(self, width: int) -> TrainBatch:
        """Drop right padding beyond ``width`` tokens."""
        if width >= self.input_ids.shape[1]:
            return self
        tok = {k: (v[:, : width - 1] if v.dim() == 2 else v) for k, v in self.fields.items()}
        return TrainBatch(
            self.input_ids[:, :width], self.attention_mask[:, :width], self.loss_mask[:, : width - 1], tok, self.ids
        )

    @classmethod
    def from_sequences(
        cls,
        prompts: Sequence[Sequence[int]],
        completions: Sequence[Sequence[int]],
        pad_id: int,
        ids: Sequence[str] = (),
        **token_values: Sequence[Sequence[float]] | Tensor,
    ) -> TrainBatch:
        """Build a batch from token id lists. ``token_values`` given as per-completion lists (one
        value per completion token, e.g. behaviour log-probs) are placed at their target positions;
        tensors are taken as they are (``[B]`` sequence-level or ``[B, L-1]``)."""
        B = len(prompts)
        L = max(len(p) + len(c) for p, c in zip(prompts, completions, strict=True))
        tokens = torch.full((B, L), pad_id, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        loss_mask = torch.zeros((B, L - 1), dtype=torch.float32)
        for b, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            n = len(p) + len(c)
            tokens[b, :n] = torch.tensor(list(p) + list(c), dtype=torch.long)
            attn[b, :n] = 1
            loss_mask[b, len(p) - 1 : n - 1] = 1
        fields: dict[str, Tensor] = {}
        for name, vals in token_values.items():
            if isinstance(vals, Tensor):
                fields[name] = vals
                continue
            t = torch.zeros((B, L - 1), dtype=torch.float32)
            for b, (p, v) in enumerate(zip(prompts, vals, strict=True)):
                t[b, len(p) - 1 : len(p) - 1 + len(v)] = torch.tensor(list(v), dtype=torch.float32)
            fields[name] = t
        return cls(tokens, attn, loss_mask, fields, tuple(ids))


def first_target(loss_mask: Tensor) -> int:
    """The first column of ``loss_mask`` [B, L-1] that any row trains on (0 if none)."""
    cols = loss_mask.any(0).nonzero()
    return int(cols[0]) if len(cols) else 0
