"""Training batches without a model: token-balanced shards, whole-batch counts, step metrics."""

import pytest
import torch

from grm.sharding import balanced_partition
from grm.training.batch import BatchTotals, TrainBatch
from grm.training.core import step_metrics


def test_balanced_partition_by_hand():
    # sizes by rank 9 8 5 4 2 1, dealt in a snake over 2 shards: 9 -> 0, 8 -> 1, 5 -> 1, 4 -> 0,
    # 2 -> 0, 1 -> 1: tokens 15 / 14, three rows each, listed in batch order
    assert balanced_partition([5, 9, 1, 4, 8, 2], 2) == [[1, 3, 5], [0, 2, 4]]
    # where contiguous halves of sorted rows would carry 6 / 15 tokens: 6, 3, 2 / 5, 4, 1 -> 11 / 10
    assert balanced_partition([1, 2, 3, 4, 5, 6], 2) == [[1, 2, 5], [0, 3, 4]]
    assert balanced_partition([3, 1, 2], 1) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="do not split into 2 equal shards"):
        balanced_partition([1, 2, 3], 2)


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_balanced_partition_is_even_and_deterministic(parts):
    g = torch.Generator().manual_seed(parts)
    lengths = torch.randint(1, 200, (12 * parts,), generator=g).tolist()
    shards = balanced_partition(lengths, parts)
    assert sorted(i for s in shards for i in s) == list(range(len(lengths)))
    assert {len(s) for s in shards} == {12}
    loads = [sum(lengths[i] for i in s) for s in shards]
    assert max(loads) - min(loads) <= max(lengths)  # the snake's bound: within one row's tokens
    assert shards == balanced_partition(list(lengths), parts)


def _batch():
    prompts = [[5, 6], [5, 6, 7, 8], [5], [5, 6, 7]]
    comps = [[1, 2, 3, 4, 5], [1], [], [1, 2]]
    return TrainBatch.from_sequences(prompts, comps, pad_id=0, ids=["a", "b", "c", "d"], advantages=torch.arange(4.0))


def test_shards_carry_the_whole_batch_counts():
    whole = _batch().with_totals()
    # 8 response tokens; row c has none
    assert whole.totals == BatchTotals(tokens=8.0, sequences=3.0)
    # tokens per row 7, 5, 1, 5 -> r0 gets a (7) then c (1); r1 gets b, d
    r0, r1 = whole.shard(0, 2), whole.shard(1, 2)
    assert (r0.ids, r1.ids) == (("a", "c"), ("b", "d"))
    assert r1["advantages"].tolist() == [1.0, 3.0]
    for part in (r0, r1, *r0.micro_batches(1), whole.with_fields(x=torch.zeros(4)), whole.trim(3)):
        assert part.totals == whole.totals
    assert whole.shard(0, 1) is whole
    moved = r0.to("meta")
    assert moved.input_ids.is_meta and moved["advantages"].is_meta and moved.ids == r0.ids and moved.totals == whole.totals


def test_step_metrics_sum_the_loss_and_average_the_rest():
    rows = [{"clip_frac": 0.5}, {"clip_frac": 0.1, "kl": 2.0}]
    out = step_metrics(torch.tensor(0.75), rows)
    assert out == pytest.approx({"loss": 0.75, "clip_frac": 0.3, "kl": 2.0})

    # two ranks: each sums its share; the others average over every micro-batch of every rank
    other = torch.tensor([0.25, 0.9 + 0.5, 4.0, 2.0, 1.0], dtype=torch.float64)  # loss, sums, counts
    out = step_metrics(torch.tensor(0.75), rows, lambda t: t + other)
    assert out == pytest.approx({"loss": 1.0, "clip_frac": (0.6 + 1.4) / 4, "kl": 6.0 / 2})
    assert step_metrics(torch.zeros((), device="meta"), [])["loss"] != step_metrics(torch.zeros((), device="meta"), [])["loss"]


def test_step_metrics_weigh_micro_batches_by_their_tokens():
    """A per-token mean (kl, clip_frac) over micro-batches of 3 and 1 tokens: the whole batch's
    mean, not the mean of the two means, so any split into micro-batches or ranks gives the same."""
    rows = [{"kl": 1.0}, {"kl": 5.0}]
    assert step_metrics(None, rows, weights=[3.0, 1.0])["kl"] == pytest.approx((3 * 1.0 + 5.0) / 4)
    assert step_metrics(None, rows)["kl"] == pytest.approx(3.0)  # unweighted: the plain mean
