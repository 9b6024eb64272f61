"""The loss function an algorithm hands a trainer: its signature and the micro-batch it reads.

Algorithms write losses of this shape (``grm.algorithms``); trainers call them without knowing the
algorithm (``grm.training``). Neither package may import the other, so the contract lives here,
below both. Imports nothing from grm, and torch only for type checking.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import Tensor


class LossBatch(Protocol):
    """What a loss reads from a micro-batch (``grm.training.TrainBatch`` satisfies it). A trainer
    also sets ``totals`` (``tokens``, ``sequences``: counts over the whole batch of the optimizer
    step), which the losses divide by (``grm.algorithms.algorithm.whole_batch_counts``)."""

    loss_mask: Tensor
    fields: dict[str, Tensor]

    def __getitem__(self, key: str) -> Tensor: ...


LossFn = Callable[["Tensor", LossBatch, "Tensor | None"], "tuple[Tensor, dict[str, float]]"]
"""(outputs [b, L-1], micro-batch, entropy [b, L-1] or None) -> (scalar loss, metrics).
``outputs`` are the module's per-token log-probs (policy) or values (critic), the micro-batch is
on their device and carries ``totals`` (counts over the step's whole batch): the loss is this
micro-batch's share of the whole batch's loss (divided by ``totals``, not by its own counts), so
the trainer sums shares and the gradient does not depend on micro-batch size or rank count."""
