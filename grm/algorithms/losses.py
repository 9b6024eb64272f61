"""Policy and value losses, KL estimators, entropy: pure tensor functions.

Shapes: ``logprobs, old_logprobs, ref_logprobs, behaviour_logprobs, mask: [B, T]``;
``advantages: [B]`` (one per sequence, broadcast over its tokens) or ``[B, T]``;
``logits: [B, T, V]``. ``mask`` is 1 on response tokens.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is set (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def aggregate_loss(
    loss: Tensor, mask: Tensor, aggregation: Aggregation, *, tokens: float | None = None, sequences: float | None = None
) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar.

    token-mean: every response token weighs the same (DAPO); seq-mean-token-mean: mean per sequence,
    then over sequences (original GRPO); seq-mean-token-sum: sum per sequence, mean over sequences
    (Dr. GRPO without length normalisation). Sequences with an empty mask are left out.

    ``tokens`` / ``sequences``: the response tokens and the sequences with any, counted over the
    whole batch of one optimizer step when ``loss`` is one micro-batch of it. The result is then
    this micro-batch's share, and the shares of all micro-batches (all ranks) sum to the
    aggregation over the whole batch, whatever the micro-batch size or rank count. Without them
    the denominator is this ``mask``'s own count.
    """
    m = mask.to(loss.dtype)
    if aggregation == "token-mean":
        return (loss * m).sum() / (max(tokens, 1.0) if tokens is not None else m.sum().clamp(min=1))
    per_seq = (loss * m).sum(-1)
    n_tok = m.sum(-1)
    has = n_tok > 0
    if aggregation == "seq-mean-token-mean":
        per_seq = per_seq / n_tok.clamp(min=1)
    elif aggregation != "seq-mean-token-sum":
        raise ValueError(f"unknown aggregation {aggregation!r}")
    return torch.where(has, per_seq, 0.0).sum() / (max(sequences, 1.0) if sequences is not None else has.sum().clamp(min=1))


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: Literal["k1", "k2", "k3"] = "k3") -> Tensor:
    """Per-token KL(policy || reference) estimate, Schulman's estimators with ``r = ref - logp``.

    k1 = -r (unbiased, can be negative); k2 = r^2 / 2; k3 = exp(r) - r - 1 (unbiased, >= 0).
    Returns ``[B, T]``.
    """
    r = ref_logprobs - logprobs
    if estimator == "k1":
        return -r
    if estimator == "k2":
        return 0.5 * r * r
    if estimator == "k3":
        return torch.exp(r) - r - 1
    raise ValueError(f"unknown KL estimator {estimator!r}; expected k1, k2 or k3")


def ppo_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: Aggregation = "token-mean",
    behaviour_logprobs: Tensor | None = None,
    tis_cap: float | None = None,
    tokens: float | None = None,
    sequences: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped PPO surrogate (GRPO uses it with sequence-level advantages).

    Per token: ``max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))`` with
    ``ratio = exp(logprobs - old_logprobs)``. ``dual_clip`` (> 1) caps the loss of negative-advantage
    tokens at ``-A * dual_clip``. With ``behaviour_logprobs`` (the rollout engine's log-probs) and
    ``tis_cap``, each token's loss is weighted by the truncated importance ratio
    ``min(exp(old - behaviour), tis_cap)`` (TIS), correcting for a rollout policy that differs from
    the trainer's. ``tokens`` / ``sequences``: whole-batch counts (see ``aggregate_loss``).
    Returns ``(loss, metrics)``: clip_frac, dual_clip_frac, approx_kl (k3 of old vs new),
    ratio_mean, tis_weight_mean and tis_capped_frac (tokens whose ratio the cap cut; 1.0 and 0.0
    without TIS), all over this ``mask``.
    """
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    adv = adv.to(logprobs.dtype)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    clipped = loss_clipped > loss_unclipped
    dual = torch.zeros_like(clipped)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        cap = -adv * dual_clip
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)
    tis_w = capped = None
    if behaviour_logprobs is not None and tis_cap is not None:
        raw = torch.exp(old_logprobs - behaviour_logprobs).detach()
        tis_w, capped = raw.clamp(max=tis_cap), raw > tis_cap
        loss = loss * tis_w
    total = aggregate_loss(loss, mask, aggregation, tokens=tokens, sequences=sequences)
    with torch.no_grad():
        metrics = {
            "clip_frac": float(masked_mean(clipped.to(loss.dtype), mask)),
            "dual_clip_frac": float(masked_mean(dual.to(loss.dtype), mask)),
            "approx_kl": float(masked_mean(ratio - 1 - log_ratio, mask)),
            "ratio_mean": float(masked_mean(ratio, mask)),
            "tis_weight_mean": float(masked_mean(tis_w, mask)) if tis_w is not None else 1.0,
            "tis_capped_frac": float(masked_mean(capped.to(loss.dtype), mask)) if capped is not None else 0.0,
        }
    return total, metrics


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None = 0.2,
    tokens: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss: ``0.5 * max((v - R)^2, (v_clip - R)^2)`` with
    ``v_clip = old + clamp(v - old, -clip, clip)``, token mean over ``mask`` (over ``tokens`` whole-batch
    tokens when given, see ``aggregate_loss``). ``clip=None``: plain MSE/2."""
    err = (values - returns) ** 2
    if clip is None:
        per_tok = err
        clipped = torch.zeros_like(err, dtype=torch.bool)
    else:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
        err_clip = (v_clip - returns) ** 2
        per_tok = torch.maximum(err, err_clip)
        clipped = err_clip > err
    loss = 0.5 * aggregate_loss(per_tok, mask, "token-mean", tokens=tokens)
    with torch.no_grad():
        metrics = {
            "vf_clip_frac": float(masked_mean(clipped.to(values.dtype), mask)),
            "value_mean": float(masked_mean(values, mask)),
        }
    return loss, metrics


def entropy_from_logits(logits: Tensor, mask: Tensor) -> Tensor:
    """Mean per-token entropy (nats) of the categorical distributions ``logits [B, T, V]`` over ``mask``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    return masked_mean(ent, mask)
