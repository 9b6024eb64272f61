"""An eval directory as the page sees it: metrics.json, the confusion of each presentation order,
and a pair browser (both orders' critiques and verdicts) with filters; two eval directories of the
same data compared pair by pair."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from grm.base import GrmError
from grm.view.index import RowLog

PAIR_FILTERS = ("all", "wrong", "disagree", "longer_wins", "shorter_preferred", "masked")
"""wrong: the final verdict is not the label (ties and masked count as wrong, as in the metrics);
disagree: the two presentation orders chose differently; longer_wins: the judge picked the longer
response; shorter_preferred: the label prefers the shorter one."""
VERDICT_COLUMNS = ("1", "2", "tie", "masked")


def _longer(line: dict[str, Any]) -> str | None:
    lengths = line.get("lengths") or []
    if len(lengths) != 2 or lengths[0] == lengths[1]:
        return None
    return "1" if lengths[0] > lengths[1] else "2"


def order_verdict(line: dict[str, Any], k: int) -> str | None:
    orders = line.get("order_verdicts") or []
    return orders[k] if k < len(orders) else None


def keep_pair(line: dict[str, Any], filt: str) -> bool:
    label = line.get("label")
    verdict = line.get("verdict")
    if filt == "all":
        return True
    if filt == "wrong":
        return label is not None and verdict != str(label)
    if filt == "disagree":
        return order_verdict(line, 0) != order_verdict(line, 1)
    if filt == "longer_wins":
        return verdict is not None and verdict == _longer(line)
    if filt == "shorter_preferred":
        longer = _longer(line)
        return label is not None and longer is not None and str(label) != longer
    if filt == "masked":
        return bool(line.get("masked"))
    raise ValueError(filt)


def confusion(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Label (rows 1, 2) by verdict (1, 2, tie, masked) for order 1, order 2 and the combined verdict."""

    def table(pick: Any) -> list[list[int]]:
        return [
            [sum(1 for r in lines if r.get("label") == lab and (pick(r) or "masked") == c) for c in VERDICT_COLUMNS]
            for lab in (1, 2)
        ]

    return {
        "columns": list(VERDICT_COLUMNS),
        "order1": table(lambda r: order_verdict(r, 0)),
        "order2": table(lambda r: order_verdict(r, 1)),
        "combined": table(lambda r: r.get("verdict")),
    }


def _who(order: list[int]) -> str:
    return ", ".join(f"{'ABCDEFGH'[k]} = response {i + 1}" for k, i in enumerate(order))


def presentations(line: dict[str, Any]) -> list[dict[str, Any]]:
    """What the judge saw and said: one entry per (result, view) with its critiques and the verdict
    that order gave (pairwise), or the score (a pair scored one response at a time)."""
    out = []
    results = line.get("results") or []
    for ri, res in enumerate(results):
        views: dict[int, list[dict[str, Any]]] = {}
        for s in res.get("samples") or []:
            views.setdefault(s.get("view", 0), []).append(s)
        for view, samples in sorted(views.items()):
            order = samples[0].get("order") or []
            if len(results) > 1:
                title = f"response {ri + 1} alone"
            elif view == -1:
                title = "checklist writing"
            else:
                title = f"order {view + 1}: {_who(order)}" if len(order) > 1 else "judgment"
            verdict = order_verdict(line, view) if len(results) == 1 and view >= 0 and line.get("kind") == "pair" else None
            out.append(
                {
                    "title": title,
                    "verdict": verdict,
                    "score": res.get("score") if len(results) > 1 else None,
                    "critiques": [{"text": s.get("text"), "parsed": s.get("parsed"), "error": s.get("error")} for s in samples],
                }
            )
    return out


