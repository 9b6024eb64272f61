"""Length grouping for the prefill: bounded padding and token budget, every row exactly once; the
shared prefixes a judge batch's prompts branch at; what the prompt cache keeps."""

import random

import torch

from grm.engines.kvcache import PromptCache, _groups, branch_prefixes


def test_groups_cover_rows_once_with_bounded_padding_and_budget():
    rng = random.Random(0)
    lengths = [rng.randint(20, 1700) for _ in range(200)]
    groups = _groups(lengths, max_tokens=8192, min_fill=0.9)
    flat = sorted(i for g in groups for i in g)
    assert flat == list(range(200))
    for g in groups:
        top = max(lengths[i] for i in g)
        assert lengths[g[0]] == top
        assert len(g) == 1 or len(g) * top <= 8192
        assert len(g) == 1 or sum(lengths[i] for i in g) >= 0.9 * len(g) * top


def test_equal_lengths_share_a_group_and_a_long_row_stands_alone():
    groups = _groups([100, 100, 100, 5000, 100], max_tokens=1000, min_fill=0.9)
    assert [3] in groups and [0, 1, 2, 4] in groups


def test_branch_prefixes_are_the_trie_nodes_where_prompts_part():
    head, a, b = (1, 2, 3, 4), (5, 6, 7), (8, 9)
    prompts = [
        head + a + (10, 11),  # instruction a, response 1, question 1
        head + a + (10, 12),  # instruction a, response 1, question 2
        head + a + (13,),  # instruction a, response 2
        head + b + (14, 15),
        head + b + (14, 15),  # a duplicate is no branch
        head + b,  # a whole prompt is never a node: its last token must still run
    ]
    assert branch_prefixes(prompts, min_len=2) == [head, head + b[:1], head + a, head + a + (10,)]
    assert branch_prefixes(prompts, min_len=6) == [head + a, head + a + (10,)]
    assert branch_prefixes([head], min_len=1) == [] and branch_prefixes([], min_len=1) == []


def _kv(n: int, layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((3, n, 4), float(n)), torch.full((3, n, 4), -float(n))) for _ in range(layers)]


def test_prompt_cache_keeps_the_longest_of_a_chain_and_counts_its_bytes():
    """A generation's prompt and text replace the prompt alone (the longer entry serves every match
    the shorter did); a prefix of a kept entry is not kept twice; ``bytes`` follows what is held,
    and an entry past ``max_bytes`` is not kept, whatever it would replace."""
    one = 2 * 2 * 3 * 4 * 4  # bytes a token: layers x (keys, values) x heads x dim x fp32
    pc = PromptCache(min_reuse=2)
    prompt, other = tuple(range(10)), (7,) * 12
    pc.add(prompt, _kv(10))
    pc.add(other, _kv(12))
    assert pc.bytes == 22 * one
    pc.add(prompt + (50, 51, 52), _kv(13))  # the prompt and its critique
    assert sorted(len(t) for t, _ in pc.entries) == [12, 13] and pc.bytes == 25 * one
    pc.add(prompt[:6], _kv(6))  # inside a kept entry: nothing new
    pc.add(prompt + (50,), _kv(11))
    assert sorted(len(t) for t, _ in pc.entries) == [12, 13] and pc.bytes == 25 * one
    n, kv = pc.match(prompt + (50, 51, 99))  # the reading after the critique: all but the new token
    assert n == 12 and kv is not None and kv[0][0].shape[1] == 13
    assert pc.match(prompt)[0] == 9  # a retried prompt: all but its last token, whose logits are needed
    full = PromptCache(max_bytes=20 * one, min_reuse=2)
    full.add(prompt, _kv(10))
    full.add(prompt + tuple(range(11)), _kv(21))  # over the budget even with the prompt freed: kept as it was
    assert [len(t) for t, _ in full.entries] == [10] and full.bytes == 10 * one
