"""Advantage estimators: pure tensor functions.

Shapes: ``rewards [B]`` float (NaN marks a masked judge result), ``group_ids [B]`` integer (samples
of the same prompt share an id), token-level tensors ``[B, T]`` with ``mask [B, T]`` marking
response tokens. Masked (NaN) samples never enter a baseline or a statistic and get advantage 0.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _group_stats(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-sample (valid mask, valid count, sum, sum of squares) of the sample's group."""
    valid = ~torch.isnan(rewards)
    r = torch.where(valid, rewards, torch.zeros_like(rewards)).double()
    _, inv = torch.unique(group_ids, return_inverse=True)
    g = int(inv.max()) + 1 if inv.numel() else 0
    count = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, valid.double())
    total = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, r)
    sq = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, r * r)
    return valid, count[inv], total[inv], sq[inv]


def grpo_advantages(rewards: Tensor, group_ids: Tensor, *, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO: ``(r - mean_group) / (std_group + eps)``; ``scale_by_std=False`` is Dr. GRPO (no division).

    The std is the unbiased (n - 1) sample std over the group's valid members, as in TRL and veRL.
    NaN rewards get 0 and are left out of their group's statistics; a group whose valid rewards
    have std 0 (or that has a single valid member) gets 0. Returns ``[B]`` in the rewards' dtype.
    """
    valid, n, s, sq = _group_stats(rewards, group_ids)
    mean = s / n.clamp(min=1)
    var = (sq - n * mean * mean) / (n - 1).clamp(min=1)
    std = var.clamp(min=0).sqrt()
    r = torch.where(valid, rewards.double(), mean)
    centered = r - mean
    degenerate = (n < 2) | (std <= 1e-12)
    adv = centered / (std + eps) if scale_by_std else centered
    adv = torch.where(valid & ~degenerate, adv, torch.zeros_like(adv))
    return adv.to(rewards.dtype)


def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE leave-one-out: ``r_i - mean(r_j for valid j != i in the group)``.

    NaN rewards get 0 and are left out of the others' baselines; a sample with no valid peer gets 0.
    """
    valid, n, s, _ = _group_stats(rewards, group_ids)
    r = torch.where(valid, rewards.double(), torch.zeros_like(s))
    baseline = (s - r) / (n - 1).clamp(min=1)
    adv = torch.where(valid & (n >= 2), r - baseline, torch.zeros_like(r))
    return adv.to(rewards.dtype)


def reinforce_pp_advantages(rewards: Tensor, group_ids: Tensor | None = None, *, eps: float = 1e-6) -> Tensor:
    """REINFORCE++: whiten rewards over the whole batch; with ``group_ids``, subtract the group mean
    first (REINFORCE++-baseline). NaN rewards get 0 and are left out of every statistic."""
    valid = ~torch.isnan(rewards)
    x = rewards.double()
    if group_ids is not None:
        _, n, s, _ = _group_stats(rewards, group_ids)
        x = x - s / n.clamp(min=1)
    vals = x[valid]
    if vals.numel() < 2:
        return torch.zeros_like(rewards)
    adv = (x - vals.mean()) / (vals.std() + eps)
    return torch.where(valid, adv, torch.zeros_like(adv)).to(rewards.dtype)


def gae(rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 0.95) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over response tokens.

    ``rewards, values, mask: [B, T]``; the value after the last response token is 0 (episode end).
    Returns ``(advantages, returns)``, both ``[B, T]`` and 0 outside ``mask``;
    ``returns = advantages + values``.
    """
    m = mask.bool()
    adv = torch.zeros_like(values)
    last = torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
    next_v = torch.zeros_like(last)
    # Positions outside the mask (prompt, padding) pass the running terms through unchanged.
    for t in reversed(range(values.shape[1])):
        on = m[:, t]
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = torch.where(on, delta + gamma * lam * last, last)
        next_v = torch.where(on, values[:, t], next_v)
        adv[:, t] = torch.where(on, last, torch.zeros_like(last))
    returns = torch.where(m, adv + values, torch.zeros_like(adv))
    return adv, returns


def whiten(x: Tensor, mask: Tensor, eps: float = 1e-6) -> Tensor:
    """``(x - mean) / (std + eps)`` over the positions where ``mask`` is set, 0 elsewhere
    (``x, mask: [B, T]``); all zeros when nothing is masked in."""
    m = mask > 0
    if not m.any():
        return torch.zeros_like(x)
    return torch.where(m, (x - x[m].mean()) / (x[m].std() + eps), torch.zeros_like(x))
