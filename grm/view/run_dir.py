"""A run directory as the page sees it: per-step metrics (every numeric key, grouped by prefix)
and a step's samples grouped by prompt, filtered, sorted and diffed against the group's best."""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

from grm.view.index import LineIndex, RowLog

SAMPLE_SORTS = ("reward", "advantage", "length", "masked")
SAMPLE_FILTERS = ("all", "masked", "unmasked", "positive", "negative", "truncated")
"""positive/negative: the advantage's sign; truncated: the response hit max_new_tokens."""


def flatten_numeric(row: dict[str, Any], prefix: str = "") -> dict[str, float | None]:
    """Every number in a metrics row, nested dicts flattened with '/' (``masked_by_judge/j``).
    None stays None (NaN was written as null) so a chart shows a gap, not a zero."""
    out: dict[str, float | None] = {}
    for k, v in row.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool):
            out[key] = float(v)
        elif isinstance(v, (int, float)):
            out[key] = float(v) if math.isfinite(v) else None
        elif v is None:
            out[key] = None
        elif isinstance(v, dict):
            out.update(flatten_numeric(v, key + "/"))
    return out


def metric_group(key: str, families: frozenset[str] | set[str] = frozenset()) -> str:
    """The chart a key belongs to: its prefix before '/' (``reward/judge`` -> reward), else the part
    before its first '_' when other keys share it (``seconds_rollout`` -> seconds), else the key."""
    if "/" in key:
        return key.split("/", 1)[0]
    head = key.split("_", 1)[0]
    return head if head in families else key


def group_keys(rows: list[dict[str, float | None]]) -> dict[str, list[str]]:
    """Chart name -> keys with at least one number, in first-seen order; ``step`` is the x axis."""
    seen: dict[str, None] = {}
    for r in rows:
        for k, v in r.items():
            if v is not None and k != "step":
                seen.setdefault(k, None)
    heads: dict[str, int] = {}
    for k in seen:
        head = k.split("/", 1)[0].split("_", 1)[0] if "/" not in k else k.split("/", 1)[0]
        heads[head] = heads.get(head, 0) + 1
    families = {h for h, n in heads.items() if n > 1}
    groups: dict[str, list[str]] = {}
    for k in seen:
        groups.setdefault(metric_group(k, families), []).append(k)
    return groups


def word_diff(best: str, text: str) -> list[list[str]]:
    """``text`` against ``best`` as ``[op, words]`` runs, op in equal/insert/delete (whitespace kept)."""
    a, b = re.findall(r"\S+\s*", best), re.findall(r"\S+\s*", text)
    out: list[list[str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(["equal", "".join(b[j1:j2])])
            continue
        if i2 > i1:
            out.append(["delete", "".join(a[i1:i2])])
        if j2 > j1:
            out.append(["insert", "".join(b[j1:j2])])
    return out


def masked_reasons(row: dict[str, Any]) -> list[str]:
    """Why a sample got no usable reward, judge by judge (empty when it was scored)."""
    reasons = []
    for name, j in (row.get("judges") or {}).items():
        if j is None:
            reasons.append(f"{name}: no result (judge failed or timed out)")
        elif j.get("masked"):
            parsed = j.get("parsed") or []
            unparsed = sum(p is None for p in parsed)
            reasons.append(f"{name}: masked ({unparsed} of {len(parsed)} critiques unparsed)")
    if not reasons and row.get("reward") is None:
        reasons.append("reward is undefined")
    return reasons


def _key(row: dict[str, Any], sort: str) -> float:
    if sort == "length":
        return float(len(row.get("response") or ""))
    if sort == "masked":
        return float(bool(row["masked_reasons"]))
    v = row.get(sort)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else -math.inf


def _keep(row: dict[str, Any], filt: str) -> bool:
    adv = row.get("advantage")
    return {
        "all": True,
        "masked": bool(row["masked_reasons"]),
        "unmasked": not row["masked_reasons"],
        "positive": isinstance(adv, (int, float)) and adv > 0,
        "negative": isinstance(adv, (int, float)) and adv < 0,
        "truncated": row.get("finish_reason") == "length",
    }[filt]


def step_groups(
    rows: list[dict[str, Any]], *, sort: str = "reward", desc: bool = True, filt: str = "all"
) -> list[dict[str, Any]]:
    """A step's sample rows as groups (one per prompt): each row gains ``length``, ``masked_reasons``,
    ``best`` and ``diff`` (against the group's highest-reward response); groups keep only rows that
    pass ``filt`` and are ordered by their first row under ``sort``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r.get("group", r.get("prompt_id", ""))), []).append(r)
    out = []
    for key, members in groups.items():
        for r in members:
            r["length"] = len(r.get("response") or "")
            r["masked_reasons"] = masked_reasons(r)
        rewarded = [r for r in members if isinstance(r.get("reward"), (int, float))]
        best = max(rewarded, key=lambda r: r["reward"]) if rewarded else None
        for r in members:
            r["best"] = r is best
            r["diff"] = None if best is None or r is best else word_diff(best.get("response") or "", r.get("response") or "")
        kept = [r for r in members if _keep(r, filt)]
        if not kept:
            continue
        kept.sort(key=lambda r: _key(r, sort), reverse=desc)
        out.append({"group": key, "prompt": members[0].get("prompt"), "size": len(members), "rows": kept})
    out.sort(key=lambda g: _key(g["rows"][0], sort), reverse=desc)
    return out


class RunDir:
    """A run directory; every call re-reads what the run appended since the last one."""

    kind = "run"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.metrics_log = RowLog(path / "metrics.jsonl")
        self.samples = LineIndex(path / "samples.jsonl")

    def metrics(self) -> dict[str, Any]:
        rows = [flatten_numeric(r) for r in self.metrics_log.refresh()]
        return {"rows": rows, "groups": group_keys(rows), "gate": self.gate()}

    def gate(self) -> list[dict[str, Any]]:
        """The judge gates this run passed or failed (``gate.json``, written before the policy
        loads), one entry per judge; empty when the run has none or the file is unreadable."""
        try:
            data = json.loads((self.path / "gate.json").read_text())
        except (OSError, ValueError):
            return []
        return [g for g in data.values() if isinstance(g, dict)] if isinstance(data, dict) else []

    def steps(self) -> list[int]:
        self.samples.refresh()
        return sorted(self.samples.by_step)

    def sample_page(
        self, step: int, *, sort: str = "reward", desc: bool = True, filt: str = "all", page: int = 0, per_page: int = 20
    ) -> dict[str, Any]:
        self.samples.refresh()
        rows = self.samples.read(self.samples.by_step.get(step, []))
        groups = step_groups(rows, sort=sort, desc=desc, filt=filt)
        return {
            "step": step,
            "rows": len(rows),
            "groups_total": len(groups),
            "page": page,
            "per_page": per_page,
            "groups": groups[page * per_page : (page + 1) * per_page],
        }
