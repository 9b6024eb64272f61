"""metrics.json of a judge evaluation: each judge's metrics over its results lines (pairs against
human labels, scores against human scores, length bias, cost) and the agreement between judges.

Built on the statistics of ``grm.evaluation.metrics``; ``grm.evaluation.report`` prints, plots and
writes what this computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

from grm.evaluation import metrics as M
from grm.evaluation.length_control import LengthControl, controlled_margins, pair_margin
from grm.judges.aggregate import verdict_of
from grm.judges.cost import JudgeCost, total
from grm.judges.types import Verdict


def raw_scores(lines: list[dict[str, Any]]) -> list[float]:
    """Every pointwise/listwise score in the lines (pairwise verdicts have none)."""
    return [
        s
        for r in lines
        for res in r["results"]
        for s in ([res["score"]] if res.get("scores") is None else res["scores"])
        if s is not None and res.get("verdict") is None
    ]


def judge_metrics(lines: list[dict[str, Any]], length_control: LengthControl | None = None) -> dict[str, Any]:
    """Metrics of one judge over its results lines (with ``length_control``: also the pairs' swap-combined
    accuracy and length columns with length controlled, ``pairs.length_controlled``)."""
    out: dict[str, Any] = {"items": len(lines)}
    samples = sum(r["samples_total"] for r in lines)
    out["parse_failure_rate"] = sum(r["parse_failures"] for r in lines) / samples if samples else 0.0
    # a file's older lines gain these counts as 0 when read (grm.run_format.results_1_to_2); .get: lines built in memory
    out["truncated"] = sum(r.get("truncated", 0) for r in lines)  # responses cut to fit the judge
    out["one_order_failed"] = sum(r.get("one_order_failed", 0) for r in lines)  # swapped pairs masked
    out["judge_directed"] = sum(r.get("judge_directed", 0) for r in lines)  # text aimed at the judge, removed
    out["masked_rate"] = M.rate(lines, lambda r: r["masked"])
    out["engine_errors"] = sum(1 for r in lines if r.get("engine_error"))  # masked: the server refused them even alone
    out["tokens"] = sum(r["tokens"] for r in lines)
    secs = sum(r["seconds"] for r in lines)
    out["judge_seconds"] = secs
    out["judgments_per_s"] = len(lines) / secs if secs > 0 else float("nan")
    scores = raw_scores(lines)
    out["score_mean"], out["score_std"] = M.mean_std(scores)
    costed = [JudgeCost.from_dict(r["cost"]) for r in lines if r.get("cost")]
    if costed:  # cost None: a line written before cost accounting (grm.run_format.results_1_to_2)
        out["cost"] = {**total(costed).to_dict(), "items": len(costed)}

    pairs = [r for r in lines if r["kind"] == "pair" and r["label"] is not None]
    if pairs:
        labels = [r["label"] for r in pairs]
        final = [r["verdict"] for r in pairs]
        o1 = [(r["order_verdicts"] or [None, None])[0] for r in pairs]
        o2 = [(r["order_verdicts"] or [None, None])[1] for r in pairs]
        n = len(pairs)

        def acc_avg(idx: list[int]) -> float:
            return (
                M.accuracy([o1[i] for i in idx], [labels[i] for i in idx])
                + M.accuracy([o2[i] for i in idx], [labels[i] for i in idx])
            ) / 2

        def acc_final(idx: list[int]) -> float:
            return M.accuracy([final[i] for i in idx], [labels[i] for i in idx])

        out["pairs"] = {
            "n": n,
            "accuracy_order1": M.accuracy(o1, labels),
            "accuracy_order2": M.accuracy(o2, labels),
            "accuracy_average": acc_avg(list(range(n))),
            "accuracy_average_ci95": M.bootstrap_ci(acc_avg, n),
            "accuracy_swap_combined": acc_final(list(range(n))),
            "accuracy_swap_combined_ci95": M.bootstrap_ci(acc_final, n),
            "positional_agreement": M.positional_agreement(o1, o2),
            "tie_rate": M.rate(final, lambda v: v == "tie"),
            "first_position_win_rate": M.rate(o1 + [_flip(v) for v in o2], lambda v: v == "1"),
        }
        if all(r.get("lengths") for r in pairs):
            out["pairs"]["length"] = length_bias([r["lengths"] for r in pairs], labels, final)
            if length_control is not None:
                out["pairs"]["length_controlled"] = controlled_pair_metrics(pairs, length_control)
    scored = [r for r in lines if r["kind"] == "scored" and r["score"] is not None]
    if scored:
        pred = [r["score"] for r in scored]
        human = [r["human_score"] for r in scored]
        corr = M.correlations(pred, human)
        for name in ("spearman", "kendall", "pearson"):
            corr[f"{name}_ci95"] = M.bootstrap_ci(
                lambda idx, name=name: M.correlations([pred[i] for i in idx], [human[i] for i in idx])[name], len(pred), reps=300
            )
        out["vs_human"] = {"n": len(scored), **corr}
    return out


def length_bias(lengths: Sequence[Sequence[int]], labels: Sequence[int], verdicts: Sequence[Verdict | None]) -> dict[str, Any]:
    """How much a judge's verdicts, and the human labels, follow response length (in characters).

    A judge that mostly picks the longer response earns a reward that RL will game by padding;
    accuracy on the pairs where people preferred the *shorter* response shows how much signal
    is left once length is not helping. Pairs of equal length are left out.
    """
    longer = [("1" if a > b else "2") if a != b else None for a, b in lengths]
    idx = [i for i, x in enumerate(longer) if x is not None]
    short_pref = [i for i in idx if str(labels[i]) != longer[i]]
    long_pref = [i for i in idx if str(labels[i]) == longer[i]]
    decided = [i for i in idx if verdicts[i] in ("1", "2")]

    def acc(sub: list[int]) -> float:
        return M.accuracy([verdicts[i] for i in sub], [labels[i] for i in sub]) if sub else float("nan")

    return {
        "n": len(idx),
        "human_longer_preferred": len(long_pref) / len(idx) if idx else float("nan"),
        "judge_longer_preferred": sum(verdicts[i] == longer[i] for i in decided) / len(decided) if decided else float("nan"),
        "accuracy_longer_preferred": acc(long_pref),
        "n_longer_preferred": len(long_pref),
        "accuracy_shorter_preferred": acc(short_pref),
        "n_shorter_preferred": len(short_pref),
        "accuracy_shorter_preferred_ci95": M.bootstrap_ci(lambda k: acc([short_pref[j] for j in k]), len(short_pref))
        if short_pref
        else None,
    }


def controlled_pair_metrics(pairs: list[dict[str, Any]], control: LengthControl) -> dict[str, Any]:
    """Swap-combined accuracy and the length columns of labelled pair lines (each with ``lengths``)
    after ``control`` (``grm.evaluation.length_control``); the bootstrap interval refits the
    slope on every resample."""
    lengths = [r["lengths"] for r in pairs]
    labels = [r["label"] for r in pairs]
    margins = [pair_margin(r) for r in pairs]
    diffs = [a - b for a, b in lengths]

    def acc(idx: list[int]) -> float:
        ctrl, _ = controlled_margins([margins[i] for i in idx], [diffs[i] for i in idx], control)
        return M.accuracy([verdict_of(m) for m in ctrl], [labels[i] for i in idx])

    ctrl, slope = controlled_margins(margins, diffs, control)
    verdicts = [verdict_of(m) for m in ctrl]
    return {
        "method": str(control),
        "slope_per_char": slope,
        "n": len(pairs),
        "accuracy_swap_combined": M.accuracy(verdicts, labels),
        "accuracy_swap_combined_ci95": M.bootstrap_ci(acc, len(pairs)),
        "verdicts_changed": sum(v != r["verdict"] for v, r in zip(verdicts, pairs, strict=True)),
        "length": length_bias(lengths, labels, verdicts),
    }


def _flip(v: str | None) -> str | None:
    """Order-2 verdicts are stored in response terms; the response shown first in order 2 is '2'."""
    return {"1": "2", "2": "1"}.get(v, v) if v else v


def ensemble(by_judge: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    names = list(by_judge)
    common = set.intersection(*({r["item_id"] for r in v if r["kind"] == "pair"} for v in by_judge.values()))
    ids = sorted(common)
    if len(names) < 2 or not ids:
        return {}
    verdicts = {n: {r["item_id"]: r["verdict"] for r in by_judge[n]} for n in names}
    labels = {r["item_id"]: r["label"] for r in by_judge[names[0]]}
    out: dict[str, Any] = {
        "kappa": {
            f"{a} vs {b}": M.cohen_kappa([verdicts[a][i] for i in ids], [verdicts[b][i] for i in ids])
            for a, b in combinations(names, 2)
        }
    }
    vote = M.majority_vote([[verdicts[n][i] for i in ids] for n in names])
    lab = [labels[i] for i in ids]
    if all(x is not None for x in lab):
        out["majority_vote"] = {
            "n": len(ids),
            "accuracy": M.accuracy(vote, lab),
            "accuracy_ci95": M.bootstrap_ci(lambda idx: M.accuracy([vote[i] for i in idx], [lab[i] for i in idx]), len(ids)),
        }
    return out


def compute(
    results: list[dict[str, Any]], judge_names: Sequence[str], length_control: LengthControl | None = None
) -> dict[str, Any]:
    by_judge = {n: [r for r in results if r["judge"] == n] for n in judge_names}
    out: dict[str, Any] = {"judges": {n: judge_metrics(v, length_control) for n, v in by_judge.items() if v}}
    if length_control is not None:
        out["length_control"] = str(length_control)
    ens = ensemble({n: v for n, v in by_judge.items() if v})
    if ens:
        out["ensemble"] = ens
    return out
