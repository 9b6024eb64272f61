"""`grm eval --policy` end to end on SmolLM2 with a rule verifier: outputs, SIGKILL mid-run and
resume to the same responses, refusal to mix sampling settings, and --against with a pairwise judge."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, run_grm

pytestmark = pytest.mark.slow

N = 6
ARGS = [
    "eval",
    "builtin:numeric-answer",
    "--policy",
    "smollm2-135m-instruct",
    "--prompts",
    "builtin:arith-prompts",
    "--limit",
    str(N),
    "--max-new-tokens",
    "24",
    "--batch-size",
    "2",
]
ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_policy_eval_end_to_end_kill_resume_and_against(tmp_path):
    full = tmp_path / "full"
    r = run_grm(*ARGS, "--out", str(full), env=ENV)
    assert r.returncode == 0, r.stderr
    for f in ("responses.jsonl", "results.jsonl", "summary.json", "report.md", "config.resolved.yaml", "lengths.png"):
        assert (full / f).exists(), f
    resp = _lines(full / "responses.jsonl")
    assert len(resp) == N and len({x["prompt_id"] for x in resp}) == N
    assert all(0 < x["tokens"] <= 24 and x["chars"] == len(x["response"]) for x in resp)
    res = _lines(full / "results.jsonl")
    assert len(res) == N and all(x["score"] in (0.0, 1.0) for x in res)  # a rule verifier never masks here
    s = json.loads((full / "summary.json").read_text())
    jm = s["sides"]["policy"]["judges"]["numeric-answer"]
    assert jm["n"] == N and jm["mean"] == sum(x["score"] for x in res) / N
    assert s["sides"]["policy"]["tokens"]["mean"] == pytest.approx(sum(x["tokens"] for x in resp) / N)
    assert "numeric-answer" in r.stdout and "mean [95% CI]" in (full / "report.md").read_text()

    # SIGKILL once the first batch is on disk, then the same command resumes
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "grm", *ARGS, "--out", str(killed)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while len(_lines(killed / "responses.jsonl")) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed, not finished
    before = len(_lines(killed / "responses.jsonl"))
    assert 2 <= before < N
    r = run_grm(*ARGS, "--out", str(killed), env=ENV)
    assert r.returncode == 0, r.stderr
    assert f"resuming: {before} of {N} responses" in r.stderr
    again = _lines(killed / "responses.jsonl")
    assert len(again) == N and len({x["prompt_id"] for x in again}) == N  # nothing generated twice
    assert {x["prompt_id"]: x["response"] for x in again} == {x["prompt_id"]: x["response"] for x in resp}  # greedy
    assert {x["prompt_id"]: x["score"] for x in _lines(killed / "results.jsonl")} == {x["prompt_id"]: x["score"] for x in res}

    # other sampling into the same directory: one clear line, no traceback
    r = run_grm(*ARGS, "--out", str(full), "--temperature", "0.7", env=ENV)
    assert r.returncode == 2 and "sampling" in r.stderr and "--force" in r.stderr and "Traceback" not in r.stderr

    # --against a second policy (same model, another system prompt) with a real pairwise judge
    other = tmp_path / "terse.yaml"
    other.write_text("name: terse\nmodel: smollm2-135m-instruct\nsystem_prompt: Reply with a single number and nothing else.\n")
    vs = tmp_path / "vs"
    args = [a if a != "builtin:numeric-answer" else "builtin:numeric-answer,builtin:pairwise-logprob" for a in ARGS]
    args[args.index("--limit") + 1] = "3"
    r = run_grm(*args, "--against", str(other), "--out", str(vs), env=ENV)
    assert r.returncode == 0, r.stderr
    s = json.loads((vs / "summary.json").read_text())
    wr = s["comparison"]["judges"]["pairwise-logprob"]
    assert wr["kind"] == "win_rate" and wr["n"] + wr["masked"] == 3 and wr["wins"] + wr["ties"] + wr["losses"] == wr["n"]
    assert wr["n"] == 0 or 0 <= wr["win_rate"] <= 1
    diff = s["comparison"]["judges"]["numeric-answer"]
    assert diff["kind"] == "difference" and diff["n"] == 3
    mine = {
        x["prompt_id"]: x["score"]
        for x in _lines(vs / "results.jsonl")
        if x["judge"] == "numeric-answer" and x["side"] == "policy"
    }
    theirs = {
        x["prompt_id"]: x["score"]
        for x in _lines(vs / "results.jsonl")
        if x["judge"] == "numeric-answer" and x["side"] == "other"
    }
    assert diff["mean"] == pytest.approx(sum(mine[k] - theirs[k] for k in mine) / 3)
    pairs = [x for x in _lines(vs / "results.jsonl") if x["side"] == "pair"]
    assert len(pairs) == 3 and all(len(x["result"]["samples"]) == 2 for x in pairs)  # both orders judged
    sides = {x["side"]: x["response"] for x in _lines(vs / "responses.jsonl") if x["prompt_id"] == pairs[0]["prompt_id"]}
    assert set(sides) == {"policy", "other"}
    assert "POLICY vs OTHER" in r.stdout and (vs / "win-rate.png").exists()
