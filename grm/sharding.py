"""Batch sharding: rows split into equal-count shards with balanced token totals (the driver's
split of a worker group's batch pass; each rank's share of a training batch, ``TrainBatch.shard``).
Standard library only."""

from __future__ import annotations

from collections.abc import Sequence


def balanced_partition(sizes: Sequence[int], parts: int) -> list[list[int]]:
    """Row indices cut into ``parts`` shards of equal count (every rank must run the same number of
    micro-batches) with balanced token totals: rows by size, largest first, dealt out in a snake
    (0, 1, ..., p-1, p-1, ..., 0, ...); each shard keeps its rows in their original order. The
    same ``sizes`` give the same shards on every rank. ``len(sizes)`` must divide by ``parts``."""
    if len(sizes) % parts:
        raise ValueError(f"{len(sizes)} rows do not split into {parts} equal shards")
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    shards: list[list[int]] = [[] for _ in range(parts)]
    for k, i in enumerate(order):
        lap, pos = divmod(k, parts)
        shards[pos if lap % 2 == 0 else parts - 1 - pos].append(i)
    return [sorted(s) for s in shards]
