"""metrics.json, report.md with PNG plots, and the summary table on stdout."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from grm.base import atomic_write_text, json_safe
from grm.evaluation import metrics as M
from grm.evaluation.length_control import LengthControl, controlled_margins, pair_margin
from grm.evaluation.table import print_table
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
    out["truncated"] = sum(r.get("truncated", 0) for r in lines)  # responses cut to fit the judge (absent before)
    out["one_order_failed"] = sum(r.get("one_order_failed", 0) for r in lines)  # swapped pairs masked (absent before)
    out["judge_directed"] = sum(r.get("judge_directed", 0) for r in lines)  # text aimed at the judge, removed
    out["masked_rate"] = M.rate(lines, lambda r: r["masked"])
    out["tokens"] = sum(r["tokens"] for r in lines)
    secs = sum(r["seconds"] for r in lines)
    out["judge_seconds"] = secs
    out["judgments_per_s"] = len(lines) / secs if secs > 0 else float("nan")
    scores = raw_scores(lines)
    out["score_mean"], out["score_std"] = M.mean_std(scores)
    costed = [JudgeCost.from_dict(r["cost"]) for r in lines if r.get("cost")]
    if costed:  # lines written before cost accounting carry none
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


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.3f}"
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(v, float) for v in x):
        if all(math.isnan(v) for v in x):
            return "[-]"  # no interval: fewer than 2 scored items
        return f"[{_fmt(x[0])}, {_fmt(x[1])}]"
    return str(x)


def summary_rows(m: dict[str, Any], *, ci: bool = True) -> list[dict[str, str]]:
    """One row per judge (and the majority-vote ensemble). Columns empty for every row are dropped."""
    rows = []
    for name, jm in m["judges"].items():
        p = jm.get("pairs", {})
        h = jm.get("vs_human", {})
        ln = p.get("length", {})
        avg = _fmt(p.get("accuracy_average", "")) + (f" {_fmt(p['accuracy_average_ci95'])}" if ci and p else "")
        rows.append(
            {
                "judge": name,
                "n": str(jm["items"]),
                "acc1": _fmt(p.get("accuracy_order1", "")),
                "acc2": _fmt(p.get("accuracy_order2", "")),
                "avg" + (" [95% CI]" if ci else ""): avg,
                "swap": _fmt(p.get("accuracy_swap_combined", "")),
                "agree": _fmt(p.get("positional_agreement", "")),
                "picks longer": _fmt(ln.get("judge_longer_preferred", "")),
                "acc|shorter": _fmt(ln.get("accuracy_shorter_preferred", "")),
                "spearman": _fmt(h.get("spearman", "")),
                "fail": _fmt(jm["parse_failure_rate"]),
                "masked": _fmt(jm["masked_rate"]),
                "cut": str(jm["truncated"]) if jm.get("truncated") else "",
                "j/s": _fmt(jm["judgments_per_s"]),
            }
        )
        lc = p.get("length_controlled")
        if lc:  # the same judgments, length controlled: only the swap-combined columns apply
            lcl = lc["length"]
            rows.append(
                {
                    "judge": f"{name} [{lc['method']}]",
                    "n": str(lc["n"]),
                    "swap": _fmt(lc["accuracy_swap_combined"]),
                    "picks longer": _fmt(lcl.get("judge_longer_preferred", "")),
                    "acc|shorter": _fmt(lcl.get("accuracy_shorter_preferred", "")),
                }
            )
    if "ensemble" in m and "majority_vote" in m["ensemble"]:
        mv = m["ensemble"]["majority_vote"]
        rows.append({"judge": "majority vote", "n": str(mv["n"]), "swap": _fmt(mv["accuracy"])})
    cols = [c for c in (rows[0] if rows else {}) if any(r.get(c, "") for r in rows)]
    return [{c: r.get(c, "") for c in cols} for r in rows]


COST_NOTE = (
    "calls: model calls (one per sampled critique, parse retry, principles or checklist writing, and per "
    "log-prob reading; a rule verifier: one per sample); retries: of those, re-samples of unparseable outputs; "
    "prompt/gen tok: tokens the engine reports; seconds: the judge's batches; server: what an OpenAI-compatible "
    "server reported (requests incl. HTTP retries, prompt and completion tokens). Counted by this and earlier "
    "runs into the same directory; results written before cost accounting count nothing."
)


def cost_rows(m: dict[str, Any]) -> list[dict[str, str]]:
    """One row per judge with what its calls cost (``judge_metrics``' ``cost``); empty if none has any."""
    rows = []
    for name, jm in m["judges"].items():
        c = jm.get("cost")
        if not c:
            continue
        u = c.get("usage") or {}
        row = {
            "judge": name,
            "calls": str(c["calls"]),
            "retries": str(c["retries"]),
            "prompt tok": str(c["prompt_tokens"]),
            "gen tok": str(c["generated_tokens"]),
            "seconds": f"{c['seconds']:.2f}",
        }
        if u:
            row["server req"] = str(u.get("requests", 0))
            row["server prompt tok"] = str(u.get("prompt_tokens", 0))
            row["server compl tok"] = str(u.get("completion_tokens", 0))
        rows.append(row)
    cols = list(dict.fromkeys(c for r in rows for c in r))
    return [{c: r.get(c, "") for c in cols} for r in rows]


def _save(fig: Any, out: Path, filename: str, caption: str) -> tuple[str, str]:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out / filename, dpi=100)
    plt.close(fig)
    return caption, filename


