"""`grm run` end to end with real Ray, SmolLM2 policy and judge, DeepSpeed/torch trainers."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, run_grm

pytestmark = pytest.mark.slow

SMALL = [
    "algorithm.prompts_per_step=2",
    "algorithm.group_size=2",
    "rollout.max_new_tokens=12",
    "train.micro_batch_size=2",
    "judges.0.overrides=[sampling.max_new_tokens=12]",
]
ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}


def grm_run(out: Path, *extra: str, resume: Path | None = None) -> subprocess.CompletedProcess:
    args = ["run", "builtin:quickstart", f"out_dir={out}", *SMALL, *extra]
    if resume:
        args += ["--resume", str(resume)]
    r = run_grm(*args, timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    return r


def metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_async_run_writes_every_artifact(tmp_path):
    out = tmp_path / "async"
    # the reference on the judge's pool is hosted in the judge's actor (one process takes turns)
    r = grm_run(out, "train.steps=2", "schedule.mode=async", "checkpoint.every=1", "reference.pool=judge")
    assert f"run directory: {out}" in r.stdout
    for f in ("config.resolved.yaml", "metrics.jsonl", "samples.jsonl", "placement.json", "report.md", "curves.png"):
        assert (out / f).exists(), f
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert (out / "checkpoints" / "step-2" / "COMPLETE").exists()
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1, 2]
    assert ms[1]["staleness_max"] == 1  # step 2 was generated before step 1 trained
    for key in (
        "reward_mean",
        "kl",
        "entropy",
        "clip_frac",
        "response_len_mean",
        "seconds_rollout",
        "seconds_judging",
        "seconds_reference",
        "seconds_training",
        "seconds_sync",
        "seconds_idle",
        "judge_share",
        "reward/helpfulness-pointwise-logprob",
        "reward/numeric-answer",
        "masked",
    ):
        assert key in ms[1], key
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 4
    s = samples[0]
    assert set(s["judges"]) == {"helpfulness-pointwise-logprob", "numeric-answer"}
    assert s["judges"]["helpfulness-pointwise-logprob"]["critiques"] and "advantage" in s and "policy_version" in s
    placement = json.loads((out / "placement.json").read_text())
    assert placement["policy"]["pool"] == "train" and placement["judge:helpfulness-pointwise-logprob"]["pool"] == "judge"
    assert placement["reference"]["pool"] == "judge"
    assert placement["reference"]["pid"] == placement["judge:helpfulness-pointwise-logprob"]["pid"]
    assert all(math.isfinite(m["kl"]) and m["kl"] >= 0 for m in ms)  # reference log-probs arrived from the judge actor


@pytest.mark.timeout(2800)  # three `grm run`s in a row, each allowed 900 s
def test_sigterm_mid_step_then_resume_matches_uninterrupted(tmp_path):
    """SIGTERM (a scheduler's preemption) during step 2 checkpoints after step 1; the resumed run
    trains step 2 on step 2's prompts and ends where the uninterrupted run ends."""
    common = ["schedule.mode=sync", "train.backend.type=torch", "checkpoint.every=0", "train.steps=3"]
    straight = tmp_path / "straight"
    grm_run(straight, *common)
    part = tmp_path / "part"
    args = [sys.executable, "-m", "grm", "run", "builtin:quickstart", f"out_dir={part}", *SMALL, *common]
    p = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while time.time() < deadline and not ((part / "metrics.jsonl").exists() and (part / "metrics.jsonl").read_text().strip()):
        time.sleep(0.2)
    time.sleep(1.0)  # step 2 is under way
    p.send_signal(signal.SIGTERM)
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 130, log[-4000:]
    assert "writing a checkpoint at step 1" in log and "SIGTERM received" not in log, log[-3000:]
    assert (part / "checkpoints" / "step-1" / "COMPLETE").exists()
    r = grm_run(part, *common, resume=part)
    assert "resuming" in r.stdout + r.stderr
    a, b = metrics(straight), metrics(part)
    assert [m["step"] for m in b] == [1, 2, 3]
    assert all(m["staleness_max"] == 0 for m in a)  # sync mode is strictly on-policy

    def prompts(out):
        rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        return [(s["step"], s["prompt_id"]) for s in rows]

    assert prompts(part) == prompts(straight)  # no prompt skipped or repeated
    for key in ("reward_mean", "loss", "kl", "response_len_mean"):
        assert b[2][key] == pytest.approx(a[2][key], rel=1e-3, abs=1e-5), key


def test_judge_actor_killed_mid_run_is_restarted(tmp_path):
    out = tmp_path / "kill"
    args = [
        sys.executable,
        "-m",
        "grm",
        "run",
        "builtin:quickstart",
        f"out_dir={out}",
        *SMALL,
        "train.steps=3",
        "schedule.mode=sync",
        "train.backend.type=torch",
        "checkpoint.every=0",
    ]
    p = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    placement = out / "placement.json"
    deadline = time.time() + 300
    while time.time() < deadline and not (out / "metrics.jsonl").exists():
        time.sleep(0.5)
    assert placement.exists(), "run did not start"
    pid = json.loads(placement.read_text())["judge:helpfulness-pointwise-logprob"]["pid"]
    os.kill(pid, signal.SIGKILL)  # during step 2
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 0, log[-4000:]
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1, 2, 3]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * 4  # no lost samples
    assert sum(m["masked"] for m in ms) == 0


