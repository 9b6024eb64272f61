"""Length control on labelled pairs: hand-built judgments of a judge that prefers the longer answer."""

import pytest

from grm.evaluation.judge_metrics import compute
from grm.evaluation.length_control import LengthControl, controlled_margins, fit_slope, pair_margin, parse_length_control
from grm.evaluation.report import summary_rows


def pair(item, label, lengths, margin, mode):
    """A results.jsonl pair line: pairwise (``margin``) or pointwise (``scores``, score 1 - score 2 = margin)."""
    masked = margin is None
    verdict = None if masked else "1" if margin > 0 else "2" if margin < 0 else "tie"
    line = {
        "judge": "j",
        "item_id": item,
        "kind": "pair",
        "label": label,
        "human_score": None,
        "verdict": verdict,
        "order_verdicts": [verdict, verdict],
        "masked": masked,
        "lengths": lengths,
        "tokens": 1,
        "seconds": 1.0,
        "parse_failures": 0,
        "samples_total": 2,
        "truncated": 0,
    }
    if mode == "pairwise":
        line.update(margin=margin, scores=None, results=[{"score": None, "scores": None, "verdict": verdict}])
    else:
        scores = None if masked else [5.0 + margin, 5.0]
        line.update(scores=scores, results=[{"score": s, "scores": None, "verdict": None} for s in scores or [None, None]])
    return line


def pairs(mode):
    # margin = 0.01 x (length 1 - length 2) + q, q = +-0.3 towards the human label; q is orthogonal
    # to the length difference (sum q d = -60 - 60 + 60 + 60 = 0), so the slope fit is exactly 0.01.
    return [
        pair("a", 2, [300, 100], 2.0 - 0.3, mode),  # people preferred the shorter; the judge picks the longer
        pair("b", 1, [100, 300], -2.0 + 0.3, mode),  # the same, mirrored
        pair("c", 1, [250, 50], 2.0 + 0.3, mode),  # the longer is better: right either way
        pair("d", 2, [50, 250], -2.0 - 0.3, mode),
        pair("e", 1, [100, 100], 0.1, mode),  # equal lengths: no change
        pair("f", 1, [120, 80], None, mode),  # masked: stays masked, counts as wrong
    ]


@pytest.mark.parametrize("mode", ["pairwise", "pointwise"])
def test_regress_on_pairs_removes_the_preference_for_the_longer_answer(mode):
    m = compute(pairs(mode), ["j"], LengthControl("regress"))
    p = m["judges"]["j"]["pairs"]
    assert p["accuracy_swap_combined"] == 3 / 6  # c, d, e
    assert p["length"]["judge_longer_preferred"] == 1.0 and p["length"]["accuracy_shorter_preferred"] == 0.0
    lc = p["length_controlled"]
    assert lc["method"] == "regress" and lc["slope_per_char"] == pytest.approx(0.01)
    assert lc["accuracy_swap_combined"] == 5 / 6  # a, b, c, d, e; f still masked
    assert lc["length"]["judge_longer_preferred"] == 0.5  # of a-d it now picks the longer only in c, d
    assert lc["length"]["accuracy_shorter_preferred"] == 1.0 and lc["length"]["n_shorter_preferred"] == 2
    assert lc["verdicts_changed"] == 2
    lo, hi = lc["accuracy_swap_combined_ci95"]
    assert 0 <= lo <= hi <= 1
    assert m["length_control"] == "regress"
    rows = {r["judge"]: r for r in summary_rows(m)}
    assert rows["j [regress]"]["swap"] == "0.833" and rows["j [regress]"]["picks longer"] == "0.500"
    assert rows["j"]["swap"] == "0.500"


def test_penalty_on_pairs_takes_half_the_difference_and_zero_changes_nothing():
    p = compute(pairs("pairwise"), ["j"], LengthControl("penalty", 0.02))["judges"]["j"]["pairs"]["length_controlled"]
    assert p["slope_per_char"] == 0.01 and p["accuracy_swap_combined"] == 5 / 6
    p0 = compute(pairs("pairwise"), ["j"], LengthControl("penalty", 0.0))["judges"]["j"]["pairs"]
    assert p0["length_controlled"]["verdicts_changed"] == 0
    assert p0["length_controlled"]["accuracy_swap_combined"] == p0["accuracy_swap_combined"]
    assert "length_controlled" not in compute(pairs("pairwise"), ["j"])["judges"]["j"]["pairs"]


