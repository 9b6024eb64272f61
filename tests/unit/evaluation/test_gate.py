"""The judge gate's decision and record, with rule verifiers on builtin:arith-pairs (no model, no Ray)."""

import json
import math

import pytest

from grm.config.pipeline import GateSpec
from grm.config.resolve import load_pipeline
from grm.data.errors import DataError
from grm.evaluation import gate as G

PAIRS = "builtin:arith-pairs"


def metrics(acc, ci=(0.5, 0.9), n=20, masked=0.0):
    return {"masked_rate": masked, "pairs": {"n": n, "accuracy_swap_combined": acc, "accuracy_swap_combined_ci95": ci}}


@pytest.mark.parametrize(
    ("acc", "bar", "passed"),
    [(0.8, 0.8, True), (0.75, 0.8, False), (1.0, 0.0, True), (float("nan"), 0.0, False), (None, 0.5, False)],
)
def test_the_point_estimate_decides_and_an_undefined_accuracy_fails(tmp_path, acc, bar, passed):
    r = G.decide("j", metrics(acc), GateSpec(data=PAIRS, min_accuracy=bar), tmp_path / "gate" / "j", "abc")
    assert r.passed is passed
    if acc is None or (isinstance(acc, float) and math.isnan(acc)):
        assert r.accuracy is None and "accuracy undefined" in r.line()


def test_the_failure_line_names_judge_accuracy_ci_bar_and_eval_dir(tmp_path):
    r = G.decide("j", metrics(0.55, (0.35, 0.75), masked=0.1), GateSpec(data=PAIRS, min_accuracy=0.7), tmp_path, "abc")
    assert r.line() == (
        "judge 'j' failed its gate: accuracy 0.550 (95% CI 0.350-0.750) on 20 labelled pairs of builtin:arith-pairs, "
        f"10% masked is below min_accuracy 0.7; the policy was not loaded; inspect {tmp_path}/report.md"
    )
    assert "\n" not in r.line()


def loaded(tmp_path, judge: str, gate: str):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    p = tmp_path / "p.yaml"
    p.write_text(
        "name: t\npools: {a: {cpus: 1}}\npolicy: {spec: builtin:smollm2-135m-instruct, pool: a}\n"
        f"judges:\n  - {{spec: builtin:{judge}, gate: {gate}}}\ndata: {{prompts: prompts.jsonl}}\n"
    )
    return load_pipeline(p)


def test_a_verifier_that_cannot_tell_the_pair_apart_fails_and_the_decision_is_recorded(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(G.GateFailed, match=r"^judge 'format' failed its gate: accuracy 0.000 .* below min_accuracy 0.5"):
        G.run_gates(loaded(tmp_path, "format", f"{{data: {PAIRS}, min_accuracy: 0.5, limit: 10}}"), run)
    rec = G.recorded(run)["format"]
    assert rec["passed"] is False and rec["pairs"] == 10 and rec["eval_dir"] == str(run / "gate" / "format")
    assert (run / "gate" / "format" / "results.jsonl").exists()  # grm eval's output, to inspect


def test_a_passed_gate_is_not_rerun_but_a_changed_one_is(tmp_path, monkeypatch):
    run = tmp_path / "run"
    spec = f"{{data: {PAIRS}, min_accuracy: 0.9, limit: 10}}"
    (result,) = G.run_gates(loaded(tmp_path, "numeric-answer", spec), run)
    assert result.passed and result.accuracy == 1.0 and result.ci95 == (1.0, 1.0)
    stale = run / "gate" / "numeric-answer" / "stale-marker"
    stale.write_text("x")

    def no_eval(*a, **k):
        raise AssertionError("a passed gate was evaluated again")

    monkeypatch.setattr("grm.evaluation.runner.run", no_eval)
    assert G.run_gates(loaded(tmp_path, "numeric-answer", spec), run) == []  # --resume: recorded, not re-run
    monkeypatch.undo()
    (again,) = G.run_gates(loaded(tmp_path, "numeric-answer", spec.replace("limit: 10", "limit: 6")), run)
    assert again.pairs == 6 and not stale.exists()  # another gate: judged afresh in a clean eval dir
    assert json.loads((run / "gate.json").read_text())["numeric-answer"]["limit"] == 6


def test_data_without_labelled_pairs_is_named_before_any_judging(tmp_path):
    (tmp_path / "singles.jsonl").write_text('{"prompt": "p", "response": "r"}\n')
    with pytest.raises(DataError, match=r"judge 'numeric-answer' gate: .*singles.jsonl has no labelled pairs"):
        G.run_gates(loaded(tmp_path, "numeric-answer", "{data: singles.jsonl, min_accuracy: 0.5}"), tmp_path / "run")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"j": {"judge": "j"}}', '{"j": 3}', "[" * 100_000])
def test_a_damaged_gate_record_is_named_by_the_gate_and_the_report_never_dies_on_it(tmp_path, text):
    from grm.base import GrmError
    from grm.evaluation.gate import recorded
    from grm.orchestrator.canary import gate_rows, report_lines

    (tmp_path / "gate.json").write_text(text)
    if text.startswith('{"j": {'):  # an object of objects is the gate's shape: its fields are checked by the report
        assert recorded(tmp_path) == {"j": {"judge": "j"}}
    else:
        with pytest.raises(GrmError, match="gate.json"):
            recorded(tmp_path)
    with pytest.raises(GrmError, match="gate.json"):
        gate_rows(tmp_path / "gate.json")
    lines = report_lines(tmp_path, [])
    assert lines[0].startswith("(judge gate record not shown:") and "gate.json" in lines[0]
