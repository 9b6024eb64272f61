"""Judges that read a whole group inside `grm run` (real Ray, SmolLM2 policy and judge): a pairwise
judge comparing every response with the policy's earlier greedy answer to the same prompt
(``groups.anchor: previous``), falling back to the current greedy answer in the first epoch."""

import json
import math

import pytest

from tests.conftest import run_grm

pytestmark = pytest.mark.slow

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}
SMALL = ["algorithm.prompts_per_step=2", "algorithm.group_size=2", "rollout.max_new_tokens=12", "train.micro_batch_size=2"]


def test_a_pairwise_judge_rewards_each_response_against_the_previous_or_greedy_anchor(tmp_path):
    # two prompts, two steps: step 2 re-sees step 1's prompts and compares with their step-1 answers
    out = tmp_path / "run"
    previous = "judges.0.overrides=[groups.strategy=anchor, groups.anchor=previous, groups.outcome=probability]"
    args = ["run", "builtin:pairwise-anchor", f"out_dir={out}", *SMALL, "train.steps=2", "data.limit=2", previous]
    r = run_grm(*args, "train.backend.type=torch", timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < m["reward/pairwise-logprob"] < 1 and m["parse_failures/pairwise-logprob"] == 0 for m in metrics)
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8  # the greedy anchors are not trained on
    step1 = {s["prompt_id"]: s for s in samples if s["step"] == 1}
    for s in samples:
        assert isinstance(s["anchor"], str)
        judged = s["judges"]["pairwise-logprob"]
        (c,) = judged["comparisons"]  # one comparison: against the anchor, in both orders
        assert c["against"] == "anchor" and len(c["view_margins"]) == 2 and all(math.isfinite(x) for x in c["view_margins"])
        # the reward is P(beats the anchor) from the Bradley-Terry fit of that one soft outcome
        assert (judged["reward"] > 0.5) == (c["outcome"] > 0.5)
        if s["step"] == 1:  # first epoch: nothing earlier, the greedy answer of the same weights
            assert c["anchor"] == {"source": "greedy", "policy_version": s["policy_version"], "step": None}
            assert "previous_anchor" not in s
        else:  # the policy's step-1 greedy answer to the same prompt, which step 1 logged as its anchor
            before = step1[s["prompt_id"]]
            assert c["anchor"] == {"source": "previous", "policy_version": before["policy_version"], "step": 1}
            assert s["previous_anchor"]["text"] == before["anchor"]
    by_group: dict[str, set] = {}
    for s in samples:
        by_group.setdefault(s["group"], set()).add(s["anchor"])
    assert all(len(a) == 1 for a in by_group.values())  # one anchor per prompt, shared by its group
    resolved = (out / "config.resolved.yaml").read_text()
    assert "greedy_anchor: true" in resolved
    # the checkpoint carries the store: each prompt's step-2 answer, for a resumed run's step 3
    (ckpt,) = (out / "checkpoints").glob("step-*")
    saved = {pid: entries for pid, entries in json.loads((ckpt / "anchors.json").read_text())["prompts"]}
    step2 = {s["prompt_id"]: s["anchor"] for s in samples if s["step"] == 2}
    assert {pid: [e["text"] for e in entries] for pid, entries in saved.items()} == {pid: [a] for pid, a in step2.items()}