def test_margins_fit_and_symmetry():
    lines = pairs("pointwise")
    assert [pair_margin(x) for x in lines] == pytest.approx([1.7, -1.7, 2.3, -2.3, 0.1, None])
    margins = [1.7, -1.7, 2.3, -2.3, 0.1, None]
    diffs = [200, -200, 200, -200, 0, 40]
    assert fit_slope(margins, diffs) == pytest.approx(0.01)
    # which response is "1" is arbitrary: relabelling a pair (negating m and d) leaves the fit alone
    flipped = [-margins[0]] + margins[1:]
    assert fit_slope(flipped, [-200] + diffs[1:]) == pytest.approx(0.01)
    ctrl, slope = controlled_margins(margins, diffs, LengthControl("regress"))
    assert ctrl == pytest.approx([-0.3, 0.3, 0.3, -0.3, 0.1, None]) and ctrl[4] == 0.1
    assert fit_slope([0.5, None], [0, 10]) is None  # no unmasked pair of unequal length
    assert controlled_margins([0.5], [0], LengthControl("regress")) == ([0.5], None)


def test_parse_length_control():
    assert parse_length_control("regress") == LengthControl("regress")
    assert parse_length_control("penalty:0.01") == LengthControl("penalty", 0.01)
    assert str(parse_length_control("penalty:0.01")) == "penalty:0.01"
    for bad, msg in [
        ("penalty", "penalty needs a coefficient >= 0"),
        ("penalty:-1", "penalty needs a coefficient >= 0"),
        ("penalty:nan", "penalty needs a coefficient >= 0"),
        ("regress:2", "expected regress or penalty:COEF"),
        ("median", "expected regress or penalty:COEF"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_length_control(bad)


def test_eval_and_rescore_report_the_controlled_rows(tmp_path, capsys, monkeypatch):
    """The flag's path through ``grm eval`` and ``grm rescore``: a pointwise judge on a scripted
    engine that scores the long, wordy answers 9 and the short ones 3 (no model)."""
    import json

    from grm.cli import main
    from grm.evaluation import runner
    from tests.unit.judges.fake_engine import ScriptedEngine

    engine = ScriptedEngine(lambda text, j, c: "Thorough. Score: 9" if "careful" in text else "Terse. Score: 3")
    real_load = runner.load
    monkeypatch.setattr(runner, "load", lambda ref, overrides=(): real_load(ref, engine=engine, overrides=overrides))
    long = "After careful addition of both numbers, the result is"
    rows = [
        {"prompt": "2+2?", "response_a": "4", "response_b": f"{long} 5", "label": 1},
        {"prompt": "3+4?", "response_a": "It is 9", "response_b": f"{long} 7", "label": 2},
        {"prompt": "1+5?", "response_a": f"{long} 6", "response_b": "7", "label": 1},
        {"prompt": "6+2?", "response_a": f"{long} 9", "response_b": "8", "label": 2},
    ]
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps(rows))
    out = tmp_path / "ev"
    args = ["eval", "builtin:helpfulness-pointwise", "--data", str(data), "--out", str(out), "sampling.n=1"]
    assert main([*args, "--length-control", "regress"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    p = m["judges"]["helpfulness-pointwise"]["pairs"]
    assert m["length_control"] == "regress" and p["accuracy_swap_combined"] == 0.5
    assert p["length"]["judge_longer_preferred"] == 1.0 and p["length_controlled"]["n"] == 4
    assert p["length_controlled"]["slope_per_char"] > 0
    report = (out / "report.md").read_text()
    assert "helpfulness-pointwise [regress]" in report and "in-sample" in report
    # rescore recomputes it from the stored judgments and lengths: nothing is generated
    calls = len(engine.calls)
    assert main(["rescore", str(out), "--length-control", "penalty:0"]) == 0
    after = json.loads((out / "metrics.json").read_text())["judges"]["helpfulness-pointwise"]["pairs"]
    assert len(engine.calls) == calls and after["length_controlled"]["method"] == "penalty:0"
    assert after["length_controlled"]["verdicts_changed"] == 0
    assert after["length_controlled"]["accuracy_swap_combined"] == after["accuracy_swap_combined"] == 0.5
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["rescore", str(out), "--length-control", "penalty"])
    assert "penalty needs a coefficient >= 0" in capsys.readouterr().err
