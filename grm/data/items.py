"""Labelled evaluation items (pairs, scored and unlabelled responses): map a source's columns onto
judge inputs and check every row, saying which one is wrong."""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from grm.data import constraints
from grm.data.builtin import DEFAULT_MAPS
from grm.data.checklists import METADATA_KEY, read_checklist
from grm.data.constraint_cell import read_constraints
from grm.data.errors import DataError
from grm.data.sources import load_rows, row_where

FIELDS = ("prompt", "response", "response_a", "response_b", "label", "human_score", "reference", "id", "checklist", "constraints")
LLMBAR_MAP = {"prompt": "input", "response_a": "output_1", "response_b": "output_2", "label": "label"}


@dataclass
class EvalItem:
    id: str
    kind: Literal["pair", "scored", "unlabelled"]
    prompt: str
    responses: list[str]
    """pair: [a, b]; otherwise one response."""
    label: int | None = None
    """pair: 1 or 2, the preferred response."""
    human_score: float | None = None
    reference: str | None = None
    input_hash: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    """What judges get as ``Sample.metadata``: the item's ``checklist`` and ``constraints`` when mapped."""


def parse_map(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise DataError(f"--map '{p}': expected field=column (fields: {', '.join(FIELDS)})")
        k, v = p.split("=", 1)
        if k not in FIELDS:
            raise DataError(f"--map '{p}': unknown field '{k}'; expected one of {', '.join(FIELDS)}")
        out[k] = v
    return out


def default_map(source: str, columns: set[str]) -> dict[str, str]:
    if source.startswith("builtin:"):
        return dict(DEFAULT_MAPS.get(source.removeprefix("builtin:"), {}))
    if {"input", "output_1", "output_2"} <= columns:
        # a constraints column is carried whatever the layout: the constraints verifier needs it
        return dict(LLMBAR_MAP) | ({"constraints": "constraints"} if "constraints" in columns else {})
    return {f: f for f in FIELDS if f in columns}


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _label(v: Any) -> int | None:
    s = str(v).strip().upper()
    return {"1": 1, "2": 2, "A": 1, "B": 2, "1.0": 1, "2.0": 2}.get(s)


def to_items(
    rows: list[dict[str, Any]], mapping: dict[str, str], source: str, *, skip_bad_rows: bool = False
) -> tuple[list[EvalItem], list[str]]:
    """Convert rows; returns (items, problems). Without ``skip_bad_rows`` the first problem raises."""
    items: list[EvalItem] = []
    problems: list[str] = []
    if "prompt" not in mapping:
        raise DataError(f"{source}: no column mapped to 'prompt'; use --map prompt=COLUMN")
    pair = "response_a" in mapping or "response_b" in mapping
    if pair and not {"response_a", "response_b"} <= set(mapping):
        raise DataError(f"{source}: pairs need both response_a and response_b mapped")
    if not pair and "response" not in mapping:
        raise DataError(f"{source}: map 'response' (single responses) or 'response_a' and 'response_b' (pairs)")
    seen: dict[str, str] = {}
    for i, row in enumerate(rows):
        where = row_where(source, row, i)
        try:
            item = _item(row, mapping, pair, where, i)
            if item.id in seen:
                raise DataError(f"{where}: duplicate id '{item.id}' (first at {seen[item.id]})")
            seen[item.id] = where
            items.append(item)
        except DataError as e:
            if not skip_bad_rows:
                raise DataError(f"{e} (use --skip-bad-rows to skip such rows and count them)") from None
            problems.append(str(e))
    return items, problems


def _item(row: dict[str, Any], mapping: dict[str, str], pair: bool, where: str, index: int) -> EvalItem:
    def col(name: str, required: bool = True) -> Any:
        c = mapping.get(name)
        if c is None:
            return None
        if c not in row or row[c] is None:
            if required:
                raise DataError(f"{where}: missing column '{c}' (mapped to {name})")
            return None
        return row[c]

    def text(name: str, required: bool = True) -> str | None:
        v = col(name, required)
        if v is None:
            return None
        if not isinstance(v, str):
            raise DataError(f"{where}: column '{mapping[name]}' ({name}) must be a string, found {type(v).__name__}")
        return v

    prompt = text("prompt")
    assert prompt is not None
    reference = col("reference", required=False)
    reference = None if reference is None else str(reference)
    rid = col("id", required=False)
    if pair:
        a, b = text("response_a"), text("response_b")
        responses = [a, b]  # type: ignore[list-item]
        label = None
        if "label" in mapping:
            raw = col("label")
            label = _label(raw)
            if label is None:
                raise DataError(f"{where}: label must be 1/2 or A/B, found {_short(raw)}")
        kind: Literal["pair", "scored", "unlabelled"] = "pair"
    else:
        responses = [text("response")]  # type: ignore[list-item]
        label = None
        score = col("human_score", required="human_score" in mapping)
        if score is not None:
            score = _number(score)
            if score is None or not math.isfinite(score):  # a NaN would poison every correlation
                raise DataError(f"{where}: human_score must be a finite number, found {_short(col('human_score'))}")
        kind = "scored" if score is not None else "unlabelled"
    extra = {}
    if "checklist" in mapping:
        extra[METADATA_KEY] = read_checklist(col("checklist", required=False), f"{where}: column '{mapping['checklist']}'")
    if "constraints" in mapping:
        extra[constraints.METADATA_KEY] = read_constraints(
            col("constraints", required=False), f"{where}: column '{mapping['constraints']}'"
        )
    hashed = [prompt, responses, reference] + [extra[k] for k in sorted(extra)]  # items without metadata keep their hash
    h = hashlib.sha256(json.dumps(hashed, ensure_ascii=False).encode()).hexdigest()[:16]
    return EvalItem(
        id=str(rid) if rid is not None else f"row-{index}",
        kind=kind,
        prompt=prompt,
        responses=responses,
        label=label,
        human_score=score if kind != "pair" else None,
        reference=reference,
        input_hash=h,
        extra=extra,
    )  # type: ignore[possibly-undefined]


def labelled_pairs(source: str, limit: int | None, what: str) -> list[EvalItem]:
    """The first ``limit`` labelled pairs of ``source`` (columns mapped as ``grm eval`` maps them by
    default), for a judge's gate or canary (``what`` names it in errors)."""
    rows = load_rows(source)
    items, _ = to_items(rows, default_map(source, set().union(*rows)), source)
    pairs = [it for it in items if it.kind == "pair" and it.label is not None]
    if not pairs:
        raise DataError(
            f"{what}: {source} has no labelled pairs; it needs prompt/response_a/response_b/label columns "
            "(or LLMBar's input/output_1/output_2/label), label 1 or 2 naming the preferred response"
        )
    return pairs[:limit]


_DECIMAL = re.compile(r"[ \t]*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[ \t]*", re.ASCII)


def _number(value: Any) -> float | None:
    """A score cell as a float: a JSON number, or text that is a plain decimal number (a CSV cell);
    None for anything else: a boolean (Python's True is 1), text such as ``1_000``, ``٣`` or
    ``infinity`` that ``float()`` would take."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, decimal.Decimal)):  # a parquet decimal column gives Decimal
        try:
            return float(value)
        except (OverflowError, ValueError):  # Decimal("sNaN")
            return None
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return float(value)
    return None
