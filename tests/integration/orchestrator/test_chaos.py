"""Chaos: a run killed in every way we know resumes to the same prompt sequence (and, in sync mode,
the same metrics) as one that was never interrupted. Real Ray, SmolLM2 policy and judge, torch
trainer; two steps each, the interruption during step 2."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import NO_EXPORT, ROOT
from tests.integration.orchestrator.test_run import ENV, SMALL, grm_run, metrics

pytestmark = [pytest.mark.slow, pytest.mark.extended]

COMMON = ["schedule.mode=sync", "train.backend.type=torch", "train.steps=2", "checkpoint.every=1", "checkpoint.keep=1", NO_EXPORT]


def prompts(out: Path) -> list[tuple[int, str]]:
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x.strip()]
    return [(s["step"], s["prompt_id"]) for s in rows]


def start(out: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "grm", "run", "builtin:quickstart", f"out_dir={out}", *SMALL, *COMMON, *extra]
    return subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for(cond, what: str, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def step_one_checkpointed(out: Path) -> bool:
    return (out / "checkpoints" / "step-1" / "COMPLETE").exists()


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chaos") / "straight"
    grm_run(out, *COMMON)
    return out


def assert_same_run(resumed: Path, straight: Path) -> None:
    assert prompts(resumed) == prompts(straight)  # 0 prompts lost or repeated
    a, b = metrics(straight), metrics(resumed)
    assert [m["step"] for m in b] == [1, 2]
    for key in ("reward_mean", "loss", "kl", "response_len_mean"):
        assert b[1][key] == pytest.approx(a[1][key], rel=1e-3, abs=1e-5), key


def test_sigterm_mid_step_then_resume_matches_uninterrupted(tmp_path, straight):
    """SIGTERM (a scheduler's preemption) during step 2 checkpoints after step 1, with no checkpoint
    due then (checkpoint.every=0); the resumed run trains step 2 on step 2's prompts and ends where
    the uninterrupted run ends."""
    out = tmp_path / "sigterm"
    p = start(out, "checkpoint.every=0")
    wait_for(lambda: (out / "metrics.jsonl").exists() and bool((out / "metrics.jsonl").read_text().strip()), "step 1")
    time.sleep(1.0)  # step 2 is under way
    p.send_signal(signal.SIGTERM)
    log, _ = p.communicate(timeout=600)
    assert p.returncode == 128 + signal.SIGTERM, log[-4000:]
    assert "writing a checkpoint at step 1" in log and "SIGTERM received" not in log, log[-3000:]
    last = log.strip().splitlines()[-1]
    assert last == f"error: stopped by SIGTERM after 1 trained step(s): continue from step-1 with --resume {out}", last
    assert (out / "checkpoints" / "step-1" / "COMPLETE").exists()
    r = grm_run(out, *COMMON, "checkpoint.every=0", resume=out)
    assert "resuming" in r.stdout + r.stderr
    assert all(m["staleness_max"] == 0 for m in metrics(straight))  # sync mode is strictly on-policy
    # sync: each phase runs alone and takes both pools' cores, as read inside the actors
    placement = json.loads((straight / "placement.json").read_text())
    assert placement["policy"]["threads"] == placement["judge:helpfulness-pointwise-logprob"]["threads"] == 2
    assert all(m["threads_training"] == 2 for m in metrics(straight))
    assert_same_run(out, straight)


def test_kill_9_driver_mid_step_then_resume(tmp_path, straight):
    """The machine goes away (the driver and every Ray process it started, SIGKILL) during step 2."""
    out = tmp_path / "killed"
    p = start(out)
    wait_for(lambda: step_one_checkpointed(out), "the step-1 checkpoint")
    time.sleep(1.0)  # step 2 is under way
    tree = [p.pid] + [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.communicate(timeout=60)
    assert [m["step"] for m in metrics(out)] in ([1], [1, 2])  # nothing was written after the kill
    r = grm_run(out, *COMMON, resume=out)
    assert "resuming" in r.stdout + r.stderr
    assert_same_run(out, straight)


def test_policy_actor_killed_mid_step_stops_naming_the_role_then_resumes(tmp_path, straight):
    out = tmp_path / "policy-killed"
    p = start(out)
    wait_for(lambda: step_one_checkpointed(out), "the step-1 checkpoint")
    time.sleep(1.0)
    pid = json.loads((out / "placement.json").read_text())["policy"]["pid"]
    os.kill(pid, signal.SIGKILL)
    log, _ = p.communicate(timeout=600)
    assert p.returncode not in (0, None), log[-3000:]
    tail = log.strip().splitlines()[-1]
    assert "policy lost" in tail and "pool 'train'" in tail and "resume from step-1" in tail, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    r = grm_run(out, *COMMON, resume=out)
    assert "resuming" in r.stdout + r.stderr
    assert_same_run(out, straight)


@pytest.fixture
def small_disk(tmp_path, straight):
    """A tmpfs that holds one checkpoint of this run and its logs, but not two."""
    size = sum(f.stat().st_size for f in (straight / "checkpoints").rglob("*") if f.is_file())
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size * 1.5)}", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.decode().strip()}")
    try:
        yield mnt, size
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_while_checkpointing_keeps_the_previous_checkpoint(small_disk, straight):
    mnt, size = small_disk
    out = mnt / "run"
    p = start(out)
    log, _ = p.communicate(timeout=900)
    assert p.returncode not in (0, None), log[-3000:]
    tail = log.strip().splitlines()[-1]
    assert "writing the checkpoint failed (No space left on device" in tail, log[-3000:]
    assert "step-1 is intact" in tail and "Traceback" not in log, log[-3000:]
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step-1"], ckpts  # no half-written directory left, nothing taken for complete
    assert (out / "checkpoints" / "step-1" / "COMPLETE").exists()
    # space is freed (the tmpfs grows) and the run resumes in place from step 1
    subprocess.run(["mount", "-o", f"remount,size={int(size * 3)}", str(mnt)], check=True)
    r = grm_run(out, *COMMON, resume=out)
    assert "resuming" in r.stdout + r.stderr and "from step-1" in r.stdout + r.stderr
    assert_same_run(out, straight)
    shutil.rmtree(out, ignore_errors=True)
