"""A run directory as the page sees it: per-step metrics (every numeric key, grouped by prefix)
and a step's samples grouped by prompt, filtered, sorted and diffed against the group's best."""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Any

from grm.run_format import FORMAT_KEY, read_row
from grm.view.episode import with_episode
from grm.view.folder import SMALL_FILE_LIMIT, Folder
from grm.view.index import MAX_ROW_BYTES, LineIndex, RowLog, bad_row, parse_row
from grm.view.rows import SampleRow, check

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


def _group_key(row: dict[str, Any]) -> str:
    for k in ("group", "prompt_id"):
        if row.get(k) is not None:
            return str(row[k])
    return ""


def step_groups(
    rows: list[dict[str, Any]], *, sort: str = "reward", desc: bool = True, filt: str = "all"
) -> list[dict[str, Any]]:
    """A step's (checked) sample rows as groups (one per prompt): each row gains ``length``,
    ``masked_reasons`` and ``best`` (the group's highest reward); groups keep only rows that pass
    ``filt`` and are ordered by their first row under ``sort``. ``add_diffs`` then diffs the groups
    a page shows against their best response."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_group_key(r), []).append(r)
    out = []
    for key, members in groups.items():
        for r in members:
            r["length"] = len(r.get("response") or "")
            r["masked_reasons"] = masked_reasons(r)
        rewarded = [r for r in members if isinstance(r.get("reward"), (int, float))]
        best = max(rewarded, key=lambda r: r["reward"]) if rewarded else None
        for r in members:
            r["best"] = r is best
        kept = [r for r in members if _keep(r, filt)]
        if not kept:
            continue
        kept.sort(key=lambda r: _key(r, sort), reverse=desc)
        best_text = None if best is None else best.get("response") or ""
        out.append({"group": key, "prompt": members[0].get("prompt"), "size": len(members), "rows": kept, "_best": best_text})
    out.sort(key=lambda g: _key(g["rows"][0], sort), reverse=desc)
    return out


MAX_DIFF_WORDS = 2000
DIFF_BUDGET = 50_000_000
"""Word pairs (len(best) x len(response)) one page may diff. SequenceMatcher is quadratic on
repetitive text: 3000 x 3000 words of a ten-word vocabulary take 0.26 s, so a page of long crafted
responses is cut at about 1.5 s of diffing; a page of 320 real 300-word responses needs 3e7."""


def add_diffs(groups: list[dict[str, Any]]) -> None:
    """Each row's ``diff`` against its group's best response (None for the best, or when the texts
    are too long to diff within the page's budget: ``diff_skipped`` then says so)."""
    budget = DIFF_BUDGET
    for g in groups:
        best = g.pop("_best", None)
        best_words = None if best is None else len(best.split())
        for r in g["rows"]:
            r["diff"] = None
            if best is None or r["best"]:
                continue
            text = r.get("response") or ""
            words = len(text.split())
            cost = max(1, words) * max(1, best_words or 0)
            if max(words, best_words or 0) > MAX_DIFF_WORDS or cost > budget:
                r["diff_skipped"] = "too long to diff here"
                continue
            budget -= cost
            r["diff"] = word_diff(best, text)


MAX_STEP_BYTES = 256 * 2**20
"""Bytes of samples.jsonl one step's page reads at most (a step of 8192 real rows is ~15 MB)."""
SHOWN_BAD_ROWS = 50


class RunDir:
    """A run directory; every call re-reads what the run appended since the last one."""

    kind = "run"

    def __init__(self, folder: Folder | Path) -> None:
        self.folder = folder if isinstance(folder, Folder) else Folder(folder)
        self.path = self.folder.path
        self.metrics_log = RowLog(self.folder, "metrics.jsonl", keep=_metric_row)
        self.samples = LineIndex(self.folder, "samples.jsonl")
        self._gate_problem: str | None = None

    def metrics(self) -> dict[str, Any]:
        rows = self.metrics_log.refresh()
        good = [r for r in rows if "_error" not in r]
        bad = [r["_error"] for r in rows if "_error" in r]
        return {
            "rows": good,
            "groups": group_keys(good),
            "gate": self.gate(),
            "bad_rows": bad[:SHOWN_BAD_ROWS],
            "bad_rows_total": len(bad),
        }

    def gate(self) -> list[dict[str, Any]]:
        """The judge gates this run passed or failed (``gate.json``, written before the policy
        loads), one entry per judge; empty when the run has none or the file is unreadable (then
        ``problems`` says why)."""
        self._gate_problem = None
        try:
            data = parse_row(self.folder.read("gate.json", SMALL_FILE_LIMIT), "gate.json")
        except FileNotFoundError:
            return []
        except OSError as e:
            self._gate_problem = str(e)
            return []
        if "_error" in data:
            self._gate_problem = data["_error"]
            return []
        return [g for g in data.values() if isinstance(g, dict)]

    def problems(self) -> list[str]:
        """What the page cannot show from this directory, one line each."""
        self.gate()
        out = [p for p in (self.samples.problem, self.metrics_log.problem, self._gate_problem) if p]
        if self.samples.unstepped:
            out.append(
                f"samples.jsonl: {self.samples.unstepped} lines have no integer step (not JSON, or no 'step') and are not shown"
            )
        return out

    def steps(self) -> list[int]:
        self.samples.refresh()
        return sorted(self.samples.by_step)

    def sample_page(
        self, step: int, *, sort: str = "reward", desc: bool = True, filt: str = "all", page: int = 0, per_page: int = 20
    ) -> dict[str, Any]:
        self.samples.refresh()
        numbers = self.samples.by_step.get(step, [])
        starts, ends = self.samples.starts, self.samples.ends  # kept whole if another request resets the index
        taken, size = [], 0
        for n in numbers:
            row_bytes = ends[n] - starts[n]
            size += row_bytes if row_bytes <= MAX_ROW_BYTES else 0  # an over-long row is never read
            if size > MAX_STEP_BYTES:
                break
            taken.append(n)
        rows, bad = [], []
        for n, row in zip(taken, self.samples.rows(taken), strict=True):
            row = with_episode(check(SampleRow, row, self.samples.where(n)), self.samples.where(n))
            (bad if "_error" in row else rows).append(row)
        groups = step_groups(rows, sort=sort, desc=desc, filt=filt)
        shown = groups[page * per_page : (page + 1) * per_page]
        add_diffs(shown)
        note = ""
        if len(taken) < len(numbers):
            note = f"step {step} has {len(numbers)} rows; the first {len(taken)} ({MAX_STEP_BYTES // 2**20} MiB) are shown"
        return {
            "step": step,
            "rows": len(rows),
            "groups_total": len(groups),
            "page": page,
            "per_page": per_page,
            "groups": shown,
            "bad_rows": [r["_error"] for r in bad[:SHOWN_BAD_ROWS]],
            "bad_rows_total": len(bad),
            "note": note,
        }


MAX_METRIC_KEYS = 10_000


def _metric_row(row: dict[str, Any], n: int) -> dict[str, Any]:
    if "_error" in row:
        return row
    try:
        read_row("metrics", row)  # first: a newer format may lay out even its step otherwise
    except ValueError as e:
        return bad_row(f"metrics.jsonl line {n + 1}", str(e))
    step = row.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return bad_row(f"metrics.jsonl line {n + 1}", f"'step' must be an integer, not {type(step).__name__}")
    flat = flatten_numeric({k: v for k, v in row.items() if k != FORMAT_KEY})  # a version, not a curve
    if len(flat) > MAX_METRIC_KEYS:
        return bad_row(
            f"metrics.jsonl line {n + 1}", f"{len(flat)} numeric keys, more than the {MAX_METRIC_KEYS} a chart set may have"
        )
    return flat
