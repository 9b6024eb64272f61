"""summary.json, report.md and the stdout tables of an episode evaluation (``grm eval --policy
--env``).

Success is the environment's rule-checked ``success`` signal, a rate with a 95% Wilson interval; an
episode without the signal (its environment failed before judging it) is counted as ``no signal``
and left out, never scored as a failure or a success. Turns, tokens and judge scores are means with
95% percentile bootstrap intervals; POLICY - OTHER differences are paired over tasks (bootstrap).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grm.base import atomic_write_text
from grm.data.trajectory import END_REASONS, Trajectory
from grm.envs.episodes import episode_counts
from grm.evaluation import metrics as M
from grm.evaluation.report import _fmt
from grm.evaluation.table import print_table
from grm.jsonl import json_safe
from grm.report_files import markdown_table

SIDE_NAMES = {"policy": "POLICY", "other": "OTHER"}
SHOWN_ERRORS = 5
"""Episodes that ended with ``env_error`` named in the summary (id and detail), per policy."""


def success_of(t: Trajectory) -> float | None:
    return t.signals.get("success")


def generated_tokens(t: Trajectory) -> int:
    return sum(len(turn.token_ids) for turn in t.turns if turn.role == "assistant")


def episode_stats(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """One policy's episodes: success rate (Wilson CI), mean turns and generated tokens (bootstrap
    CI), end reasons, tool calls, failed tool calls, malformed tool calls and cut observations."""
    counts = episode_counts(trajs)
    return {
        "episodes": len(trajs),
        "success": M.success_rate([success_of(t) for t in trajs]),
        "turns": M.mean_ci([t.metadata.get("turns") for t in trajs]),
        "generated_tokens": M.mean_ci([generated_tokens(t) for t in trajs]),
        "end_reasons": {r: counts[f"end_{r}"] for r in END_REASONS if counts.get(f"end_{r}")},
        "tool_calls": sum(len(turn.tool_calls) for t in trajs for turn in t.turns if turn.role == "assistant"),
        "tool_errors": sum(1 for t in trajs for turn in t.turns if turn.role == "tool" and not turn.ok),
        "bad_tool_calls": counts.get("bad_tool_calls", 0),
        "observations_cut": counts.get("observations_cut", 0),
        "env_errors": [{"id": t.id, "detail": t.end_detail} for t in trajs if t.end_reason == "env_error"][:SHOWN_ERRORS],
    }


def side_metrics(
    side: str, task_ids: list[str], episodes: dict[tuple[str, str], Trajectory], lines: list[dict[str, Any]]
) -> dict[str, Any]:
    out = episode_stats([episodes[(side, tid)] for tid in task_ids if (side, tid) in episodes])
    out["judges"] = {}
    for name in dict.fromkeys(x["judge"] for x in lines if x["side"] == side):
        mine = [x for x in lines if x["judge"] == name and x["side"] == side]
        jm: dict[str, Any] = M.mean_ci([x["score"] for x in mine])
        samples = sum(x["samples_total"] for x in mine)
        jm["parse_failure_rate"] = sum(x["parse_failures"] for x in mine) / samples if samples else 0.0
        out["judges"][name] = jm
    return out


def comparison_metrics(
    task_ids: list[str], episodes: dict[tuple[str, str], Trajectory], lines: list[dict[str, Any]]
) -> dict[str, Any]:
    """POLICY - OTHER over the tasks both ran: success (paired bootstrap; the tasks only one policy
    solved counted apart), turns, and each judge's score."""

    def per_task(side: str, f: Any) -> list[Any]:
        return [f(episodes[(side, tid)]) if (side, tid) in episodes else None for tid in task_ids]

    a, b = per_task("policy", success_of), per_task("other", success_of)
    success = M.paired_difference(a, b)
    success["policy_only"] = sum(x is not None and y is not None and x > y for x, y in zip(a, b, strict=True))
    success["other_only"] = sum(x is not None and y is not None and y > x for x, y in zip(a, b, strict=True))
    out: dict[str, Any] = {
        "success": success,
        "turns": M.paired_difference(*(per_task(s, lambda t: t.metadata.get("turns")) for s in ("policy", "other"))),
        "judges": {},
    }
    for name in dict.fromkeys(x["judge"] for x in lines):
        score = {(x["side"], x["task_id"]): x["score"] for x in lines if x["judge"] == name}
        out["judges"][name] = M.paired_difference(
            [score.get(("policy", tid)) for tid in task_ids], [score.get(("other", tid)) for tid in task_ids]
        )
    return out


def compute(
    task_ids: list[str], episodes: dict[tuple[str, str], Trajectory], lines: list[dict[str, Any]], sides: Sequence[str]
) -> dict[str, Any]:
    m: dict[str, Any] = {"tasks_n": len(task_ids), "sides": {s: side_metrics(s, task_ids, episodes, lines) for s in sides}}
    m["comparison"] = comparison_metrics(task_ids, episodes, lines) if "other" in sides else None
    return m


# --------------------------------------------------------------------------- tables


