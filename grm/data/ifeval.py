"""IFEval-style rows (``prompt``, ``instruction_id_list``, ``kwargs``) as grm constraint prompts, so a
policy is scored by grm's rule checkers (``grm.judges.instructions``) on a public instruction set.

Only instructions grm's checkers implement are mapped; a row with any other instruction is left out
and counted by instruction id, never scored on part of its instructions. The checkers are grm's own,
not IFEval's reference code: word, sentence and bullet counting follow ``grm.judges.instructions``.
IFEval's "less than N" is strict, so it maps to "at most N - 1".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from grm.data.constraint_cell import read_constraints
from grm.data.constraints import checklist_item
from grm.data.errors import DataError


def _relation(kind_less: str, kind_least: str | None, count_key: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def convert(kw: dict[str, Any]) -> dict[str, Any] | None:
        n, rel = kw.get(count_key), str(kw.get("relation") or "").strip().lower()
        if not isinstance(n, int) or isinstance(n, bool):
            return None
        if rel == "less than" and n >= 2:
            return {"type": kind_less, "n": n - 1}
        if rel == "at least" and kind_least is not None and n >= 1:
            return {"type": kind_least, "n": n}
        return None

    return convert


def _one(kind: str, key: str, arg: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def convert(kw: dict[str, Any]) -> dict[str, Any] | None:
        v = kw.get(key)
        if isinstance(v, list):
            v = v[0] if len(v) == 1 else None  # grm checks one word of a kind per prompt
        return {"type": kind, arg: v} if isinstance(v, str) and v.strip() else None

    return convert


MAPPED: dict[str, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
    "punctuation:no_comma": lambda kw: {"type": "no_commas"},
    "change_case:english_lowercase": lambda kw: {"type": "lowercase"},
    "detectable_format:title": lambda kw: {"type": "title"},
    "detectable_content:postscript": lambda kw: (
        {"type": "postscript"} if str(kw.get("postscript_marker") or "P.S.").strip() in ("P.S.", "P.S") else None
    ),
    "length_constraints:number_words": _relation("max_words", "min_words", "num_words"),
    "length_constraints:number_sentences": _relation("max_sentences", None, "num_sentences"),
    "detectable_format:number_bullet_lists": lambda kw: (
        {"type": "bullets", "n": kw["num_bullets"]}
        if isinstance(kw.get("num_bullets"), int) and not isinstance(kw.get("num_bullets"), bool) and kw["num_bullets"] >= 1
        else None
    ),
    "keywords:existence": _one("keyword", "keywords", "word"),
    "keywords:forbidden_words": _one("forbidden_word", "forbidden_words", "word"),
    "startend:end_checker": _one("end_phrase", "end_phrase", "phrase"),
}
"""IFEval instruction id -> its grm constraint from the row's kwargs (None: these kwargs are not checkable here)."""


def from_ifeval(rows: Iterable[dict[str, Any]], where: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """(prompt rows with ``id``, ``prompt``, ``constraints``, ``checklist``; what was left out, by
    instruction id). A row that is not IFEval-shaped is a ``DataError`` naming it."""
    out, skipped = [], Counter()
    for i, row in enumerate(rows):
        line = getattr(row, "line", None)  # a row of a text file knows its file line (grm.data.sources.Row)
        at = f"{where}:{line}" if line is not None else f"{where} row {i + 1}"
        prompt, ids, kwargs = row.get("prompt"), row.get("instruction_id_list"), row.get("kwargs")
        if not isinstance(prompt, str) or not prompt.strip() or not isinstance(ids, list) or not ids:
            raise DataError(f"{at}: an IFEval row needs 'prompt' (text) and 'instruction_id_list' (a non-empty list)")
        if not all(isinstance(iid, str) for iid in ids):
            raise DataError(f"{at}: 'instruction_id_list' must list instruction ids as text (e.g. \"punctuation:no_comma\")")
        if kwargs is None:
            kwargs = [{}] * len(ids)
        if not isinstance(kwargs, list) or len(kwargs) != len(ids):
            raise DataError(f"{at}: 'kwargs' must be a list with one object per instruction ({len(ids)})")
        cons, unmapped = [], []
        for iid, kw in zip(ids, kwargs, strict=True):
            kw = {k: v for k, v in (kw or {}).items() if v is not None} if isinstance(kw, dict) else {}
            c = MAPPED[iid](kw) if iid in MAPPED else None
            if c is None:
                unmapped.append(str(iid))
            else:
                cons.append(c)
        if unmapped:
            skipped.update(unmapped)
            continue
        try:
            cons = read_constraints(cons, f"{at}: constraints")
        except DataError:
            skipped["(a constraint type twice)"] += 1
            continue
        key = row.get("key", row.get("id", i))
        kept = {k: v for k, v in row.items() if k not in ("instruction_id_list", "kwargs")}  # other columns stay mappable
        checklist = [checklist_item(c) for c in cons]
        kept.update({"id": f"ifeval-{key}", "prompt": prompt, "constraints": cons, "checklist": checklist})
        out.append(type(row)(kept, line) if line is not None else kept)  # and the row its file line
    return out, skipped
