"""Policy weights over a process group: the trainer's side (rank 0) of the group that rollout
servers join (SGLang's ``/init_weights_update_group``, then ``/update_weights_from_distributed``
for each bucket of tensors while the trainer broadcasts them in the same order). NCCL on GPUs,
gloo on the CPU; no file is written.

The group is its own (a ``TCPStore`` the trainer hosts, keys under the group's name), apart from
the trainer's data-parallel group, so ranks of the policy and the servers' GPUs never mix.
Tensors go in buckets of at most ``bucket_bytes`` (``weight_buckets``): under ZeRO-3 each bucket is
gathered, sent and released before the next, so the extra memory is one bucket, not the model.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator

import torch

BUCKET_BYTES = 256 << 20
"""Bytes of one broadcast bucket (the largest tensor alone may be larger)."""


def weight_buckets(
    named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int = BUCKET_BYTES
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``named`` cut into consecutive lists of at most ``bucket_bytes`` (a larger tensor alone)."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named:
        n = t.numel() * t.element_size()
        if bucket and size + n > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += n
    if bucket:
        yield bucket


class WeightGroup:
    """Rank 0 of a weight-update group of ``world_size`` ranks (the servers' ranks 1..): hosts the
    group's store at ``address:port`` and joins once every server has (the constructor blocks
    until then, or ``timeout_s``), so a server's join request must already be under way."""

    def __init__(
        self, address: str, port: int, world_size: int, group_name: str, backend: str = "gloo", timeout_s: float = 300.0
    ) -> None:
        import torch.distributed as dist

        if backend not in ("gloo", "nccl"):
            raise ValueError(f"weight group backend must be gloo or nccl, got {backend!r}")
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.PrefixStore(group_name, dist.TCPStore(address, port, world_size, True, timeout=timeout))
        if backend == "nccl":
            self.pg = dist.ProcessGroupNCCL(store, 0, world_size)
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.pg = dist.ProcessGroupGloo(store, 0, world_size, timeout)
            self.device = torch.device("cpu")
        self.world_size, self.backend = world_size, backend

    def broadcast(self, tensors: Iterable[torch.Tensor]) -> int:
        """Send each tensor from rank 0, in order; returns the bytes sent."""
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        sent = 0
        for t in tensors:
            t = t.detach().to(self.device).contiguous()
            self.pg.broadcast([t], opts).wait()
            sent += t.numel() * t.element_size()
        return sent
