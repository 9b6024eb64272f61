"""Length grouping for the prefill: bounded padding and token budget, every row exactly once; the
shared prefixes a judge batch's prompts branch at."""

import random

from grm.engines.kvcache import _groups, branch_prefixes


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
