"""A judge evaluation's outputs: metrics.json (computed by ``grm.evaluation.judge_metrics``),
report.md with PNG plots, and the summary table on stdout."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grm.base import atomic_write_bytes, atomic_write_text
from grm.evaluation.judge_metrics import compute, raw_scores
from grm.evaluation.length_control import LengthControl
from grm.evaluation.table import print_table
from grm.jsonl import json_safe
from grm.report_files import figure_png, markdown_table, new_figure


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
        if c.get("votes_skipped"):
            row["votes skipped"] = str(c["votes_skipped"])
        if u:
            row["server req"] = str(u.get("requests", 0))
            row["server prompt tok"] = str(u.get("prompt_tokens", 0))
            row["server compl tok"] = str(u.get("completion_tokens", 0))
        rows.append(row)
    cols = list(dict.fromkeys(c for r in rows for c in r))
    return [{c: r.get(c, "") for c in cols} for r in rows]


def _save(fig: Any, out: Path, filename: str, caption: str) -> tuple[str, str]:
    """``fig`` written as ``out/filename``; the (caption, file) report.md links it by."""
    atomic_write_bytes(out / filename, figure_png(fig))
    return caption, filename


def _plots(out: Path, results: list[dict[str, Any]], names: Sequence[str]) -> list[tuple[str, str]]:
    made = []
    for name in names:
        lines = [r for r in results if r["judge"] == name]
        scores = raw_scores(lines)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
        if scores:
            fig, ax = new_figure(figsize=(5, 3))
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
            fig, ax = new_figure(figsize=(4.5, 2.8))
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
            fig, ax = new_figure(figsize=(4, 4))
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
        md += markdown_table(cols, ([r.get(c, "") for c in cols] for r in rows))
    md += [
        "",
        "acc1/acc2: accuracy with the pair as given / swapped; avg: their mean (LLMBar, arXiv 2310.07641); "
        "swap: the judge's own combination of both orders; agree: positional agreement (same winner in both orders). "
        "Ties and masked judgments count as wrong. fail: share of sampled outputs the parser rejected (retries "
        "included); masked: items with no usable judgment (those the judge's server refused even alone are "
        "`engine_errors` in metrics.json, judged again on resume); cut: responses cut to fit the judge's context "
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
        md += ["## Judge cost", "", *markdown_table(ccols, ([r[c] for c in ccols] for r in costs))]
        md += ["", COST_NOTE, ""]
    if "ensemble" in m:
        md += ["## Agreement between judges (Cohen's kappa)", ""]
        md += [f"- {k}: {_fmt(v)}" for k, v in m["ensemble"]["kappa"].items()] + [""]
    for caption, fn in plots:
        md += [f"### {caption}", "", f"![{caption}]({fn})", ""]
    atomic_write_text(out / "report.md", "\n".join(md))
    console = console or literal_console()
    print_table(console, short, f"{title} ({out})")
    print_table(console, costs, "Judge cost")
    return m
