"""A judge with ``replicas: 2`` end to end: real Ray, SmolLM2 policy and pointwise SmolLM2 judge (both
replicas sharing the judge pool's core), one replica SIGKILLed while it judges a call."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import NO_EXPORT, ROOT
from tests.integration.orchestrator.test_run import ENV, SMALL, metrics

pytestmark = pytest.mark.slow

JUDGE = "helpfulness-pointwise-logprob"


def test_a_replica_killed_mid_call_loses_no_sample(tmp_path):
    out = tmp_path / "replicas"
    args = [
        *(sys.executable, "-m", "grm", "run", "builtin:quickstart", f"out_dir={out}", *SMALL),
        "judges.0.replicas=2",
        "schedule.stream_prompts=1",  # two calls per step, so both replicas judge
        *("train.steps=3", "schedule.mode=sync", "train.backend.type=torch", "checkpoint.every=0", NO_EXPORT),
    ]
    p = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and p.poll() is None and not (out / "placement.json").exists():
            time.sleep(0.2)
        placement = json.loads((out / "placement.json").read_text())
        replicas = [placement[f"judge:{JUDGE}#{i}"] for i in range(2)]
        assert {r["pool"] for r in replicas} == {"judge"} and replicas[0]["pid"] != replicas[1]["pid"]
        # an idle judge actor uses next to no CPU; one judging a call keeps its torch thread busy
        victim = psutil.Process(replicas[1]["pid"])
        while time.time() < deadline and p.poll() is None and victim.cpu_percent(interval=0.1) < 50:
            pass
        assert p.poll() is None, "the run ended before replica 1 judged anything"
        os.kill(victim.pid, signal.SIGKILL)
        log, _ = p.communicate(timeout=900)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, log[-4000:]
    assert f"judge '{JUDGE}' replica 1 died" in log and "re-issuing its 1 call(s) to the other replicas" in log, log[-4000:]
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1, 2, 3]
    assert sum(m["masked"] for m in ms) == 0 and sum(m[f"judge_timeouts/{JUDGE}"] for m in ms) == 0
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * 4  # 0 lost ...
    assert all(s["judges"][JUDGE] is not None and s["judges"][JUDGE]["score"] is not None for s in samples)  # ... 0 masked
    items = [sum(m[f"judge_items/{JUDGE}/{i}"] for m in ms) for i in range(2)]
    assert sum(items) == 3 * 4 and items[0] > 0, items  # each sample judged once, by one of the two
    assert all(m[f"judge_seconds/{JUDGE}/{i}"] >= 0 for m in ms for i in range(2))
