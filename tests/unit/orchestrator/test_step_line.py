"""The plain step line ``grm run`` prints when stdout is not a terminal."""

from grm.orchestrator.step_rows import console_line


def test_the_step_line_shows_each_judge_beside_the_reward_when_there_are_several():
    m = {"step": 3, "reward_mean": 0.6, "reward_std": 0.1, "masked": 0, "kl": 0.01, "response_len_mean": 80.0}
    m |= {f"seconds_{k}": 1.0 for k in ("rollout", "judging", "reference", "training", "sync", "step")}
    one = console_line({**m, "reward/judge": 0.6}, 12)
    assert one.startswith("step 3/12 reward 0.600±0.100 masked 0")
    two = console_line({**m, "reward/judge": 0.6, "reward/constraints": 0.875, "reward/off": None}, 12)
    assert two.startswith("step 3/12 reward 0.600±0.100 (judge 0.600, constraints 0.875) masked 0")  # a monitor's too
