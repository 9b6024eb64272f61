"""A tiny Llama built from a config (fast, deterministic) and fixed batches for trainer tests."""

import torch

from grm.training import TrainBatch


def tiny_llama(seed: int = 0):
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
    )
    return LlamaForCausalLM(cfg).float()


def fixed_batch(n: int = 8, seed: int = 1) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 96, (int(torch.randint(3, 7, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
    comps = [torch.randint(3, 96, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(n)])
    return TrainBatch.from_sequences(prompts, comps, pad_id=0, advantages=adv)


def nll_loss(logprobs, mb, entropy):
    """Algorithm-free loss for trainer tests: mean negative log-likelihood of response tokens."""
    m = mb.loss_mask
    return -(logprobs * m).sum() / m.sum(), {}


def grpo_loss(logprobs, mb, entropy):
    from grm.algorithms import ppo_policy_loss

    return ppo_policy_loss(logprobs, mb["old_logprobs"], mb["advantages"], mb.loss_mask)
