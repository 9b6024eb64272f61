"""A run's ``heldout.jsonl``, the held-out check's readings (``grm.orchestrator.heldout``): one line
per reading and verifier with the step, the prompts' ids, every prompt's reward and answer and the
reading's seconds; the console line of a reading and report.md's section. Reading it needs no judge
and no model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grm.base import GrmError
from grm.jsonl import read_jsonl
from grm.run_format import read_row
from grm.stats import mean_ci, paired_difference

FILE = "heldout.jsonl"


def _row_ok(row: dict[str, Any]) -> None:
    read_row("heldout", row)
    if not isinstance(row.get("step"), int) or not isinstance(row.get("judge"), str):
        raise ValueError("a held-out reading needs an integer 'step' and a 'judge' name")
    rewards, ids = row.get("rewards"), row.get("ids")
    if not isinstance(rewards, list) or not all(r is None or isinstance(r, (int, float)) for r in rewards):
        raise ValueError("'rewards' must be a list of numbers or nulls (masked)")
    if not isinstance(ids, list) or len(ids) != len(rewards):
        raise ValueError("'ids' must be a list of the prompts' ids, one per reward")


def read_readings(run_dir: Path) -> list[dict[str, Any]]:
    """The readings in ``RUN/heldout.jsonl`` ([] when the run has none); a damaged line is a
    ``GrmError`` naming the file and line (a torn last line is left out, as a reader does)."""
    return read_jsonl(run_dir / FILE, repair=False, check=_row_ok, own=True)


def reading_line(row: dict[str, Any], source: str) -> str:
    m = mean_ci(row["rewards"])
    lo, hi = m["ci95"]
    when = "before training" if row["step"] == 0 else f"after step {row['step']}"
    masked = f", {m['masked']} masked" if m["masked"] else ""
    return (
        f"held-out check {when}: {row['judge']} {m['mean']:.3f} [{lo:.3f}, {hi:.3f}] on {m['n']} prompts "
        f"of {source}{masked} ({row['seconds']:.0f} s)"
    )


def changes(rows: list[dict[str, Any]]) -> list[str]:
    """Per verifier, its last reading against its first, paired over the prompts both read (none
    when the two readings are of other prompts)."""
    lines = []
    for name in dict.fromkeys(r["judge"] for r in rows):
        mine = [r for r in rows if r["judge"] == name]
        first, last = mine[0], mine[-1]
        if last is first or first["ids"] != last["ids"]:
            continue
        d = paired_difference(last["rewards"], first["rewards"])
        before, after = mean_ci(first["rewards"])["mean"], mean_ci(last["rewards"])["mean"]
        lines.append(
            f"held-out {name}: {before:.3f} at step {first['step']} -> {after:.3f} at step {last['step']}, "
            f"paired change {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] over {d['n']} prompts"
        )
    return lines


def report_lines(run_dir: Path) -> list[str]:
    """report.md's held-out section (none when the run has no check): every reading, then per
    verifier the last against the first."""
    try:
        rows = read_readings(run_dir)
    except GrmError as e:
        return [f"(held-out check not shown: {e})", ""]
    if not rows:
        return []
    lines = ["## Held-out check (greedy answers, rule-scored)", ""]
    lines += ["| step | verifier | mean | 95% CI | prompts | masked |", "|---|---|---|---|---|---|"]
    for r in rows:
        m = mean_ci(r["rewards"])
        lo, hi = m["ci95"]
        lines.append(f"| {r['step']} | {r['judge']} | {m['mean']:.3f} | {lo:.3f}-{hi:.3f} | {m['n']} | {m['masked']} |")
    return [*lines, "", *changes(rows), ""]
