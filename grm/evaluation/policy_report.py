"""summary.json, report.md with PNG plots, and the stdout table of a policy evaluation.

Every interval is a 95% percentile bootstrap over prompts (``grm.evaluation.metrics``). A masked
judgment (the judge produced no usable score) is counted and left out of means, never scored as a
number; a comparison is over the prompts both policies were scored on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grm.base import atomic_write_text
from grm.data.prompts import Prompt
from grm.evaluation import metrics as M
from grm.evaluation.report import _fmt, _save
from grm.evaluation.table import print_table
from grm.jsonl import json_safe
from grm.judges.base import Judge
from grm.report_files import markdown_table, new_figure

SIDE_NAMES = {"policy": "POLICY", "other": "OTHER"}


def side_metrics(
    side: str, prompts: list[Prompt], responses: dict[tuple[str, str], dict[str, Any]], lines: list[dict[str, Any]]
) -> dict[str, Any]:
    """One policy's lengths and, per judge, mean score (with CI), masking and per-key details."""
    rs = [responses[(side, p.id)] for p in prompts]
    out: dict[str, Any] = {
        "responses": len(rs),
        "tokens": M.mean_ci([r["tokens"] for r in rs]),
        "chars": M.mean_ci([r["chars"] for r in rs]),
        "truncated_rate": M.rate(rs, lambda r: r["finish_reason"] == "length"),
        "judges": {},
    }
    for name in dict.fromkeys(x["judge"] for x in lines if x["side"] == side):
        by_prompt = {x["prompt_id"]: x for x in lines if x["judge"] == name and x["side"] == side}
        mine = [by_prompt.get(p.id) for p in prompts]
        judged = [x for x in mine if x is not None]
        jm: dict[str, Any] = M.mean_ci([x["score"] for x in judged])
        samples = sum(x["samples_total"] for x in judged)
        jm["parse_failure_rate"] = sum(x["parse_failures"] for x in judged) / samples if samples else 0.0
        keys = sorted({k for x in judged for k in (x.get("details") or {})})
        if keys:
            # a key a response's details leave out did not apply to it (e.g. a constraint its prompt lacks)
            jm["details"] = {k: M.mean_ci([d[k] for x in judged if k in (d := x.get("details") or {})]) for k in keys}
        out["judges"][name] = jm
    return out


def comparison_metrics(
    prompts: list[Prompt], responses: dict[tuple[str, str], dict[str, Any]], lines: list[dict[str, Any]]
) -> dict[str, Any]:
    """POLICY vs OTHER: a comparison judge's win rate of POLICY (ties half), and each scoring judge's
    mean difference POLICY - OTHER with a paired bootstrap interval; lengths likewise."""
    out: dict[str, Any] = {
        "tokens_difference": M.paired_difference(
            [responses[("policy", p.id)]["tokens"] for p in prompts], [responses[("other", p.id)]["tokens"] for p in prompts]
        ),
        "judges": {},
    }
    for name in dict.fromkeys(x["judge"] for x in lines):
        mine = [x for x in lines if x["judge"] == name]
        if mine[0]["side"] == "pair":
            by_prompt = {x["prompt_id"]: x for x in mine}
            rows = [by_prompt[p.id] for p in prompts if p.id in by_prompt]
            wr = M.win_rate([x["verdict"] for x in rows])
            orders = [x.get("order_verdicts") or [None, None] for x in rows]
            wr["positional_agreement"] = M.positional_agreement([o[0] for o in orders], [o[1] for o in orders])
            out["judges"][name] = {"kind": "win_rate", **wr}
        else:
            score = {(x["side"], x["prompt_id"]): x["score"] for x in mine}
            diff = M.paired_difference(
                [score.get(("policy", p.id)) for p in prompts], [score.get(("other", p.id)) for p in prompts]
            )
            out["judges"][name] = {"kind": "difference", **diff}
    return out


def compute(
    prompts: list[Prompt],
    responses: dict[tuple[str, str], dict[str, Any]],
    lines: list[dict[str, Any]],
    sides: Sequence[str],
) -> dict[str, Any]:
    m: dict[str, Any] = {"prompts_n": len(prompts), "sides": {s: side_metrics(s, prompts, responses, lines) for s in sides}}
    m["comparison"] = comparison_metrics(prompts, responses, lines) if "other" in sides else None
    return m


def _ci(d: dict[str, Any], key: str = "mean") -> str:
    return f"{_fmt(d[key])} {_fmt(tuple(d['ci95']))}"


def table_rows(m: dict[str, Any]) -> list[dict[str, str]]:
    """One row per (judge, policy): n, mean [95% CI], masked; then the lengths."""

    def row(label: str, side: str, n: Any, d: dict[str, Any], masked: str = "") -> dict[str, str]:
        return {"judge": label, "policy": SIDE_NAMES[side], "n": str(n), "mean [95% CI]": _ci(d), "masked": masked}

    rows = []
    for side, sm in m["sides"].items():
        for name, jm in sm["judges"].items():
            rows.append(row(name, side, jm["n"], jm, str(jm["masked"])))
            rows += [row(f"  {name}/{key}", side, d["n"], d) for key, d in (jm.get("details") or {}).items()]
    for side, sm in m["sides"].items():
        rows.append(row("length (tokens)", side, sm["responses"], sm["tokens"]))
        rows.append(row("length (chars)", side, sm["responses"], sm["chars"]))
    return rows


