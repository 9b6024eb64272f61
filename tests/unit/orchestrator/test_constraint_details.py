"""The constraints verifier inside grm run's bookkeeping: a prompt's constraints reach the verifier
through the rollout's sample, its per-type ``details`` reach samples.jsonl, and with weight 0 (the
monitor of pipelines/instruct-grm.yaml) it leaves the reward to the other judge."""

import json

from grm.data.prompts import Prompt
from grm.judges.runtime import load
from grm.judges.types import JudgeResult
from grm.orchestrator.rewards import combine_rewards
from grm.orchestrator.step_rows import sample_rows
from grm.orchestrator.types import Group, Rollout

CONS = [{"type": "lowercase"}, {"type": "max_words", "n": 3}]


def test_details_reach_samples_jsonl_and_a_weight_zero_monitor_leaves_the_reward_alone():
    prompt = Prompt(id="p0", text="Say hi in lowercase, at most 3 words.", reference=None, metadata={"constraints": CONS})
    texts = ["hi there", "Hi there", "hi there my friend"]
    rollouts = [
        Rollout(
            id=f"g/{k}",
            prompt=prompt,
            group="g",
            prompt_ids=[1],
            token_ids=[2],
            text=t,
            logprobs=[0.0],
            finish_reason="stop",
            version=0,
        )
        for k, t in enumerate(texts)
    ]
    verdicts = load("builtin:constraints").score_batch([r.sample() for r in rollouts])
    assert [v.score for v in verdicts] == [1.0, 0.0, 0.0]
    grm_judge = [JudgeResult(judge="grm", score=x, reward=x) for x in (0.2, 0.9, 0.5)]
    rewards, _ = combine_rewards(
        {"grm": grm_judge, "constraints": verdicts},
        {"grm": 1.0, "constraints": 0.0},
        {"grm": True, "constraints": False},
        ["stop"] * 3,
    )
    assert rewards == [0.2, 0.9, 0.5]  # the reward is the GRM's alone
    g = Group("g", rollouts, judged={"grm": grm_judge, "constraints": verdicts})
    g.rewards = rewards
    rows = json.loads(json.dumps(sample_rows(0, [g], {r.id: 0.0 for r in rollouts})))
    assert [r["judges"]["constraints"]["details"] for r in rows] == [
        {"lowercase": 1.0, "max_words": 1.0},
        {"lowercase": 0.0, "max_words": 1.0},
        {"lowercase": 1.0, "max_words": 0.0},
    ]
    assert "details" not in rows[0]["judges"]["grm"]  # judges without details write none
