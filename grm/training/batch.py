"""Training batches: right-padded prompt+response token ids and per-token fields.

Token-level tensors are ``[B, L - 1]``, aligned with the *targets* ``input_ids[:, 1:]``: position t
holds the quantity for predicting token t + 1. ``loss_mask`` is 1 where that target is a response
token. Sequence-level fields (advantages, rewards) are ``[B]``.

Batches are built on the CPU; ``to(device)`` moves one (a micro-batch) to a module's device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from grm.models.device import to_cpu
from grm.models.weights import token_logprobs
from grm.sharding import balanced_partition

__all__ = ["BatchTotals", "TrainBatch", "balanced_partition", "first_target", "token_logprobs"]


@dataclass(frozen=True)
class BatchTotals:
    """Counts over the whole batch of one optimizer step (every micro-batch, every rank): what its
    loss is normalised by, so that the gradient does not depend on how the batch is split."""

    tokens: float
    """Response tokens (``loss_mask`` ones)."""
    sequences: float
    """Rows with at least one response token."""

    @classmethod
    def of(cls, loss_mask: Tensor) -> BatchTotals:
        return cls(float(loss_mask.sum()), float((loss_mask.sum(-1) > 0).sum()))


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
    totals: BatchTotals | None = None
    """Counts of the whole batch this one is part of (set by the trainer; the losses divide by them)."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def __getitem__(self, key: str) -> Tensor:
        return self.fields[key]

    def with_fields(self, **extra: Tensor) -> TrainBatch:
        return replace(self, fields={**self.fields, **extra})

    def with_totals(self) -> TrainBatch:
        """This batch marked as a whole: its parts (``select``, ``micro_batches``) carry its counts."""
        return replace(self, totals=BatchTotals.of(self.loss_mask))

    def to(self, device: torch.device | str) -> TrainBatch:
        """Every tensor on ``device`` (ids and totals unchanged)."""
        return replace(
            self,
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            loss_mask=self.loss_mask.to(device),
            fields={k: v.to(device) for k, v in self.fields.items()},
        )

    def select(self, idx: slice | Tensor) -> TrainBatch:
        ids = self.ids[idx] if isinstance(idx, slice) else tuple(self.ids[int(i)] for i in idx) if self.ids else ()
        return TrainBatch(
            self.input_ids[idx],
            self.attention_mask[idx],
            self.loss_mask[idx],
            {k: v[idx] for k, v in self.fields.items()},
            ids,
            self.totals,
        )

    def shard(self, rank: int, ranks: int) -> TrainBatch:
        """Rank ``rank``'s share of ``ranks``: ``balanced_partition`` of the rows by their tokens
        (prompt + response), the same on every rank."""
        if ranks == 1:
            return self
        lengths = [int(n) for n in self.attention_mask.sum(-1).tolist()]
        return self.select(torch.tensor(balanced_partition(lengths, ranks)[rank], dtype=torch.long))

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
        batch's width and concatenated on the CPU: ``[B, L-1]``, 0 outside ``loss_mask``."""
        width = self.loss_mask.shape[1]
        outs = [to_cpu(fn(mb)) for mb in self.micro_batches(size)]
        return torch.cat([torch.nn.functional.pad(o, (0, width - o.shape[1])) for o in outs]) * self.loss_mask

    def trim(self, width: int) -> TrainBatch:
        """Drop right padding beyond ``width`` tokens."""
        if width >= self.input_ids.shape[1]:
            return self
        tok = {k: (v[:, : width - 1] if v.dim() == 2 else v) for k, v in self.fields.items()}
        return replace(
            self,
            input_ids=self.input_ids[:, :width],
            attention_mask=self.attention_mask[:, :width],
            loss_mask=self.loss_mask[:, : width - 1],
            fields=tok,
        )

    @classmethod
    def from_sequences(
        cls,
        prompts: Sequence[Sequence[int]],
        completions: Sequence[Sequence[int]],
        pad_id: int,
        ids: Sequence[str] = (),
        completion_masks: Sequence[Sequence[int] | None] | None = None,
        **token_values: Sequence[Sequence[float]] | Tensor,
    ) -> TrainBatch:
        """Build a batch from token id lists. ``token_values`` given as per-completion lists (one
        value per completion token, e.g. behaviour log-probs) are placed at their target positions;
        tensors are taken as they are (``[B]`` sequence-level or ``[B, L-1]``). ``completion_masks``
        (one per row, None for a plain completion) say which completion tokens are trained on: a
        multi-turn episode's observations sit in its completion as context, masked 0."""
        B = len(prompts)
        L = max(len(p) + len(c) for p, c in zip(prompts, completions, strict=True))
        tokens = torch.full((B, L), pad_id, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        loss_mask = torch.zeros((B, L - 1), dtype=torch.float32)
        for b, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            n = len(p) + len(c)
            tokens[b, :n] = torch.tensor(list(p) + list(c), dtype=torch.long)
            attn[b, :n] = 1
            m = completion_masks[b] if completion_masks is not None else None
            if m is None:
                loss_mask[b, len(p) - 1 : n - 1] = 1
            else:
                if len(m) != len(c):
                    raise ValueError(f"row {b}: completion mask has {len(m)} entries for {len(c)} tokens")
                loss_mask[b, len(p) - 1 : n - 1] = torch.tensor(list(m), dtype=torch.float32)
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


def concat_batches(batches: Sequence[TrainBatch], pad_id: int = 0) -> TrainBatch:
    """Rows of several batches in one, right-padded to the widest (token fields with 0)."""
    width = max(b.input_ids.shape[1] for b in batches)
    pad = torch.nn.functional.pad
    ids = tuple(i for b in batches for i in b.ids)
    input_ids = torch.cat([pad(b.input_ids, (0, width - b.input_ids.shape[1]), value=pad_id) for b in batches])
    attn = torch.cat([pad(b.attention_mask, (0, width - b.attention_mask.shape[1])) for b in batches])
    loss_mask = torch.cat([pad(b.loss_mask, (0, width - 1 - b.loss_mask.shape[1])) for b in batches])
    fields = {}
    for k in batches[0].fields:
        ts = [b.fields[k] for b in batches]
        fields[k] = torch.cat([pad(t, (0, width - 1 - t.shape[1])) if t.dim() == 2 else t for t in ts])
    return TrainBatch(input_ids, attn, loss_mask, fields, ids)