@pytest.mark.timeout(2400)
def test_two_node_cluster_places_roles_by_pool_resources_and_survives_losing_a_node(tmp_path):
    """Roles land on the nodes their pools ask for; when the judge's node dies mid-step the run
    checkpoints the trained steps and stops naming the lost role; with the node back it resumes."""
    env = {**os.environ, **ENV}
    port = 6390 + os.getpid() % 50
    ray_bin = str(Path(sys.executable).with_name("ray"))
    node_b_port = port + 100  # the worker node's raylet port, to find its process

    def start_node_b():
        worker = subprocess.run(
            [
                ray_bin,
                "start",
                f"--address=127.0.0.1:{port}",
                "--num-cpus=1",
                '--resources={"node_b": 1}',
                "--object-store-memory=400000000",
                f"--node-manager-port={node_b_port}",
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        assert worker.returncode == 0, worker.stderr

    subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True)
    head = subprocess.run(
        [
            ray_bin,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            '--resources={"node_a": 1}',
            "--include-dashboard=false",
            "--object-store-memory=400000000",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert head.returncode == 0, head.stderr
    try:
        start_node_b()
        pipeline = tmp_path / "two-node.yaml"
        text = (ROOT / "pipelines" / "quickstart.yaml").read_text()
        text = text.replace(
            "pools: {train: {cpus: 1}, judge: {cpus: 1}}",
            "pools: {train: {cpus: 1, resources: {node_a: 1}}, judge: {cpus: 1, resources: {node_b: 1}}}",
        )
        text = text.replace("builtin:smollm2-135m-instruct", str(ROOT / "policy" / "smollm2-135m-instruct.yaml"))
        text = text.replace("builtin:helpfulness-pointwise-logprob", str(ROOT / "judges" / "helpfulness-pointwise-logprob.yaml"))
        text = text.replace("builtin:numeric-answer", str(ROOT / "judges" / "numeric-answer.yaml"))
        pipeline.write_text(text)
        out = tmp_path / "two-node"
        common = [*SMALL, "train.steps=2", "schedule.mode=sync", "train.backend.type=torch", "checkpoint.every=1"]
        args = [sys.executable, "-m", "grm", "run", str(pipeline), f"out_dir={out}", *common, "--address", f"127.0.0.1:{port}"]
        p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 600
        while time.time() < deadline and not (out / "checkpoints" / "step-1" / "COMPLETE").exists():
            time.sleep(0.2)
        placement = json.loads((out / "placement.json").read_text())
        code = (
            f"import ray, json; ray.init(address='127.0.0.1:{port}', log_to_driver=False);"
            "print(json.dumps({n['NodeID']: sorted(k for k in n['Resources'] if k.startswith('node_'))"
            " for n in ray.nodes() if n['Alive']}))"
        )
        nodes = json.loads(
            subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        )
        assert nodes[placement["policy"]["node_id"]] == ["node_a"]
        assert nodes[placement["judge:helpfulness-pointwise-logprob"]["node_id"]] == ["node_b"]

        # node_b goes away during step 2: its raylet and every worker under it
        raylet = next(
            q
            for q in psutil.process_iter(["cmdline"])
            if q.info["cmdline"]
            and "raylet" in q.info["cmdline"][0]
            and f"--node_manager_port={node_b_port}" in q.info["cmdline"]
        )
        for q in [raylet, *raylet.children(recursive=True)]:
            q.kill()
        log, _ = p.communicate(timeout=600)
        assert p.returncode not in (0, None), log[-3000:]
        tail = log.strip().splitlines()[-1]
        # the node's death (or, before Ray has noticed it, its actor's) names the judge's role
        assert "judge:helpfulness-pointwise-logprob lost" in tail and "pool 'judge'" in tail, log[-3000:]
        assert "writing a checkpoint at step 1" in log, log[-3000:]
        assert "resume from step-1" in tail and "Traceback" not in log, log[-3000:]

        start_node_b()  # the node is back: the run resumes and completes
        r = run_grm(
            "run",
            str(pipeline),
            f"out_dir={out}",
            *common,
            "--address",
            f"127.0.0.1:{port}",
            "--resume",
            str(out),
            timeout=900,
            env=ENV,
        )
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
        assert [m["step"] for m in metrics(out)] == [1, 2]
        rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        assert len(rows) == 2 * 4 and len({(x["step"], x["prompt_id"], x["response"]) for x in rows}) == len(rows)
    finally:
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True)


def test_bad_placement_is_a_clear_error(tmp_path):
    out = tmp_path / "bad"
    r = run_grm("run", "builtin:quickstart", f"out_dir={out}", "pools.judge.cpus=64", *SMALL, timeout=300, env=ENV)
    assert r.returncode == 2 and "pool 'judge' needs 64 CPU" in r.stderr and "Traceback" not in r.stderr
    r = run_grm("validate", "builtin:quickstart", "--set", "judges.0.pool=gpu")
    assert r.returncode != 0 and "'gpu' is not a declared pool" in r.stderr


@pytest.mark.parametrize(
    "pipeline,extra",
    [
        ("builtin:ppo-critic", ["algorithm.prompts_per_step=2", "algorithm.group_size=2"]),
        ("builtin:quickstart", ["algorithm.dynamic_filtering=true", "schedule.mode=sync", "algorithm.type=rloo"]),
    ],
)
def test_ppo_critic_and_dynamic_filtering_steps(tmp_path, pipeline, extra):
    out = tmp_path / "run"
    args = ["run", pipeline, f"out_dir={out}", *SMALL, "train.steps=1", "train.backend.type=torch", *extra]
    r = run_grm(*args, timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    (m,) = metrics(out)
    if "ppo" in pipeline:
        assert "critic_loss" in m and m["critic_loss"] > 0
    else:
        assert "groups_kept_informative" in m and 0 <= m["refill_rounds"] <= 3
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4
