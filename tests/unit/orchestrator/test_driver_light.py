"""The `grm run` driver holds no tensor: advantages are computed in the policy actor, the batch
goes from the actors' object store to the training call, TensorBoard is written without torch, so
the driver process never imports torch (#44, a lighter driver)."""

from __future__ import annotations

import math
import subprocess
import sys

from grm.data.prompts import Prompt
from grm.orchestrator.types import AdvantagePlan, Group, Rollout, StepOutcome, StepWork, Trained


def _groups() -> list[Group]:
    groups = []
    for g in range(2):
        rs = [
            Rollout(
                id=f"s0r0g{g}/{k}",
                prompt=Prompt(id=f"p{g}", text="q", reference=None),
                group=f"s0r0g{g}",
                prompt_ids=[1, 2],
                token_ids=[3] * (k + 1),
                text="a",
                logprobs=[-0.5] * (k + 1),
                finish_reason="stop",
                version=g,
            )
            for k in range(2)
        ]
        groups.append(Group(f"s0r0g{g}", rs, rewards=[0.5, math.nan] if g else [1.0, 0.0]))
    return groups


def test_an_advantage_plan_is_plain_data_by_sample_id():
    groups = _groups()
    plan = AdvantagePlan.of(groups, version=1)
    assert plan.groups == {"s0r0g0/0": 0, "s0r0g0/1": 0, "s0r0g1/0": 1, "s0r0g1/1": 1}
    assert plan.rewards["s0r0g0/0"] == 1.0 and math.isnan(plan.rewards["s0r0g1/1"])
    assert plan.versions == {"s0r0g0/0": 0, "s0r0g0/1": 0, "s0r0g1/0": 1, "s0r0g1/1": 1} and plan.version == 1
    assert plan.episodes is None  # only process credit ships the groups themselves
    assert AdvantagePlan.of(groups, 1, "process").episodes is groups
    # groups whose prompts name one baseline are one advantage group; the rest keep their own
    for g, key in zip(groups, ("pair:x", "pair:x"), strict=True):
        for r in g.rollouts:
            r.prompt = Prompt(id=r.prompt.id, text="q", reference=None, baseline=key)
    assert len(set(AdvantagePlan.of(groups, version=1).groups.values())) == 1
    groups[1].rollouts[0].prompt.baseline = groups[1].rollouts[1].prompt.baseline = "pair:y"
    assert len(set(AdvantagePlan.of(groups, version=1).groups.values())) == 2


def test_what_training_returns_lands_on_the_step_and_its_episodes():
    groups = _groups()
    s = StepOutcome(0, StepWork(step=0, prompts=[], chunks=[]), 0, groups=groups)
    advantages = {r.id: float(i) for i, r in enumerate(r for g in groups for r in g.rollouts)}
    s.record_training(Trained({"loss": 0.1}, advantages, {"adv_std": 1.0}, {"s0r0g1/0": [0.0, 0.5]}, 2.5))
    assert s.train == {"loss": 0.1} and s.advantages == advantages and s.advantage_stats == {"adv_std": 1.0}
    assert s.reference_s == 2.5 and len(s.advantages) == 4
    assert groups[1].rollouts[0].turn_credit == [0.0, 0.5] and groups[0].rollouts[0].turn_credit is None


def test_tensorboard_scalars_are_written_without_torch_and_read_back(tmp_path):
    code = f"""
import sys
from pathlib import Path
from grm.orchestrator.recorder import Scalars
tb = Scalars(Path({str(tmp_path)!r}))
for step in (1, 2):
    tb.add_scalar("reward_mean", 0.25 * step, step)
tb.flush(); tb.close()
print('torch' in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False", out.stdout
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward_mean")] == [(1, 0.25), (2, 0.5)]


def test_the_drivers_own_work_never_imports_torch():
    """Everything the driver runs between actor calls, in a fresh process: its imports, a step's
    advantage plan, a worker group's split of the batch pass, the step's metrics and sample rows."""
    code = """
import math, sys
import grm.cli, grm.orchestrator.driver, grm.orchestrator.launch, grm.orchestrator.recorder
from grm.data.prompts import Prompt
from grm.orchestrator.policy_group import split_prepare
from grm.orchestrator.step_rows import sample_rows, step_metrics
from grm.orchestrator.types import AdvantagePlan, Group, Rollout, StepOutcome, StepWork
rs = [Rollout(id=f"g/{k}", prompt=Prompt(id="p", text="q", reference=None), group="g", prompt_ids=[1], token_ids=[2] * (k + 1),
              text="a", logprobs=[-0.1] * (k + 1), finish_reason="stop", version=0) for k in range(4)]
groups = [Group("g", rs, rewards=[1.0, 0.0, 0.5, math.nan])]
AdvantagePlan.of(groups, 0)
split_prepare(2, rs)
s = StepOutcome(0, StepWork(step=0, prompts=[], chunks=[]), 0, groups=groups, seconds=1.0,
                reward_stats={"masked": 1, "masked_by_judge": {}})
step_metrics(s)
sample_rows(0, groups, {r.id: 0.0 for r in rs})
print('torch' in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False", out.stdout + out.stderr


def test_the_policy_turns_a_plan_into_advantages_by_sample_id_whatever_the_batch_order():
    """``with_advantages`` (run in the policy actor) finds each row's reward, group and version by
    its id: GRPO advantages within each group, masked rows invalid, older versions stale."""
    from grm.config.resolve import load_pipeline
    from grm.orchestrator.policy_update import algorithm_of, row_advantages, with_advantages
    from grm.training import TrainBatch

    groups = _groups()  # group 0 (version 0): rewards 1.0, 0.0; group 1 (version 1): 0.5, masked
    ids = ["s0r0g1/1", "s0r0g0/0", "s0r0g1/0", "s0r0g0/1"]  # not the groups' order
    batch = TrainBatch.from_sequences([[1, 2]] * 4, [[3, 4]] * 4, pad_id=0, ids=ids, behaviour_logprobs=[[-0.5, -0.5]] * 4)
    spec = load_pipeline("builtin:quickstart", ["algorithm.kl.coef=0"]).spec
    out, stats, per_turn = with_advantages(algorithm_of(spec), batch, AdvantagePlan.of(groups, version=1))
    adv = row_advantages(out)
    assert adv["s0r0g0/0"] > 0 > adv["s0r0g0/1"] and adv["s0r0g0/0"] == -adv["s0r0g0/1"]
    assert out["valid"].tolist() == [0.0, 1.0, 1.0, 1.0]  # the masked row (s0r0g1/1) trains on nothing
    assert out["stale"].tolist() == [0.0, 1.0, 0.0, 1.0]  # group 0 was sampled by version 0
    assert per_turn == {} and set(adv) == set(ids)


def test_a_process_spawned_by_a_large_one_reports_its_own_peak_memory():
    """``driver_peak_rss_mb`` is the driver's own peak, not the test runner's that spawned it
    (``ru_maxrss`` carries the parent's peak across exec on Linux: 1,270 MiB once for a ~200 MiB driver)."""
    code = (
        "import subprocess, sys\n"
        "big = bytearray(400 * 1024 * 1024)\n"  # this parent's peak: over 400 MiB, pages touched
        "for i in range(0, len(big), 4096):\n    big[i] = 1\n"
        "out = subprocess.run([sys.executable, '-c', 'from grm.process import peak_rss_mb; print(peak_rss_mb())'],\n"
        "                     capture_output=True, text=True, check=True)\n"
        "print(out.stdout.strip())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0 < float(out.stdout.split()[-1]) < 200, out.stdout