def _plots(out: Path, results: list[dict[str, Any]], names: Sequence[str]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for name in names:
        lines = [r for r in results if r["judge"] == name]
        scores = raw_scores(lines)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
        if scores:
            fig, ax = plt.subplots(figsize=(5, 3))
            ax.hist(scores, bins=20)
            ax.set_title(f"{name}: score histogram")
            ax.set_xlabel("score")
            ax.set_ylabel("count")
            made.append(_save(fig, out, f"hist-{safe}.png", f"{name}: score histogram"))
        pairs = [r for r in lines if r["kind"] == "pair" and r["label"] is not None]
        if pairs:
            cols = ["1", "2", "tie", "masked"]
            mat = [
                [sum(1 for r in pairs if r["label"] == lab and (r["verdict"] or "masked") == c) for c in cols] for lab in (1, 2)
            ]
            fig, ax = plt.subplots(figsize=(4.5, 2.8))
            ax.imshow(mat, cmap="Blues")
            ax.set_xticks(range(4), [f"judge: {c}" for c in cols])
            ax.set_yticks(range(2), ["human: 1", "human: 2"])
            for i in range(2):
                for j in range(4):
                    ax.text(j, i, str(mat[i][j]), ha="center", va="center")
            ax.set_title(f"{name}: confusion (swap-combined)")
            made.append(_save(fig, out, f"confusion-{safe}.png", f"{name}: confusion matrix"))
        scored = [r for r in lines if r["kind"] == "scored" and r["score"] is not None]
        if scored:
            fig, ax = plt.subplots(figsize=(4, 4))
            ax.scatter([r["human_score"] for r in scored], [r["score"] for r in scored], s=10, alpha=0.6)
            ax.set_xlabel("human score")
            ax.set_ylabel("judge score")
            ax.set_title(f"{name}: judge vs human")
            made.append(_save(fig, out, f"scatter-{safe}.png", f"{name}: judge vs human"))
    return made


def write_outputs(
    out: Path,
    results: list[dict[str, Any]],
    names: Sequence[str],
    *,
    extra: dict[str, Any] | None = None,
    console: Any = None,
    title: str = "Evaluation report",
    length_control: LengthControl | None = None,
) -> dict[str, Any]:
    from grm.terminal import console as literal_console

    m = compute(results, names, length_control)
    m.update(extra or {})
    # NaN is not JSON: undefined metrics (e.g. mean of no scores) are written as null
    atomic_write_text(out / "metrics.json", json.dumps(json_safe(m), indent=2, default=str))
    rows = summary_rows(m)
    short = summary_rows(m, ci=False)
    plots = _plots(out, results, names)
    cols = list(rows[0]) if rows else []
    md = [f"# {title}", "", f"Output directory: `{out}`", ""]
    if rows:
        md += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        md += ["| " + " | ".join(r.get(c, "") for c in cols) + " |" for r in rows]
    md += [
        "",
        "acc1/acc2: accuracy with the pair as given / swapped; avg: their mean (LLMBar, arXiv 2310.07641); "
        "swap: the judge's own combination of both orders; agree: positional agreement (same winner in both orders). "
        "Ties and masked judgments count as wrong. fail: share of sampled outputs the parser rejected (retries "
        "included); masked: items with no usable judgment; cut: responses cut to fit the judge's context "
        "(shown when any were); j/s: judgments per second.",
        "",
    ]
    if length_control is not None:
        if length_control.method == "regress":
            how = "a slope fitted by least squares on these same pairs (in-sample; `slope_per_char` in metrics.json)"
        else:
            how = f"{length_control.coef:g}/2 (the pipeline's penalty on a group of two)"
        md += [
            f"Rows marked [{length_control}]: the same judgments with length controlled (`--length-control`, "
            "grm/evaluation/length_control.py): the swap-combined margin (pointwise: score 1 - score 2) minus "
            f"{how} times the length difference in characters; its sign is the verdict. Only the swap-combined "
            "columns apply.",
            "",
        ]
    costs = cost_rows(m)
    if costs:
        ccols = list(costs[0])
        md += ["## Judge cost", "", "| " + " | ".join(ccols) + " |", "|" + "---|" * len(ccols)]
        md += ["| " + " | ".join(r[c] for c in ccols) + " |" for r in costs]
        md += ["", COST_NOTE, ""]
    if "ensemble" in m:
        md += ["## Agreement between judges (Cohen's kappa)", ""]
        md += [f"- {k}: {_fmt(v)}" for k, v in m["ensemble"]["kappa"].items()] + [""]
    for caption, fn in plots:
        md += [f"### {caption}", "", f"![{caption}]({fn})", ""]
    (out / "report.md").write_text("\n".join(md))
    console = console or literal_console()
    print_table(console, short, f"{title} ({out})")
    print_table(console, costs, "Judge cost")
    return m
