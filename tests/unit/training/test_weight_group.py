"""The trainer's side of a weight-update group (``grm.training.weight_group``): buckets bound the
bytes in flight, and a gloo group formed with a second process (standing for a server) carries
every tensor of every bucket, in order, exactly."""

import multiprocessing as mp

import pytest
import torch

from grm.process import free_port
from grm.training.weight_group import WeightGroup, weight_buckets


def test_buckets_keep_order_and_stay_under_the_bound_unless_one_tensor_is_larger():
    named = [(f"t{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5, 100, 1])]  # float32: 4 bytes each
    buckets = list(weight_buckets(named, bucket_bytes=100))
    assert [[n for n, _ in b] for b in buckets] == [["t0", "t1"], ["t2"], ["t3"], ["t4"], ["t5"]]
    assert [n for b in buckets for n, _ in b] == [n for n, _ in named]
    assert list(weight_buckets([], 100)) == []


def _server(port: int, shapes: list, out) -> None:
    import datetime

    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=60)
    store = dist.PrefixStore("g", dist.TCPStore("127.0.0.1", port, 2, False, timeout=timeout))
    pg = dist.ProcessGroupGloo(store, 1, 2, timeout)
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    got = []
    for shape, dtype in shapes:
        t = torch.empty(shape, dtype=dtype)
        pg.broadcast([t], opts).wait()
        got.append(t)
    out.put(got)


def test_a_gloo_group_carries_every_tensor_exactly():
    tensors = [torch.randn(3, 4), torch.arange(7, dtype=torch.int64), torch.randn(2, dtype=torch.bfloat16)]
    port = free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_server, args=(port, [(list(t.shape), t.dtype) for t in tensors], out))
    p.start()
    try:
        group = WeightGroup("127.0.0.1", port, 2, "g", "gloo", timeout_s=60)
        sent = group.broadcast(tensors)
        got = out.get(timeout=60)
    finally:
        p.join(timeout=60)
    assert sent == sum(t.numel() * t.element_size() for t in tensors)
    assert all(torch.equal(a, b) for a, b in zip(tensors, got, strict=True))


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="gloo or nccl"):
        WeightGroup("127.0.0.1", free_port(), 2, "g", "mpi")
