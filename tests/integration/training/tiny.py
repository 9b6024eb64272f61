"""A tiny Llama built from a config (fast, deterministic) and fixed batches for trainer tests."""

import torch

from grm.training import TrainBatch


def tiny_llama(seed: int = 0, attn: str = "sdpa"):
    """``attn="eager"`` for the ``meta`` device: sdpa's mask code reads a value (``.item()``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        attn_implementation=attn,
    )
    return LlamaForCausalLM(cfg).float()


def fixed_batch(n: int = 8, seed: int = 1) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 96, (int(torch.randint(3, 7, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
    comps = [torch.randint(3, 96, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(n)])
    return TrainBatch.from_sequences(prompts, comps, pad_id=0, ids=[f"s{i}" for i in range(n)], advantages=adv)


def nll_loss(logprobs, mb, entropy):
    """Algorithm-free loss for trainer tests: mean negative log-likelihood of the whole batch's
    response tokens (this micro-batch's share of it)."""
    m = mb.loss_mask
    return -(logprobs * m).sum() / mb.totals.tokens, {"nll_mb_mean": float(-(logprobs.detach() * m).sum() / m.sum())}


def grpo_loss(logprobs, mb, entropy, aggregation="token-mean"):
    from grm.algorithms import ppo_policy_loss
    from grm.algorithms.algorithm import whole_batch_counts

    return ppo_policy_loss(
        logprobs, mb["old_logprobs"], mb["advantages"], mb.loss_mask, aggregation=aggregation, **whole_batch_counts(mb)
    )


def mixed_steps(trainer, steps: int = 3) -> list[dict[str, float]]:
    """Metrics of ``steps`` optimizer steps on ``fixed_batch()``, alternating the token-mean NLL and
    a GRPO loss aggregated seq-mean-token-mean, so both whole-batch counts (tokens, sequences) matter."""
    from functools import partial

    batch = fixed_batch()
    out = []
    for i in range(steps):
        if i % 2 == 0:
            out.append(trainer.step(batch, nll_loss))
        else:
            b = batch.with_fields(old_logprobs=trainer.logprobs(batch), advantages=torch.linspace(-0.5, 1.0, len(batch)))
            out.append(trainer.step(b, partial(grpo_loss, aggregation="seq-mean-token-mean")))
    return out
