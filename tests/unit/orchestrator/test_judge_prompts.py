"""A judge's training prompts (``data.judge_prompts``): each labelled pair rendered through the judge
spec's own prompt in both orders, the verdict each order should get, and the pipeline checks."""

import pytest

from grm.config import ConfigError
from grm.config.resolve import load_pipeline
from grm.data.builtin import SETS
from grm.data.judge_pairs import PAIR_KEY
from grm.engines.base import chat_request
from grm.orchestrator.judge_prompts import judge_training_prompts


def test_every_pair_becomes_two_orders_with_the_verdict_each_should_get():
    loaded = load_pipeline("builtin:judge-grpo", ["data.limit=6"])
    prompts = judge_training_prompts(loaded.spec.data)
    rows = SETS["constraints-lexical-pairs-train"]()[:6]
    assert len(prompts) == 12
    for i, row in enumerate(rows):
        ab, ba = prompts[2 * i], prompts[2 * i + 1]
        assert ab.metadata[PAIR_KEY] == {"pair": row["id"], "order": "ab"} and ba.metadata[PAIR_KEY]["order"] == "ba"
        assert (ab.reference, ba.reference) == (("A", "B") if row["label"] == 1 else ("B", "A"))
        first, second = row["output_1"], row["output_2"]
        # the responses as shown: data order, then swapped (the judge's template puts A before B)
        assert ab.text.index(first) < ab.text.index(second)
        assert ba.text.index(second) < ba.text.index(first)
        assert row["input"][:40] in ab.text
        # the judge's prefill is the open assistant turn the trained judge continues
        req = chat_request(ab.text, "a policy system prompt", messages=ab.messages)
        assert req.messages[-1] == {"role": "assistant", "content": "Comparison:"} and req.continue_final
        assert all(m["content"] != "a policy system prompt" for m in req.messages)
    assert "train" in rows[0]["id"]  # the training side of the constraint pairs, never the held-out one


def test_a_judge_that_cannot_frame_training_prompts_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="mode pairwise"):
        load_pipeline("builtin:judge-grpo", ["data.judge_prompts=builtin:pointwise-logprob"])
    with pytest.raises(ConfigError, match="must be even"):
        load_pipeline("builtin:judge-grpo", ["algorithm.prompts_per_step=3", "train.micro_batch_size=2"])
    with pytest.raises(ConfigError, match="judge_prompts"):
        load_pipeline("builtin:judge-grpo", ["data.judge_prompts=builtin:no-such-judge"])
