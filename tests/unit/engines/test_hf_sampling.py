"""The hf engine's token draw (inverse CDF at one uniform number per row): the right distribution,
never a token of probability 0, reproducible per row generator."""

import torch

from grm.engines.hf import _draw


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_draws_follow_the_distribution():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05, 0.0])
    n = 20000
    picks = _draw(probs.expand(n, -1).contiguous(), [_gen(i) for i in range(n)])
    counts = torch.bincount(picks, minlength=6).double()
    assert counts[1] == 0 and counts[5] == 0  # no mass, never drawn
    expected = probs.double() * n
    seen = expected > 0
    chi2 = float((((counts - expected) ** 2)[seen] / expected[seen]).sum())
    assert chi2 < 18.5, (counts.tolist(), chi2)  # 4 degrees of freedom: p < 0.001


def test_a_vocabulary_sized_row_and_its_tail():
    """49k entries with the mass spread thin: float64 cumulative sums keep the tail reachable."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(49152, generator=g) * 0.1
    probs = torch.softmax(logits, -1)
    picks = _draw(probs.expand(4000, -1).contiguous(), [_gen(100 + i) for i in range(4000)])
    assert int(picks.max()) > 45000 and int(picks.min()) < 4000  # both ends of the vocabulary drawn
    assert len(set(picks.tolist())) > 3500  # ~4000 distinct expected from a near-uniform row


def test_same_generator_same_token_and_zero_mass_at_the_end():
    probs = torch.tensor([[0.2, 0.8, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    a = _draw(probs, [_gen(1), _gen(2), _gen(3)])
    b = _draw(probs, [_gen(1), _gen(2), _gen(3)])
    assert a.tolist() == b.tolist() and a[1] == 2 and a[2] == 0
    # u * total rounding up to the total would land past the last token with mass: never chosen
    edge = torch.tensor([[0.25, 0.75, 0.0, 0.0]])
    for s in range(200):
        assert int(_draw(edge, [_gen(s)])[0]) in (0, 1)
