"""A response longer than SmolLM2's 8,192-token context through a real judge on the hf engine: cut to
fit with a visible marker, scored, counted, and the rest of the batch scored with it."""

import pytest

from grm.judges import Sample, load
from grm.judges.guard import RESERVE_TOKENS
from grm.judges.render import render
from grm.judges.runtime import load_engine

pytestmark = pytest.mark.slow


def test_a_response_past_the_context_window_is_cut_scored_and_counted():
    judge = load("builtin:pointwise-logprob")
    engine = load_engine(judge)
    assert engine.model.config.max_position_embeddings == 8192  # the window the guard reads
    # The same code path on a window of 1,024: the model's config is what the guard reads, and a
    # prefill of ~1,000 tokens takes a second where the real 8,192 took ~50 s of the suite.
    context = engine.model.config.max_position_embeddings = 1024
    long_response = "Let me add the numbers one at a time. " * 200 + "So the answer is 42."
    assert len(engine.tokenize(long_response)) > context  # about 2,000 tokens
    batch = [Sample(prompt="What is 6 * 7?", response=long_response), Sample(prompt="What is 6 * 7?", response="6 * 7 = 42.")]

    long_r, short_r = judge.score_batch(batch)

    assert (long_r.truncated, short_r.truncated) == (1, 0)
    for r in (long_r, short_r):
        assert not r.masked and 1 <= r.score <= 10 and r.parse_failures == 0
    (stage,) = render(judge, batch[0])
    sent = engine.prompt_text(stage["request"])
    assert "tokens truncated ...]" in sent and "So the answer is 42." in sent  # head, marker and tail
    n = len(engine.encode(stage["request"]))
    # The cut aims at context - max_new_tokens - RESERVE_TOKENS; re-tokenizing the text around a cut
    # may merge a few tokens differently, which is what the reserve is for (measured: 1 token over).
    budget = context - judge.spec.sampling.max_new_tokens - RESERVE_TOKENS
    assert budget - 64 <= n <= budget + RESERVE_TOKENS // 4
