"""An eval directory as the page sees it: metrics.json, the confusion of each presentation order,
and a pair browser (both orders' critiques and verdicts) with filters; two eval directories of the
same data compared pair by pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grm.data.items_file import ITEMS_FILE, ItemRecord
from grm.view.folder import SMALL_FILE_LIMIT, Folder
from grm.view.index import RowLog, bad_row, parse_row, parse_yaml
from grm.view.rows import ResultLine, check

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
    def letter(k: int) -> str:
        return chr(ord("A") + k) if k < 26 else f"#{k + 1}"

    return ", ".join(f"{letter(k)} = response {i + 1}" for k, i in enumerate(order))


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


SUMMARY_KEYS = ("judge", "item_id", "kind", "label", "verdict", "order_verdicts", "lengths", "masked")
"""What stays in memory of each results line (filters, confusions, comparisons); a page reads the
whole lines it shows."""
SHOWN_BAD_ROWS = 50
NO_ITEMS = (
    f"prompts and responses are not shown: this eval directory has no {ITEMS_FILE} (grm eval records the "
    "judged items there; older versions did not). Run the same grm eval command with this --out again to "
    "record them: judgments already made are kept, not redone"
)


class EvalDir:
    """An eval directory (``grm eval --out``); results are re-read as they grow. Nothing outside the
    directory is opened: prompts and responses come from its items.jsonl, never from the data
    source its config.resolved.yaml names."""

    kind = "eval"

    def __init__(self, folder: Folder | Path) -> None:
        self.folder = folder if isinstance(folder, Folder) else Folder(folder)
        self.path = self.folder.path
        rescored = "results.rescored.jsonl"
        self.results_file = rescored if self.folder.lstat(rescored) is not None else "results.jsonl"
        self.log = RowLog(self.folder, self.results_file, keep=self._summary_of)
        self.items = RowLog(self.folder, ITEMS_FILE, keep=_item_id)
        self._problems: dict[str, str] = {}

    def _summary_of(self, row: dict[str, Any], n: int) -> dict[str, Any]:
        row = check(ResultLine, row, f"{self.results_file} line {n + 1}")
        if "_error" in row:
            return {"_error": row["_error"], "_line": n}
        return {**{k: row.get(k) for k in SUMMARY_KEYS}, "_line": n}

    def _read_small(self, name: str) -> bytes | None:
        self._problems.pop(name, None)
        try:
            return self.folder.read(name, SMALL_FILE_LIMIT)
        except FileNotFoundError:
            return None
        except OSError as e:
            self._problems[name] = str(e)
            return None

    def record(self) -> dict[str, Any]:
        """config.resolved.yaml, or {} when it is missing or unreadable (``problems`` says why). Its
        values are only ever shown as text: the data path it names is never opened."""
        raw = self._read_small("config.resolved.yaml")
        if raw is None:
            return {}
        try:
            record = parse_yaml(raw, self.folder.where("config.resolved.yaml"))
        except ValueError as e:
            self._problems["config.resolved.yaml"] = str(e)
            return {}
        return record if isinstance(record, dict) else {}

    def _results(self) -> tuple[list[dict[str, Any]], list[str]]:
        rows = self.log.refresh()
        return [r for r in rows if "_error" not in r], [r["_error"] for r in rows if "_error" in r]

    def judges(self) -> list[str]:
        judges = self.record().get("judges")
        names = [j.get("name") for j in judges if isinstance(j, dict)] if isinstance(judges, list) else []
        names = [n for n in names if isinstance(n, str)]
        for r in self._results()[0]:
            if r.get("judge") not in names:
                names.append(r["judge"])
        return [n for n in names if n]

    def problems(self) -> list[str]:
        """What the page cannot show from this directory, one line each; its results and items are
        looked at here, so the list is the same whatever the page asked for before."""
        self.log.refresh()
        self.items.refresh()
        return [p for p in (self.log.problem, self.items.problem, *self._problems.values()) if p]

    def summary(self) -> dict[str, Any]:
        rows, bad = self._results()
        metrics: dict[str, Any] | None = None
        raw = self._read_small("metrics.json")
        if raw is not None:
            parsed = parse_row(raw, "metrics.json")
            if "_error" in parsed:
                self._problems["metrics.json"] = parsed["_error"]
            else:
                metrics = parsed
        data = self.record().get("data")
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
            "results_file": self.results_file,
            "data": data[:500] if isinstance(data, str) else None,
            "metrics": metrics,
            "judges": per_judge,
            "bad_rows": bad[:SHOWN_BAD_ROWS],
            "bad_rows_total": len(bad),
            "problems": self.problems(),
        }

    def texts(self, ids: list[Any]) -> tuple[dict[str, dict[str, Any]], str]:
        """item id -> prompt, responses and reference for ``ids``, from items.jsonl; an empty map and
        the reason when the directory has none or it cannot be read."""
        rows = self.items.refresh()
        if self.items.problem and not self.items.index.capped:
            return {}, f"prompts and responses are not shown: {self.items.problem}"
        if not rows and self.folder.lstat(ITEMS_FILE) is None:
            if "policy_ref" in self.record():  # grm eval --policy: its responses.jsonl holds the texts
                return {}, "prompts and responses of a policy eval are in its responses.jsonl, not shown here"
            return {}, NO_ITEMS
        where = {r["id"]: r["_line"] for r in rows if "_error" not in r}
        wanted = {str(i): where[str(i)] for i in ids if i is not None and str(i) in where}
        out = {}
        for item_id, row in zip(wanted, self.items.index.rows(wanted.values()), strict=True):
            if "_error" not in row:
                out[item_id] = {k: row.get(k) for k in ("prompt", "responses", "reference")}
        bad = sum("_error" in r for r in rows)
        return out, f"{ITEMS_FILE}: {bad} bad lines; their items show without texts" if bad else ""

    def pair_lines(self, judge: str) -> list[dict[str, Any]]:
        return [r for r in self._results()[0] if r.get("judge") == judge]

    def view_lines(self, lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
        """The page's entries for the summaries ``lines``: their whole results lines read again,
        with the item's texts; and a note when texts are missing."""
        numbers = [r["_line"] for r in lines]
        full = [
            check(ResultLine, row, self.log.index.where(n)) for n, row in zip(numbers, self.log.index.rows(numbers), strict=True)
        ]
        texts, note = self.texts([r.get("item_id") for r in full if "_error" not in r])
        return [self._view_line(r, texts, n) for n, r in zip(numbers, full, strict=True)], note

    def _view_line(self, line: dict[str, Any], texts: dict[str, dict[str, Any]], n: int) -> dict[str, Any]:
        try:
            return self._entry(line, texts)
        except Exception as e:  # noqa: BLE001 - one pair, never its page
            line = bad_row(self.log.index.where(n), f"cannot be shown ({type(e).__name__}: {e})")
            return self._entry(line, texts)

    def _entry(self, line: dict[str, Any], texts: dict[str, dict[str, Any]]) -> dict[str, Any]:
        if "_error" in line:
            return {"item_id": None, "error": line["_error"], "presentations": []}
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
            "reference": t.get("reference"),
            "presentations": presentations(line),
        }

    def pair_page(self, judge: str, *, filt: str = "all", page: int = 0, per_page: int = 20) -> dict[str, Any]:
        kept = [r for r in self.pair_lines(judge) if keep_pair(r, filt)]
        pairs, note = self.view_lines(kept[page * per_page : (page + 1) * per_page])
        if not pairs:
            note = self.texts([])[1]
        bad = self._results()[1]
        return {
            "judge": judge,
            "filter": filt,
            "total": len(kept),
            "page": page,
            "per_page": per_page,
            "note": note,
            "pairs": pairs,
            "bad_rows": bad[:SHOWN_BAD_ROWS],
            "bad_rows_total": len(bad),
        }