def _ci(d: dict[str, Any], key: str = "mean") -> str:
    return f"{_fmt(d[key])} {_fmt(tuple(d['ci95']))}"


def table_rows(m: dict[str, Any]) -> list[dict[str, str]]:
    """One row per policy: episodes, success [95% CI] (successes/decided), no signal, turns, tools."""
    rows = []
    for side, sm in m["sides"].items():
        s = sm["success"]
        rows.append(
            {
                "policy": SIDE_NAMES[side],
                "episodes": str(sm["episodes"]),
                "success [95% CI]": f"{_ci(s, 'rate')} ({s['successes']}/{s['n']})",
                "no signal": str(s["masked"]),
                "turns [95% CI]": _ci(sm["turns"]),
                "tool calls": str(sm["tool_calls"]),
                "tool errors": str(sm["tool_errors"]),
                "bad tool calls": str(sm["bad_tool_calls"]),
            }
        )
    return rows


def end_reason_rows(m: dict[str, Any]) -> list[dict[str, str]]:
    seen = [r for r in END_REASONS if any(r in sm["end_reasons"] for sm in m["sides"].values())]
    return [
        {"policy": SIDE_NAMES[side], **{r: str(sm["end_reasons"].get(r, 0)) for r in seen}} for side, sm in m["sides"].items()
    ]


def judge_rows(m: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {"judge": name, "policy": SIDE_NAMES[side], "n": str(jm["n"]), "mean [95% CI]": _ci(jm), "masked": str(jm["masked"])}
        for side, sm in m["sides"].items()
        for name, jm in sm["judges"].items()
    ]


def comparison_rows(m: dict[str, Any]) -> list[dict[str, str]]:
    c = m.get("comparison")
    if not c:
        return []
    s = c["success"]
    rows = [
        {
            "metric": "success",
            "POLICY - OTHER [95% CI]": f"{_ci(s)} (only POLICY {s['policy_only']}, only OTHER {s['other_only']})",
            "n": str(s["n"]),
        },
        {"metric": "turns", "POLICY - OTHER [95% CI]": _ci(c["turns"]), "n": str(c["turns"]["n"])},
    ]
    rows += [{"metric": f"judge {name}", "POLICY - OTHER [95% CI]": _ci(d), "n": str(d["n"])} for name, d in c["judges"].items()]
    return rows


def _md_table(rows: list[dict[str, str]]) -> list[str]:
    if not rows:
        return []
    cols = list(rows[0])
    return [*markdown_table(cols, ([r[c] for c in cols] for r in rows)), ""]


def write_episode_outputs(
    out: Path,
    task_ids: list[str],
    episodes: dict[tuple[str, str], Trajectory],
    lines: list[dict[str, Any]],
    sides: Sequence[str],
    *,
    extra: dict[str, Any] | None = None,
    console: Any = None,
) -> dict[str, Any]:
    """Write summary.json and report.md, print the tables; returns the summary."""
    from grm.terminal import console as literal_console

    m = compute(task_ids, episodes, lines, sides)
    m.update(extra or {})
    atomic_write_text(out / "summary.json", json.dumps(json_safe(m), indent=2, default=str))
    tables = [
        (f"Episode evaluation ({out})", table_rows(m)),
        ("end reasons", end_reason_rows(m)),
        ("judges", judge_rows(m)),
        ("POLICY vs OTHER", comparison_rows(m)),
    ]
    against = f" against `{m['against']['ref']}`" if m.get("against") else ""
    env = m.get("env") or {}
    md = [
        "# Episode evaluation",
        "",
        f"POLICY `{(m.get('policy') or {}).get('ref')}`{against} on environment `{env.get('ref')}` ({env.get('target')}), "
        f"split `{m.get('split')}`, {len(task_ids)} tasks; sampling {m.get('sampling')}. Output directory: `{out}`.",
        "",
    ]
    for title, (_, rows) in zip(("episodes", "end reasons", "judges", "POLICY vs OTHER"), tables, strict=True):
        md += [f"## {title}", "", *_md_table(rows)] if rows else []
    md += [
        "success: the environment's rule-checked `success` signal (no judge sees it), 95% Wilson interval; no signal: "
        "episodes that ended before the environment judged them (left out); turns: assistant turns per episode, 95% "
        "bootstrap interval; tool errors: tool results that failed (timeout, crash, bad arguments); bad tool calls: "
        "malformed calls; POLICY - OTHER: mean over the tasks both were decided on, paired bootstrap interval.",
        "",
    ]
    errors = [f"- {SIDE_NAMES[side]} `{e['id']}`: {e['detail']}" for side, sm in m["sides"].items() for e in sm["env_errors"]]
    md += ["## environment errors (the first few)", "", *errors, ""] if errors else []
    md += ["Every episode: `responses.jsonl`; every judgment: `results.jsonl`; every number: `summary.json`.", ""]
    atomic_write_text(out / "report.md", "\n".join(md))
    console = console or literal_console()
    for title, rows in tables:
        print_table(console, rows, title)  # fitted to the terminal, plain text in a pipe
    return m
