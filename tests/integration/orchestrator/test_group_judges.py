"""Judges that read a whole group inside `grm run` (real Ray, SmolLM2 policy and judge): a pairwise
judge comparing every response with the policy's greedy answer."""

import json
import math

import pytest

from tests.conftest import run_grm

pytestmark = pytest.mark.slow

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}
SMALL = ["algorithm.prompts_per_step=2", "algorithm.group_size=2", "rollout.max_new_tokens=12", "train.micro_batch_size=2"]


def test_a_pairwise_judge_rewards_each_response_against_the_greedy_anchor(tmp_path):
    out = tmp_path / "run"
    args = ["run", "builtin:pairwise-anchor", f"out_dir={out}", *SMALL, "train.steps=1", "train.backend.type=torch"]
    r = run_grm(*args, timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    (m,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert 0 < m["reward/pairwise-logprob"] < 1 and m["parse_failures/pairwise-logprob"] == 0
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4  # the greedy anchors are not trained on
    for s in samples:
        assert isinstance(s["anchor"], str)
        judged = s["judges"]["pairwise-logprob"]
        (c,) = judged["comparisons"]  # one comparison: against the anchor, in both orders
        assert c["against"] == "anchor" and len(c["view_margins"]) == 2 and all(math.isfinite(x) for x in c["view_margins"])
        # the reward is P(beats the anchor) from the Bradley-Terry fit of that one soft outcome
        assert (judged["reward"] > 0.5) == (c["outcome"] > 0.5)
    by_group: dict[str, set] = {}
    for s in samples:
        by_group.setdefault(s["group"], set()).add(s["anchor"])
    assert all(len(a) == 1 for a in by_group.values())  # one anchor per prompt, shared by its group
    resolved = (out / "config.resolved.yaml").read_text()
    assert "greedy_anchor: true" in resolved