class EvalDir:
    """An eval directory (``grm eval --out``); results are re-read as they grow."""

    kind = "eval"

    def __init__(self, path: Path) -> None:
        self.path = path
        rescored = path / "results.rescored.jsonl"
        self.results_file = rescored if rescored.exists() else path / "results.jsonl"
        self.log = RowLog(self.results_file)
        self._texts: dict[str, dict[str, Any]] | None = None
        self._texts_note = ""
        self._lock = threading.Lock()

    def record(self) -> dict[str, Any]:
        import yaml

        f = self.path / "config.resolved.yaml"
        try:
            return yaml.safe_load(f.read_text()) or {}
        except (OSError, yaml.YAMLError):
            return {}

    def judges(self) -> list[str]:
        names = [j.get("name") for j in self.record().get("judges") or [] if isinstance(j, dict)]
        for r in self.log.refresh():
            if r.get("judge") not in names:
                names.append(r.get("judge"))
        return [n for n in names if n]

    def summary(self) -> dict[str, Any]:
        rows = self.log.refresh()
        metrics: dict[str, Any] | None = None
        try:
            metrics = json.loads((self.path / "metrics.json").read_text())
        except (OSError, ValueError):
            metrics = None
        record = self.record()
        per_judge = {}
        for name in self.judges():
            lines = [r for r in rows if r.get("judge") == name]
            pairs = [r for r in lines if r.get("kind") == "pair"]
            per_judge[name] = {
                "lines": len(lines),
                "pairs": len(pairs),
                "counts": {f: sum(keep_pair(r, f) for r in lines) for f in PAIR_FILTERS},
                "confusion": confusion(pairs) if any(r.get("label") is not None for r in pairs) else None,
            }
        return {
            "results_file": self.results_file.name,
            "data": record.get("data"),
            "metrics": metrics,
            "judges": per_judge,
        }

    def texts(self) -> tuple[dict[str, dict[str, Any]], str]:
        """item id -> prompt and responses, read from the recorded data source (results.jsonl keeps
        only judgments); an empty map and the reason when the data cannot be read from here."""
        with self._lock:
            if self._texts is None:
                self._texts, self._texts_note = {}, ""
                record = self.record()
                try:
                    from grm.data.items import to_items
                    from grm.data.sources import load_rows

                    source = str(record["data"])
                    items, _ = to_items(load_rows(source), dict(record.get("map") or {}), source, skip_bad_rows=True)
                    self._texts = {it.id: {"prompt": it.prompt, "responses": it.responses} for it in items}
                except (GrmError, OSError, KeyError, TypeError, ValueError) as e:
                    self._texts_note = f"prompts and responses unavailable: {e}"
            return self._texts, self._texts_note

    def pair_lines(self, judge: str) -> list[dict[str, Any]]:
        return [r for r in self.log.refresh() if r.get("judge") == judge]

    def view_line(self, line: dict[str, Any]) -> dict[str, Any]:
        texts, _ = self.texts()
        t = texts.get(str(line.get("item_id")), {})
        return {
            "item_id": line.get("item_id"),
            "kind": line.get("kind"),
            "label": line.get("label"),
            "verdict": line.get("verdict"),
            "order_verdicts": line.get("order_verdicts"),
            "margin": line.get("margin"),
            "score": line.get("score"),
            "scores": line.get("scores"),
            "masked": line.get("masked"),
            "lengths": line.get("lengths"),
            "longer": _longer(line),
            "parse_failures": line.get("parse_failures"),
            "prompt": t.get("prompt"),
            "responses": t.get("responses"),
            "presentations": presentations(line),
        }

    def pair_page(self, judge: str, *, filt: str = "all", page: int = 0, per_page: int = 20) -> dict[str, Any]:
        kept = [r for r in self.pair_lines(judge) if keep_pair(r, filt)]
        _, note = self.texts()
        return {
            "judge": judge,
            "filter": filt,
            "total": len(kept),
            "page": page,
            "per_page": per_page,
            "note": note,
            "pairs": [self.view_line(r) for r in kept[page * per_page : (page + 1) * per_page]],
        }


def disagreements(a: EvalDir, judge_a: str, b: EvalDir, judge_b: str, *, page: int = 0, per_page: int = 20) -> dict[str, Any]:
    """Items both directories judged where the two judges' final verdicts differ."""
    lines_b = {r.get("item_id"): r for r in b.pair_lines(judge_b)}
    common = [(r, lines_b[r.get("item_id")]) for r in a.pair_lines(judge_a) if r.get("item_id") in lines_b]
    differ = [(x, y) for x, y in common if x.get("verdict") != y.get("verdict")]
    chunk = differ[page * per_page : (page + 1) * per_page]
    return {
        "common": len(common),
        "total": len(differ),
        "page": page,
        "per_page": per_page,
        "pairs": [{"a": a.view_line(x), "b": b.view_line(y)} for x, y in chunk],
    }
