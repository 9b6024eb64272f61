"""Episodes inside `grm run` (real Ray, SmolLM2 policy and judge, DeepSpeed-free torch trainer): a
user's environment file named by path, two policy turns per episode with a simulated user's reply
between them, and an environment that raises on some rows: those episodes end `env_error`, counted,
and the run goes on."""

import json

import pytest

from tests.conftest import run_grm

pytestmark = pytest.mark.slow

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}

ENV_FILE = '''
from grm.envs.base import Observation, Reset, Step


class TwoTurns:
    """Asks once more after the first answer; the second answer ends the episode. Row seeds that
    are 3 mod 4 raise at reset (a broken environment)."""

    def reset(self, row):
        if row["seed"] % 4 == 3:
            raise RuntimeError("this row breaks the environment")
        self.turns = 0
        return Reset([{"role": "user", "content": row["prompt"]}])

    def step(self, message):
        self.turns += 1
        if self.turns == 1:
            return Step([Observation("user", "Check your work, then give only the final number.")])
        return Step([], done=True, signals={"success": float("7" in message.content)}, final_answer=message.content)
'''


def test_a_run_trains_on_two_turn_episodes_and_a_broken_environment_costs_only_its_episodes(tmp_path):
    (tmp_path / "two_turns.py").write_text(ENV_FILE)
    pipeline = tmp_path / "episodes.yaml"
    pipeline.write_text(
        "name: episodes\nseed: 0\npools: {train: {cpus: 1}, judge: {cpus: 1}}\n"
        "policy: {spec: builtin:smollm2-135m-instruct, pool: train}\n"
        "judges:\n  - {spec: builtin:helpfulness-pointwise-logprob, pool: judge}\n"
        "data: {prompts: builtin:calc-train, reference_field: null, shuffle: false, limit: 4}\n"
        "env: {type: python, path: two_turns.py:TwoTurns, max_turns: 3, max_total_tokens: 1024, credit: process}\n"
        "algorithm: {type: grpo, group_size: 2, prompts_per_step: 4, kl: {coef: 0}}\n"
        "rollout: {max_new_tokens: 12}\n"
        "train: {steps: 1, micro_batch_size: 2, backend: {type: torch}}\n"
        "faults: {max_masked_fraction: 1.0}\n"
    )
    out = tmp_path / "run"
    r = run_grm("run", str(pipeline), f"out_dir={out}", "--no-live", timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8
    broken = [s for s in samples if s["trajectory"]["task"]["row"]["seed"] % 4 == 3]
    whole = [s for s in samples if s not in broken]
    assert len(broken) == 2 and all(s["trajectory"]["end_reason"] == "env_error" for s in broken)
    for s in whole:
        t = s["trajectory"]
        roles = [turn["role"] for turn in t["turns"]]
        assert roles == ["assistant", "user", "assistant"] and t["end_reason"] == "done", roles
        assert s["response"] == t["final_answer"] == t["turns"][-1]["content"]  # the judge read the final answer
        # every policy turn kept its own ids, one log-prob each, and the version that sampled it
        for turn in t["turns"][::2]:
            assert len(turn["token_ids"]) == len(turn["logprobs"]) > 0 and turn["policy_version"] == s["policy_version"]
        assert t["turns"][1]["token_ids"]  # the user's reply is in the context (masked out of the loss)
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["env/end/env_error"] == pytest.approx(0.25) and metrics["env/end/done"] == pytest.approx(0.75)
    assert metrics["env/turns"] == pytest.approx(1.5)  # two turns in each of 6 episodes, none in the 2 broken ones
    assert "env/success" in metrics
