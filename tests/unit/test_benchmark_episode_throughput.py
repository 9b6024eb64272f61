"""benchmarks/episode_throughput.py without running grm: the pipelines it writes load, and its
table row is computed from metrics and samples lines as documented."""

from __future__ import annotations

import argparse

import pytest
import yaml

from grm.config.resolve import load_pipeline
from tests.unit.beside import script


@pytest.fixture(scope="module")
def bench():
    with script("benchmarks", "episode_throughput") as module:
        yield module


def args(**kw):
    base = dict(
        steps=2,
        prompts=2,
        group=3,
        max_new_tokens=32,
        max_turns=3,
        schedule="sync",
        max_staleness=2,
        judge="builtin:helpfulness-pointwise-logprob",
        episode_judge=None,
        env="calc",
        workers=2,
        turn_wait=None,
        tool_s=0.0,
        slow_every=4,
    )
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("episode_judge", [None, "builtin:trajectory-pointwise"])
@pytest.mark.parametrize("mode", ["single-turn", "episodes", "episodes-workers"])
def test_written_pipelines_load_with_the_requested_sizes(bench, tmp_path, mode, episode_judge):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(bench.pipeline(mode, args(episode_judge=episode_judge, schedule="async"))))
    spec = load_pipeline(path).spec
    episodes = mode != "single-turn"
    if episodes:  # lockstep in the policy's process, or workers on the judge's pool with the shipped wait
        assert (spec.env.pool, spec.env.workers, spec.env.turn_wait_s) == (
            (None, 1, None) if mode == "episodes" else ("judge", 2, "auto")
        )
    assert (spec.algorithm.prompts_per_step, spec.algorithm.group_size) == (2, 3)
    assert spec.rollout.max_new_tokens == 32 and spec.train.steps == 2
    assert spec.train.micro_batch_size == 2  # gcd of the batch (6) and the shipped 4
    assert spec.checkpoint.every == 0 and spec.schedule.mode == "async" and spec.schedule.max_staleness == 2
    judge = episode_judge if episodes and episode_judge else "builtin:helpfulness-pointwise-logprob"
    assert [j.spec for j in spec.judges] == [judge]
    assert (spec.env.max_turns if spec.env else None) == (3 if episodes else None)


def test_a_slow_tool_wraps_the_shipped_environment_in_both_episode_modes(bench, tmp_path):
    for mode in ("episodes", "episodes-workers"):
        path = tmp_path / f"{mode}.yaml"
        path.write_text(yaml.safe_dump(bench.pipeline(mode, args(env="clarify", tool_s=2.0))))
        env = load_pipeline(path).spec.env
        assert env.type == "python" and env.target.endswith("slow_steps.py:SlowSteps")
        assert env.kwargs == {"env": "clarify", "seconds": 2.0, "every": 4}


def turn(role, ids=0, seconds=0.0):
    return {"role": role, "token_ids": list(range(ids)), "seconds": seconds}


def test_episode_row_counts_policy_tokens_and_the_lockstep_wait(bench):
    a = {"step": 2, "trajectory": {"turns": [turn("assistant", 5), turn("tool", 9, 0.5), turn("assistant", 3)]}}
    b_turns = [turn("assistant", 4), turn("tool", 2, 0.2), turn("tool", 2, 0.4), turn("assistant", 6)]
    b = {"step": 2, "trajectory": {"turns": b_turns}}
    warm = {"step": 1, "trajectory": {"turns": [turn("assistant", 100)]}}
    metrics = [
        {"step": 1, "seconds_step": 99.0, "seconds_rollout": 50.0, "seconds_judging": 9.0, "env/turns": 1.0},
        {"step": 2, "seconds_step": 30.0, "seconds_rollout": 9.0, "seconds_judging": 6.0, "env/turns": 2.0, "env/success": 0.5},
    ]
    row = bench.summarise("episodes", metrics, [bench.sample_facts(r) for r in (warm, a, b)])
    assert row["steps"] == 2 and row["measured_steps"] == 1 and row["samples_per_step"] == 2
    assert row["policy_tokens_per_step"] == 18  # 5 + 3 + 4 + 6: observation tokens are not the policy's
    assert row["step_s"] == 30.0 and row["samples_per_min"] == 4.0 and row["rollout_tokens_per_s"] == 2.0
    assert row["tool_s_per_step"] == pytest.approx(1.1)
    assert row["tool_wait_s_per_step"] == pytest.approx(0.6)  # turn 1's slowest episode (0.2 + 0.4); turn 2 waits on none
    assert row["tool_share_of_rollout"] == pytest.approx(0.067)
    assert row["turns_mean"] == 2.0 and row["env_success"] == 0.5


def test_single_turn_row_uses_response_length_and_has_no_tool_columns(bench):
    metrics = [{"step": 1, "seconds_step": 12.0, "seconds_rollout": 4.0, "seconds_judging": 3.0, "response_len_mean": 10.0}]
    row = bench.summarise("single-turn", metrics, [{"step": 1, "tokens": None, "waits": []}] * 4)
    assert row["measured_steps"] == 1 and row["policy_tokens_per_step"] == 40.0 and row["turns_mean"] == 1.0
    assert row["samples_per_min"] == 20.0 and row["rollout_tokens_per_s"] == 10.0
    assert row["tool_s_per_step"] is None and row["tool_share_of_rollout"] is None
    assert "| n/a | n/a | n/a |" in bench.table([row])
