"""Multi-rank policy worker groups in `grm run`: N DeepSpeed ranks (gloo) reproduce the 1-rank run,
and `--dry-run` prints the placement a pipeline needs."""

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, run_grm

pytestmark = pytest.mark.slow

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}
# arith-verifier (rule judge, reference colocated with the policy), 8 sequences a step of different
# lengths, micro-batches of 2: one rank runs 4 micro-batches a step, each of two ranks runs 2
SMALL = [
    "algorithm.prompts_per_step=2",
    "algorithm.group_size=4",
    "rollout.max_new_tokens=16",
    "train.micro_batch_size=2",
    "train.steps=3",
    "schedule.mode=sync",
    "checkpoint.every=0",
    "checkpoint.keep=1",
    "pools.train.cpus=2",
]


def run(out: Path, *extra: str) -> list[dict]:
    r = run_grm("run", "builtin:arith-verifier", f"out_dir={out}", *SMALL, *extra, timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(out / "checkpoints" / "step-3" / "policy"), tag="state")


def samples(out: Path) -> list[tuple]:
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    return [(s["step"], s["id"], s["response"], s["reward"]) for s in rows]


@pytest.mark.timeout(2400)  # two `grm run`s in a row
@pytest.mark.parametrize("zero", [2, 3])
def test_two_ranks_reproduce_one_rank(tmp_path, zero):
    """Same global batch and seed: the same rollouts, rewards, losses and KL (1e-3 relative) and the
    same final weights (1e-4 max abs) with one rank of 2 threads or two ranks of one thread each."""
    one = run(tmp_path / "one", f"train.backend.zero_stage={zero}")
    two = run(tmp_path / "two", f"train.backend.zero_stage={zero}", "train.backend.ranks=2")
    placement = json.loads((tmp_path / "two" / "placement.json").read_text())
    assert {placement[f"policy#{r}"]["bundle"] for r in (0, 1)} == {0, 1}
    assert all(placement[f"policy#{r}"]["resources"]["CPU"] == 1.0 for r in (0, 1))
    assert samples(tmp_path / "two") == samples(tmp_path / "one")  # rollouts split across ranks, row for row
    for a, b in zip(one, two, strict=True):
        for key in ("reward_mean", "loss", "kl", "response_len_mean", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-6), (a["step"], key)
    wa, wb = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    assert wa.keys() == wb.keys()
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= 1e-4, worst
    moved = max(float((wa[k] - v).abs().max()) for k, v in final_weights_at_start().items() if k in wa)
    assert moved > 10 * max(worst, 1e-7)  # the runs trained: the match is not two untouched models


def final_weights_at_start() -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    from grm.models.store import resolve_model

    path = Path(resolve_model("smollm2-135m-instruct"))
    return {k: v.float() for f in path.glob("*.safetensors") for k, v in load_file(str(f)).items()}


def test_dry_run_prints_the_placement_and_what_is_missing():
    r = run_grm("run", "pipelines/cluster-example.yaml", "--dry-run", timeout=300, env=ENV)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "pool 'train': 8 bundle(s) of {CPU=4, GPU=1}" in r.stdout
    assert "policy rank 7 + reference: bundle 7" in r.stdout
    assert "pool 'train' needs 8 GPU, pool 'judge' needs 2 GPU: 10 GPU in all, the cluster has 0" in r.stderr
    r = run_grm(
        "run", "builtin:arith-verifier", "--dry-run", "train.backend.ranks=2", "train.micro_batch_size=2", timeout=300, env=ENV
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "policy rank 1 + reference: bundle 1, node" in r.stdout and "1 thread(s)" in r.stdout
    assert "numeric-answer" in r.stdout
    assert (ROOT / "pipelines" / "cluster-example.yaml").exists()


@pytest.mark.timeout(3000)  # three `grm run`s in a row
def test_two_node_cluster_one_rank_per_node_runs_and_resumes_to_the_same_result(tmp_path):
    """A pool of 2 nodes x 1 CPU holds a 2-rank policy, one rank per node (placement.json says
    which); a run stopped after step 1 and resumed ends where the straight run ends."""
    import os
    import subprocess
    import sys

    env = {**os.environ, **ENV}
    port = 6440 + os.getpid() % 50
    ray_bin = str(Path(sys.executable).with_name("ray"))
    start = [ray_bin, "start", "--num-cpus=1", "--object-store-memory=400000000"]
    subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True)
    try:
        head = subprocess.run(
            [*start, "--head", f"--port={port}", "--include-dashboard=false"], env=env, capture_output=True, text=True
        )
        assert head.returncode == 0, head.stderr
        worker = subprocess.run([*start, f"--address=127.0.0.1:{port}"], env=env, capture_output=True, text=True)
        assert worker.returncode == 0, worker.stderr
        common = [s for s in SMALL if not s.startswith(("pools.", "train.steps"))]
        common += ["pools.train={cpus: 1, nodes: 2}", "train.backend.ranks=2", "--address", f"127.0.0.1:{port}"]

        def go(out: Path, steps: int, *extra: str) -> list[dict]:
            r = run_grm(
                "run", "builtin:arith-verifier", f"out_dir={out}", *common, f"train.steps={steps}", *extra, timeout=900, env=ENV
            )
            assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
            return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]

        straight = go(tmp_path / "straight", 2)
        placement = json.loads((tmp_path / "straight" / "placement.json").read_text())
        assert placement["policy#0"]["node_id"] != placement["policy#1"]["node_id"]
        assert [placement[f"policy#{r}"]["bundle"] for r in (0, 1)] == [0, 1]
        go(tmp_path / "parts", 1)
        resumed = go(tmp_path / "parts", 2, "--resume", str(tmp_path / "parts"))
        assert [m["step"] for m in resumed] == [1, 2]
        assert samples(tmp_path / "parts") == samples(tmp_path / "straight")
        for key in ("reward_mean", "loss", "kl", "grad_norm"):
            assert resumed[1][key] == pytest.approx(straight[1][key], rel=1e-3, abs=1e-6), key
    finally:
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True)
