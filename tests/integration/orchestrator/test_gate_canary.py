"""Judge gate and canary through the real ``grm run``: a gate that fails stops the run before Ray
places the policy; one that passes lets a tiny quickstart run train, with canaries on the model
judge (its actor) and the rule verifier (the driver) after every step, and a resume that keeps the
passed gate and the canaries' first readings."""

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_grm
from tests.integration.conftest import GATE, GATED
from tests.integration.orchestrator.test_run import ENV, SMALL

pytestmark = pytest.mark.slow


def metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_a_judge_below_its_gate_stops_the_run_before_the_policy_loads(tmp_path):
    out = tmp_path / "fail"
    r = run_grm(
        "run", "builtin:arith-verifier", f"out_dir={out}", "judges.0.spec=builtin:format", f"judges.0.gate={GATE}", env=ENV
    )
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert errors == [
        "error: judge 'format' failed its gate: accuracy 0.000 (95% CI 0.000-0.000) on 20 labelled pairs of "
        f"builtin:arith-pairs is below min_accuracy 0.9; the policy was not loaded; inspect {out}/gate/format/report.md"
    ]
    # the policy never loaded: no Ray was started, no role placed, nothing trained
    assert "Started a local Ray" not in r.stdout + r.stderr
    assert not (out / "placement.json").exists() and not (out / "metrics.jsonl").exists()
    gate = json.loads((out / "gate.json").read_text())["format"]
    assert gate["passed"] is False and gate["accuracy"] == 0.0 and gate["pairs"] == 20
    eval_metrics = json.loads((out / "gate" / "format" / "metrics.json").read_text())
    assert eval_metrics["judges"]["format"]["pairs"]["tie_rate"] == 1.0  # grm eval's own output, kept to inspect


def test_a_passing_gate_trains_with_canaries_and_resume_keeps_both(gated_run):
    out, r = gated_run
    assert "gate passed: judge 'numeric-answer' accuracy 1.000 (95% CI 1.000-1.000) on 20 labelled pairs" in r.stdout
    assert json.loads((out / "gate.json").read_text())["numeric-answer"]["passed"] is True
    ms = metrics(out)
    for m in ms:
        assert m["canary/numeric-answer/accuracy"] == 1.0 and m["canary/numeric-answer/accuracy_drift"] == 0.0
        assert m["canary/numeric-answer/masked"] == 0 and m["canary/numeric-answer/alarm"] is False
        # the model judge scored its 2 pairs (4 responses) on its actor: a score on its 1-10 scale
        assert 1.0 <= m["canary/helpfulness-pointwise-logprob/score_mean"] <= 10.0
        assert m["canary/helpfulness-pointwise-logprob/masked"] == 0
    assert ms[0]["canary/helpfulness-pointwise-logprob/accuracy_drift"] == 0.0  # the first reading is the baseline
    report = (out / "report.md").read_text()
    assert "## Judge gate" in report and "## Judge canary" in report and "| 2 | numeric-answer | 1.000 | +0.000" in report

    r = run_grm(
        "run", "builtin:quickstart", f"out_dir={out}", "train.steps=3", *SMALL, *GATED, "--resume", str(out), timeout=900, env=ENV
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    assert "gate: judge 'numeric-answer' passed before" in r.stdout and "gate passed:" not in r.stdout
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1, 2, 3]
    first = ms[0]["canary/helpfulness-pointwise-logprob/accuracy"]
    third = ms[2]["canary/helpfulness-pointwise-logprob/accuracy"]
    assert ms[2]["canary/helpfulness-pointwise-logprob/accuracy_drift"] == pytest.approx(third - first)  # baseline kept
    shutil.rmtree(out / "checkpoints")  # a policy checkpoint is large; the suite leaves none behind (grm view reads the rest)