def _item_id(row: dict[str, Any], n: int) -> dict[str, Any]:
    if "_error" in row:
        return {"_error": row["_error"], "_line": n}
    try:
        record = ItemRecord.model_validate(row)
    except ValidationError as e:
        return bad_row(f"{ITEMS_FILE} line {n + 1}", str(e.errors(include_url=False, include_input=False)[0]["msg"]))
    return {"id": record.id, "_line": n}


def disagreements(a: EvalDir, judge_a: str, b: EvalDir, judge_b: str, *, page: int = 0, per_page: int = 20) -> dict[str, Any]:
    """Items both directories judged where the two judges' final verdicts differ."""
    lines_b = {r.get("item_id"): r for r in b.pair_lines(judge_b) if r.get("item_id") is not None}
    common = [(r, lines_b[r.get("item_id")]) for r in a.pair_lines(judge_a) if r.get("item_id") in lines_b]
    differ = [(x, y) for x, y in common if x.get("verdict") != y.get("verdict")]
    chunk = differ[page * per_page : (page + 1) * per_page]
    shown_a, _ = a.view_lines([x for x, _ in chunk])
    shown_b, _ = b.view_lines([y for _, y in chunk])
    return {
        "common": len(common),
        "total": len(differ),
        "page": page,
        "per_page": per_page,
        "pairs": [{"a": x, "b": y} for x, y in zip(shown_a, shown_b, strict=True)],
    }
