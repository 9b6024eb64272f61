"""A judge's training prompts (``data.judge_prompts``): each labelled pair rendered through the judge
spec's own prompt in both orders, the verdict each order should get, and the pipeline checks."""

import pytest

from grm.config import ConfigError
from grm.config.resolve import load_pipeline
from grm.data.builtin import SETS
from grm.data.judge_pairs import PAIR_KEY
from grm.data.prompts import Prompt
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
    # both orders of a pair share one advantage baseline, and no other pair's
    assert [p.baseline for p in prompts[:4]] == [f"pair:{rows[0]['id']}"] * 2 + [f"pair:{rows[1]['id']}"] * 2
    alone = judge_training_prompts(load_pipeline("builtin:judge-grpo", ["data.limit=2", "data.judge_baseline=order"]).spec.data)
    assert [p.baseline for p in alone] == [None] * 4


def test_a_positional_judge_gets_advantages_only_from_a_pair_baseline():
    """A judge that names A whatever the order: right in one order (reward 0.5: right but
    inconsistent), wrong in the other (0). Within each order its critiques agree, so each order's
    own group gives it no advantage; the pair's shared group gives the right order a positive one
    and the wrong order a negative one."""
    import torch

    from grm.algorithms.advantages import grpo_advantages
    from grm.orchestrator.types import AdvantagePlan, Group, Rollout

    def groups(baseline):
        out = []
        for o, reward in (("ab", 0.5), ("ba", 0.0)):
            prompt = Prompt(id=f"p1:{o}", text="q", reference="A" if o == "ab" else "B", baseline=baseline)
            rs = [Rollout(f"s0r0g{o}/{k}", prompt, f"s0r0g{o}", [1], [2], "A", [-0.1], "stop", 0) for k in range(4)]
            out.append(Group(f"s0r0g{o}", rs, rewards=[reward] * 4))
        return out

    for baseline, expect in ((None, "zero"), ("pair:p1", "signed")):
        plan = AdvantagePlan.of(groups(baseline), version=0)
        ids = list(plan.rewards)
        adv = grpo_advantages(torch.tensor([plan.rewards[i] for i in ids]), torch.tensor([plan.groups[i] for i in ids]))
        if expect == "zero":
            assert len(set(plan.groups.values())) == 2 and adv.abs().max() == 0
        else:
            assert len(set(plan.groups.values())) == 1
            assert (adv[:4] > 0).all() and (adv[4:] < 0).all()


def test_a_judge_that_cannot_frame_training_prompts_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="mode pairwise"):
        load_pipeline("builtin:judge-grpo", ["data.judge_prompts=builtin:pointwise-logprob"])
    with pytest.raises(ConfigError, match="must be even"):
        load_pipeline("builtin:judge-grpo", ["algorithm.prompts_per_step=3", "train.micro_batch_size=2"])
    with pytest.raises(ConfigError, match="judge_prompts"):
        load_pipeline("builtin:judge-grpo", ["data.judge_prompts=builtin:no-such-judge"])
    with pytest.raises(ConfigError, match="judge_baseline: order applies to a judge's training prompts"):
        load_pipeline("builtin:quickstart", ["data.judge_baseline=order"])
    with pytest.raises(ConfigError, match="judge_baseline"):
        load_pipeline("builtin:judge-grpo", ["data.judge_baseline=pairs"])
    with pytest.raises(ConfigError, match="dynamic_filtering keeps or drops one prompt's group"):
        load_pipeline("builtin:judge-grpo", ["algorithm.dynamic_filtering=true"])
    load_pipeline("builtin:judge-grpo", ["algorithm.dynamic_filtering=true", "data.judge_baseline=order"])