def comparison_rows(m: dict[str, Any]) -> list[dict[str, str]]:
    c = m.get("comparison")
    if not c:
        return []
    rows = []
    for name, d in c["judges"].items():
        if d["kind"] == "win_rate":
            what = f"win rate {_ci(d, 'win_rate')} (W/T/L {d['wins']}/{d['ties']}/{d['losses']})"
        else:
            what = f"difference {_ci(d)}"
        rows.append({"judge": name, "POLICY vs OTHER": what, "n": str(d["n"]), "masked": str(d["masked"])})
    d = c["tokens_difference"]
    rows.append({"judge": "length (tokens)", "POLICY vs OTHER": f"difference {_ci(d)}", "n": str(d["n"]), "masked": ""})
    return rows


def _yerr(points: list[tuple[float, tuple[float, float]] | None]) -> list[list[float]]:
    """matplotlib error bars (below, above) of (value, CI) points; 0 where a CI is undefined (NaN)."""

    def gap(x: float) -> float:
        return x if x == x and x > 0 else 0.0  # NaN != NaN

    pts = [p if p is not None else (0.0, (0.0, 0.0)) for p in points]
    return [[gap(v - lo) for v, (lo, _) in pts], [gap(hi - v) for v, (_, hi) in pts]]


def _plots(out: Path, m: dict[str, Any], responses: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str]]:
    made = []
    sides = list(m["sides"])
    fig, ax = new_figure(figsize=(5, 3))
    ax.hist(
        [[r["tokens"] for (s, _), r in responses.items() if s == side] for side in sides],
        bins=20,
        label=[SIDE_NAMES[s] for s in sides],
    )
    ax.set_xlabel("response length (tokens)")
    ax.set_ylabel("count")
    ax.legend()
    made.append(_save(fig, out, "lengths.png", "response lengths"))
    names = list(dict.fromkeys(name for sm in m["sides"].values() for name in sm["judges"]))
    if names:
        fig, ax = new_figure(figsize=(max(4, 1.6 * len(names) * len(sides)), 3))
        width = 0.8 / len(sides)
        for k, side in enumerate(sides):
            jms = [m["sides"][side]["judges"].get(n) for n in names]
            means = [jm["mean"] if jm else float("nan") for jm in jms]
            err = _yerr([(jm["mean"], jm["ci95"]) if jm else None for jm in jms])
            ax.bar([i + k * width for i in range(len(names))], means, width, yerr=err, capsize=3, label=SIDE_NAMES[side])
        ax.set_xticks([i + width * (len(sides) - 1) / 2 for i in range(len(names))], names, fontsize=8)
        ax.set_ylabel("mean score (95% CI)")
        ax.legend()
        made.append(_save(fig, out, "scores.png", "mean score per judge"))
    wins = {n: d for n, d in ((m.get("comparison") or {}).get("judges") or {}).items() if d["kind"] == "win_rate"}
    if wins:
        fig, ax = new_figure(figsize=(max(3, 1.5 * len(wins)), 3))
        rates = [d["win_rate"] for d in wins.values()]
        err = _yerr([(d["win_rate"], d["ci95"]) for d in wins.values()])
        ax.bar(list(wins), rates, yerr=err, capsize=3)
        ax.axhline(0.5, color="k", linestyle="--", linewidth=1)
        ax.set_ylim(0, 1)
        ax.set_ylabel("POLICY win rate (95% CI)")
        made.append(_save(fig, out, "win-rate.png", "POLICY's win rate against OTHER"))
    return made


def _md_table(rows: list[dict[str, str]]) -> list[str]:
    """report.md lines of ``rows`` (one dict per row, the same keys) and a blank line; none without rows."""
    if not rows:
        return []
    cols = list(rows[0])
    return [*markdown_table(cols, ([r[c] for c in cols] for r in rows)), ""]


def write_policy_outputs(
    out: Path,
    prompts: list[Prompt],
    responses: dict[tuple[str, str], dict[str, Any]],
    lines: list[dict[str, Any]],
    judges: list[Judge],
    sides: Sequence[str],
    *,
    extra: dict[str, Any] | None = None,
    console: Any = None,
) -> dict[str, Any]:
    from grm.terminal import console as literal_console

    m = compute(prompts, responses, lines, sides)
    m.update(extra or {})
    m["judges"] = {j.spec.name: {"mode": j.spec.mode, "spec_sha256": j.spec_hash} for j in judges}
    atomic_write_text(out / "summary.json", json.dumps(json_safe(m), indent=2, default=str))
    rows, crows = table_rows(m), comparison_rows(m)
    against = f" against `{m['against']['ref']}`" if m.get("against") else ""
    md = [
        "# Policy evaluation",
        "",
        f"POLICY `{m.get('policy', {}).get('ref')}`{against} on `{m.get('prompts')}` ({len(prompts)} prompts), "
        f"sampling {m.get('sampling')}. Output directory: `{out}`.",
        "",
        *_md_table(rows),
        "mean: over the prompts the judge scored; masked: prompts with no usable judgment (left out, never counted as a "
        "score); 95% CI: percentile bootstrap over prompts; rows `judge/key`: per-key means of the judge's details.",
        "",
    ]
    if crows:
        md += ["## POLICY vs OTHER", "", *_md_table(crows)]
        md += [
            "win rate: share of prompts where the comparison judge (both presentation orders) preferred POLICY's "
            "response, a tie counting half; difference: mean of POLICY - OTHER over prompts both were scored on, "
            "paired bootstrap CI.",
            "",
        ]
    for caption, fn in _plots(out, m, responses):
        md += [f"### {caption}", "", f"![{caption}]({fn})", ""]
    md += [
        "Every response: `responses.jsonl`; every judgment with its raw outputs: `results.jsonl`; every number: `summary.json`.",
        "",
    ]
    atomic_write_text(out / "report.md", "\n".join(md))
    console = console or literal_console()
    for title, rs in ((f"Policy evaluation ({out})", rows), ("POLICY vs OTHER", crows)):
        print_table(console, rs, title)  # fitted to the terminal, plain text in a pipe
    return m
