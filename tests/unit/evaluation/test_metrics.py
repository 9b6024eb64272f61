"""Metrics on hand-built result sets with known answers."""

import math

import pytest

from grm.evaluation import metrics as M
from grm.evaluation.judge_metrics import compute


def line(judge, item, label, o1, o2, final, kind="pair", score=None, human=None):
    return {
        "judge": judge,
        "item_id": item,
        "kind": kind,
        "label": label,
        "human_score": human,
        "order_verdicts": [o1, o2],
        "verdict": final,
        "score": score,
        "masked": final is None and score is None,
        "tokens": 10,
        "seconds": 0.5,
        "parse_failures": 1 if final is None else 0,
        "samples_total": 2,
        "results": [{"score": score, "scores": None, "verdict": final}],
    }


def test_pair_metrics_hand_computed():
    # 4 pairs. order1 verdicts: 1 2 1 1 ; order2: 1 1 tie 2 ; labels: 1 2 2 1 ; final: 1 tie None 1
    lines = [
        line("j", "a", 1, "1", "1", "1"),
        line("j", "b", 2, "2", "1", "tie"),
        line("j", "c", 2, "1", "tie", None),
        line("j", "d", 1, "1", "2", "1"),
    ]
    p = compute(lines, ["j"])["judges"]["j"]
    pm = p["pairs"]
    assert pm["accuracy_order1"] == 3 / 4  # a, b, d right
    assert pm["accuracy_order2"] == 1 / 4  # only a
    assert pm["accuracy_average"] == 0.5
    assert pm["accuracy_swap_combined"] == 2 / 4  # a, d; the tie and the masked one count as wrong
    assert pm["positional_agreement"] == 1 / 4  # only a has the same winner in both orders
    assert pm["tie_rate"] == 1 / 4
    assert p["masked_rate"] == 1 / 4
    assert p["parse_failure_rate"] == 1 / 8
    assert p["judgments_per_s"] == 2.0
    lo, hi = pm["accuracy_average_ci95"]
    assert 0 <= lo <= 0.5 <= hi <= 1


def test_length_bias_hand_computed():
    # lengths (chars) of responses 1/2; labels; judge's final verdicts.
    # a: 1 longer, human 1, judge 1  -> longer preferred by both, judge right
    # b: 2 longer, human 1, judge 2  -> human preferred the shorter, judge picked the longer: wrong
    # c: 1 longer, human 2, judge 2  -> human preferred the shorter, judge right (picked the shorter)
    # d: equal lengths               -> left out
    # e: 2 longer, human 2, judge None (masked) -> longer preferred, judge wrong, not counted as a pick
    lines = [
        line("j", "a", 1, "1", "1", "1"),
        line("j", "b", 1, "2", "2", "2"),
        line("j", "c", 2, "2", "2", "2"),
        line("j", "d", 1, "1", "1", "1"),
        line("j", "e", 2, None, None, None),
    ]
    for ln, lengths in zip(lines, ([90, 10], [10, 90], [90, 10], [50, 50], [10, 90]), strict=True):
        ln["lengths"] = lengths
    lb = compute(lines, ["j"])["judges"]["j"]["pairs"]["length"]
    assert lb["n"] == 4
    assert lb["human_longer_preferred"] == 2 / 4  # a, e
    assert lb["judge_longer_preferred"] == 2 / 3  # of a, b, c (e masked): a and b picked the longer
    assert lb["accuracy_longer_preferred"] == 1 / 2 and lb["n_longer_preferred"] == 2
    assert lb["accuracy_shorter_preferred"] == 1 / 2 and lb["n_shorter_preferred"] == 2
    # Results written before lengths were recorded simply have no length block.
    for ln in lines:
        del ln["lengths"]
    assert "length" not in compute(lines, ["j"])["judges"]["j"]["pairs"]


def test_kappa_and_majority():
    a = ["1", "1", "2", "2"]
    b = ["1", "2", "2", "2"]
    # po = 3/4; pe = (2/4)(1/4) + (2/4)(3/4) = 1/2 -> kappa = (3/4 - 1/2) / (1/2) = 1/2
    assert M.cohen_kappa(a, b) == pytest.approx(0.5)
    assert M.cohen_kappa(a, a) == 1.0
    assert M.majority_vote([["1", "2", None], ["1", "1", None], ["2", "1", None]]) == ["1", "1", None]
    assert M.majority_vote([["1"], ["2"]]) == ["tie"]


def test_correlations_hand_computed():
    pred = [1.0, 2.0, 3.0, 4.0, 5.0]
    human = [2.0, 1.0, 4.0, 3.0, 5.0]
    c = M.correlations(pred, human)
    # rank differences d = (-1, 1, -1, 1, 0): rho = 1 - 6*4 / (5*24) = 0.8
    assert c["spearman"] == pytest.approx(0.8)
    # concordant 8, discordant 2 of 10 pairs: tau = 0.6
    assert c["kendall"] == pytest.approx(0.6)
    assert c["pearson"] == pytest.approx(0.8)
    assert math.isnan(M.correlations([1, 1, 1], [1, 2, 3])["spearman"])


def test_vs_human_and_ensemble_rows():
    lines = [
        line("j", f"i{k}", None, None, None, None, kind="scored", score=float(s), human=float(h))
        for k, (s, h) in enumerate([(1, 2), (2, 1), (3, 4), (4, 3), (5, 5)])
    ]
    m = compute(lines, ["j"])["judges"]["j"]
    assert m["vs_human"]["spearman"] == pytest.approx(0.8) and m["vs_human"]["n"] == 5
    two = [
        line("x", "a", 1, "1", "1", "1"),
        line("x", "b", 2, "1", "1", "1"),
        line("y", "a", 1, "1", "1", "1"),
        line("y", "b", 2, "2", "2", "2"),
    ]
    ens = compute(two, ["x", "y"])["ensemble"]
    # verdicts x: 1 1, y: 1 2 -> po 1/2, pe = (2/2)(1/2) = 1/2 -> kappa 0
    assert ens["kappa"]["x vs y"] == pytest.approx(0.0)
    assert ens["majority_vote"]["accuracy"] == 0.5  # a: 1 (right); b: split -> tie (wrong)
