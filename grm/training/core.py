"""What every trainer backend shares: the protocol, forward functions, LR schedule, micro-batch
accumulation with whole-batch loss normalisation, step metrics and RNG state."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from grm.loss_fn import LossFn
from grm.models.device import scalar
from grm.training.batch import TrainBatch, first_target, token_logprobs

Forward = Callable[[torch.nn.Module, TrainBatch, bool], "tuple[Tensor, Tensor | None]"]
"""(module, micro-batch on the CPU, with entropy) -> (outputs [b, L-1], entropy or None) on the
module's device; the forward moves the batch tensors it feeds the module."""


class TrainerBackend(Protocol):
    """The trainer seen by the pipeline: algorithm-blind; ``loss_fn`` carries the algorithm."""

    step_count: int

    def logprobs(self, batch: TrainBatch) -> Tensor:
        """Per-token outputs of the current weights, no gradient: ``[B, L-1]``, 0 outside ``loss_mask``."""
        ...

    def step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over the whole batch (micro-batched, gradients accumulated)."""
        ...

    def state_dict(self) -> dict[str, Tensor]:
        """Full (gathered) model weights on CPU, names as in the Hugging Face model."""
        ...

    def weight_buckets(self, bucket_bytes: int) -> Iterator[list[tuple[str, Tensor]]]:
        """The model's parameters (a tied one once), full, in buckets of at most ``bucket_bytes``;
        each bucket is valid until the next is asked for (ZeRO-3 gathers one bucket at a time, and
        every rank must iterate to the end: the gathers are collective)."""
        ...

    def save(self, path: str | Path) -> None: ...

    def load(self, path: str | Path) -> None: ...


def policy_forward(module: torch.nn.Module, mb: TrainBatch, with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    return token_logprobs(
        module,
        mb.input_ids,
        mb.attention_mask,
        with_entropy=with_entropy,
        start=first_target(mb.loss_mask),
        prompt_lens=mb.fields.get("prompt_len"),
    )


FUSED_ADAMW_DEVICES = ("cpu", "cuda")
"""Devices with torch's fused AdamW kernel that grm runs on."""


def adamw(module: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over ``module``'s trainable parameters (with LoRA: the adapters only), fused: one
    kernel per tensor reads the weight, gradient and both moments once, where torch's default on a
    CPU (a loop of elementwise ops per tensor) passes over them about eight times and allocates
    temporaries. SmolLM2-135M's step: 0.50 -> 0.11 s on one core (``benchmarks/optimizer_step.py``).
    The same update up to float rounding. Parameters elsewhere (``meta``, in placement checks) get
    the loop, which runs on any device."""
    params = [p for p in module.parameters() if p.requires_grad]
    fused = bool(params) and all(p.device.type in FUSED_ADAMW_DEVICES for p in params)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


def lr_lambda(
    warmup_steps: int, total_steps: int, schedule: Literal["constant", "linear", "cosine"] = "constant", min_ratio: float = 0.0
) -> Callable[[int], float]:
    """Linear warmup over ``warmup_steps``, then constant or linear/cosine decay to ``min_ratio``."""

    def f(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant" or total_steps <= warmup_steps:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        decay = 1.0 - progress if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
        return min_ratio + (1 - min_ratio) * decay

    return f


class MicroBatchCount:
    """Micro-batches this process has run (forward, loss, backward) since ``reset``: the training
    progress a live display shows. Read from another thread (the policy actor's progress method)
    while training runs; a plain int, so a read sees a whole count."""

    def __init__(self) -> None:
        self.done = 0

    def reset(self) -> None:
        self.done = 0


MICRO_BATCHES = MicroBatchCount()


def accumulate(
    module: torch.nn.Module,
    micro: list[TrainBatch],
    forward: Forward,
    loss_fn: LossFn,
    entropy: bool,
    backward: Callable[[Tensor], None],
) -> tuple[Tensor | None, list[dict[str, float]], list[float]]:
    """Forward, loss and ``backward`` for each micro-batch; returns the summed loss shares (on the
    module's device, detached), the loss function's metrics per micro-batch and each micro-batch's
    response tokens (the weight of its metrics, which are means over its tokens)."""
    total: Tensor | None = None
    rows, tokens = [], []
    for mb in micro:
        out, ent = forward(module, mb, entropy)
        loss, metrics = loss_fn(out, mb.to(out.device), ent)
        backward(loss)
        MICRO_BATCHES.done += 1
        total = loss.detach() if total is None else total + loss.detach()
        rows.append(metrics)
        tokens.append(float(mb.loss_mask.sum()))
    return total, rows, tokens


def step_metrics(
    loss: Tensor | None,
    rows: list[dict[str, float]],
    all_reduce: Callable[[Tensor], Tensor] | None = None,
    weights: list[float] | None = None,
) -> dict[str, float]:
    """``loss``: the summed shares (the whole batch's loss); every other metric averaged over the
    micro-batches that report it, each weighted by ``weights`` (its response tokens: the metrics are
    means over tokens, so the result is the mean over the whole batch's tokens whatever the split
    into micro-batches and ranks). ``all_reduce`` (a sum over ranks) makes both global: every rank
    then returns the same numbers. Every rank must report the same metric names."""
    w = weights if weights is not None else [1.0] * len(rows)
    keys = sorted({k for r in rows for k in r} - {"loss"})
    sums = [sum(r[k] * wi for r, wi in zip(rows, w, strict=True) if k in r) for k in keys]
    counts = [sum(wi for r, wi in zip(rows, w, strict=True) if k in r) for k in keys]
    t = torch.tensor([scalar(loss) if loss is not None else 0.0, *sums, *counts], dtype=torch.float64)
    if all_reduce is not None:
        t = all_reduce(t)
    n = len(keys)
    return {"loss": float(t[0]), **{k: float(t[1 + i] / t[1 + n + i]) for i, k in enumerate(keys)}}


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for r in rows for k in r}
    return {k: sum(r[k] for r in rows if k in r) / sum(1 for r in rows if k in r) for k in sorted(keys)}


def rng_state() -> dict[str, Any]:
    import numpy as np

    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
