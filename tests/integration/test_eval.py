"""`grm eval` end to end on SmolLM2: outputs, SIGKILL + resume, refusal on mismatch, rescore."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, run_grm

pytestmark = pytest.mark.slow

JUDGE = "builtin:pairwise-logprob"  # no critique: the fastest real judge
N = 10


def _ids(out):
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip()]
    keys = [(x["judge"], x["item_id"]) for x in lines]
    return keys, lines


def test_eval_end_to_end_resume_after_sigkill_and_rescore(tmp_path):
    env = {"OMP_NUM_THREADS": "2"}
    full = tmp_path / "full"
    r = run_grm(
        "eval", JUDGE, "--data", "builtin:arith-pairs", "--out", str(full), "--limit", str(N), "--batch-size", "2", env=env
    )
    assert r.returncode == 0, r.stderr
    for f in ("results.jsonl", "metrics.json", "report.md", "config.resolved.yaml", "confusion-pairwise-logprob.png"):
        assert (full / f).exists(), f
    keys, lines = _ids(full)
    assert len(keys) == N and len(set(keys)) == N
    assert all(len(x["results"][0]["samples"]) == 2 for x in lines)  # both orders recorded
    metrics = json.loads((full / "metrics.json").read_text())
    pm = metrics["judges"]["pairwise-logprob"]["pairs"]
    assert pm["n"] == N and 0 <= pm["accuracy_average"] <= 1 and "positional_agreement" in pm
    assert all(len(x["lengths"]) == 2 and min(x["lengths"]) > 0 for x in lines)  # characters of each response
    lb = pm["length"]  # judge_longer_preferred is null when no pair of unequal length got a decided verdict
    assert lb["n"] <= N and lb["n_longer_preferred"] + lb["n_shorter_preferred"] == lb["n"]
    assert lb["judge_longer_preferred"] is None or 0 <= lb["judge_longer_preferred"] <= 1
    assert "acc1" in r.stdout and "pairwise-logprob" in (full / "report.md").read_text()

    # kill -9 mid-run, then resume with the same command
    killed = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "grm",
        "eval",
        JUDGE,
        "--data",
        "builtin:arith-pairs",
        "--out",
        str(killed),
        "--limit",
        str(N),
        "--batch-size",
        "2",
    ]
    p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = killed / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not results.exists() or len(results.read_text().splitlines()) < 2):
        time.sleep(0.2)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    partial, _ = _ids(killed)
    assert 2 <= len(partial) < N, len(partial)
    r = run_grm(
        "eval", JUDGE, "--data", "builtin:arith-pairs", "--out", str(killed), "--limit", str(N), "--batch-size", "2", env=env
    )
    assert r.returncode == 0, r.stderr
    assert "resuming" in r.stderr
    resumed, resumed_lines = _ids(killed)
    assert len(resumed) == len(set(resumed)) == N and set(resumed) == set(keys)
    # greedy log-prob judge: identical verdicts whether or not the run was interrupted
    assert {x["item_id"]: x["verdict"] for x in resumed_lines} == {x["item_id"]: x["verdict"] for x in lines}

    # a different judge in the same --out is refused, unless --force
    r = run_grm("eval", "builtin:pairwise-preference", "--data", "builtin:arith-pairs", "--out", str(killed), "--limit", "2")
    assert r.returncode == 2 and "different evaluation" in r.stderr and "Traceback" not in r.stderr

    # rescore with nothing changed reproduces the metrics exactly
    before = json.loads((full / "metrics.json").read_text())["judges"]
    r = run_grm("rescore", str(full))
    assert r.returncode == 0, r.stderr
    after = json.loads((full / "metrics.json").read_text())
    assert after["rescored"] is True
    for name, m in before.items():
        for k in ("pairs", "masked_rate", "parse_failure_rate", "items"):
            assert after["judges"][name][k] == m[k], k


def test_eval_pointwise_judge_with_rescore_of_changed_parser(tmp_path):
    out = tmp_path / "pw"
    r = run_grm(
        "eval",
        "builtin:helpfulness-pointwise",
        "--data",
        "builtin:arith-pairs",
        "--out",
        str(out),
        "--limit",
        "3",
        "sampling.n=1",
        "sampling.max_new_tokens=24",
        "on_failure.retries=0",
    )
    assert r.returncode == 0, r.stderr
    _, lines = _ids(out)
    assert all(len(x["results"]) == 2 for x in lines)  # each response of a pair scored alone
    # a parser that never matches: rescore turns every judgment into a counted failure, never a 0
    spec = (ROOT / "judges" / "helpfulness-pointwise.yaml").read_text()
    spec = spec.replace("'Score:\\s*\\**\\s*(\\d+(?:\\.\\d+)?)'", "'NEVER(\\d)'").replace("prompts/", "")
    assert "NEVER" in spec
    changed = tmp_path / "changed.yaml"
    changed.write_text(spec.split("examples:")[0])
    r = run_grm("rescore", str(out), "--judge", str(changed))
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "metrics.json").read_text())["judges"]["helpfulness-pointwise"]
    assert m["parse_failure_rate"] == 1.0 and m["masked_rate"] == 1.0
