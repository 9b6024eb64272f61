"""A ``results.jsonl`` line of ``grm eval``: how one is made from an item's judgments
(``summarize``), the fields its readers (resume, report, rescore, view) compute with, typed and
ranged (``check_result_line``: a hand-edited line is refused by name, never a traceback or a number
computed from nonsense), and one line per (judge, item) when read back (``latest_results``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grm.data.items import EvalItem
from grm.evaluation.errors import EvalError
from grm.judges.base import Judge
from grm.judges.cost import JudgeCost
from grm.judges.labelled import outcome
from grm.run_format import read_row


def summarize(judge: Judge, item: EvalItem, results: list[Any], cost: JudgeCost | None = None) -> dict[str, Any]:
    """One results.jsonl line: the item's final verdict/score plus every raw judgment, and its share
    of its batch's cost (``grm.judges.cost.split``: counts sum exactly over the batch)."""
    mode = judge.spec.mode
    line: dict[str, Any] = {
        "judge": judge.spec.name,
        "item_id": item.id,
        "input_hash": item.input_hash,
        "kind": item.kind,
        "label": item.label,
        "human_score": item.human_score,
        "tokens": sum(r.tokens for r in results),
        "seconds": sum(r.seconds for r in results),
        "parse_failures": sum(r.parse_failures for r in results),
        "one_order_failed": sum(r.one_order_failed for r in results),
        "judge_directed": sum(r.judge_directed for r in results),
        "truncated": sum(r.truncated for r in results),
        "samples_total": sum(len(r.samples) for r in results),
        "results": [r.to_dict() for r in results],
    }
    if cost is not None:
        line["cost"] = cost.to_dict()
    if item.kind == "pair":
        line["lengths"] = [len(r) for r in item.responses]  # characters; for the length-bias metrics
    line.update(outcome(mode, item.kind, results))
    return line


Count = Annotated[int, Field(ge=0)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Verdict = Literal["1", "2", "tie"]


class _Lenient(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")  # later fields are optional; what is there is checked


class StoredCost(_Lenient):
    """A line's share of its batch's cost (``grm.judges.cost.JudgeCost.to_dict``)."""

    calls: Count = 0
    retries: Count = 0
    prompt_tokens: Count = 0
    cached_tokens: Count = 0
    generated_tokens: Count = 0
    votes_skipped: Count = 0
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    usage: dict[str, Annotated[int, Field(ge=0, lt=10**15)]] = {}


class StoredResult(_Lenient):
    """One judge result of a line (``JudgeResult.to_dict``): the numbers the metrics read."""

    score: Finite | None = None
    scores: list[Finite | None] | None = None
    verdict: Verdict | None = None
    margin: Finite | None = None
    view_margins: list[Finite | None] | None = None
    samples: list[dict[str, Any]] = []


class ResultLine(_Lenient):
    """The fields of a results.jsonl line that its readers (resume, report, rescore, view) rely on,
    with the types and ranges they compute with: a hand-edited line is refused by name, never a
    traceback or a number computed from nonsense."""

    judge: str
    item_id: str
    input_hash: str | None = None
    kind: Literal["pair", "scored", "unlabelled"]
    label: Annotated[int, Field(ge=1, le=2)] | None  # strict: a bool is refused
    human_score: Finite | None
    tokens: Count
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    parse_failures: Count
    one_order_failed: Count = 0
    judge_directed: Count = 0
    truncated: Count = 0
    samples_total: Count
    results: list[StoredResult]
    verdict: Verdict | None
    order_verdicts: list[Verdict | None] | None = None
    score: Finite | None = None
    scores: list[Finite | None] | None = None
    margin: Finite | None = None
    masked: bool
    lengths: Annotated[list[Count], Field(min_length=2, max_length=2)] | None = None
    cost: StoredCost | None = None
    engine_error: str | None = None

    @model_validator(mode="after")
    def _fits_its_kind(self) -> ResultLine:
        fields = self.model_fields_set
        if self.kind == "pair":
            if "order_verdicts" not in fields:
                raise ValueError("a pair's line has no order_verdicts")
            if self.order_verdicts is not None and len(self.order_verdicts) != 2:
                raise ValueError(f"order_verdicts holds {len(self.order_verdicts)} verdicts, not one per order (2)")
        else:
            if "score" not in fields:
                raise ValueError(f"a {self.kind} item's line has no score")
            if self.label is not None:
                raise ValueError(f"a {self.kind} item's line has a label ({self.label}); only pairs have one")
        return self


def check_result_line(row: dict[str, Any]) -> None:
    """ValueError saying what is wrong when ``row`` is not a results.jsonl line of a format this grm
    reads (``read_jsonl`` adds the file and line); an older format is brought up to date in place
    (``grm.run_format``)."""
    read_row("results", row)
    try:
        ResultLine.model_validate(row)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        where = f"field '{field}': " if field else ""
        msg = err["msg"].removeprefix("Value error, ")
        raise ValueError(f"{where}{msg}; not a line grm eval writes") from None


def content(line: dict[str, Any]) -> tuple[Any, ...]:
    """What a results line judged: the item's text (hash), kind, label and human score."""
    return (line.get("input_hash"), line["kind"], line["label"], line["human_score"])


def latest_results(numbered: list[tuple[int, dict[str, Any]]], path: Path) -> list[tuple[int, dict[str, Any]]]:
    """One line per (judge, item) of a results.jsonl read with its line numbers. A later line
    replaces one that an engine error masked (the item was judged again on resume) or one that
    judged other content (a resume with ``--force`` after the data changed); any other repeat is
    not what grm eval writes, and an EvalError names both lines (counted twice, it would skew every
    metric)."""
    keep: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for n, row in numbered:
        key = (row["judge"], row["item_id"])
        if key in keep:
            m, old = keep.pop(key)
            if not old.get("engine_error") and content(old) == content(row):
                raise EvalError(
                    f"{path}:{n}: a second line for judge '{row['judge']}' and item {row['item_id']!r} (the first is "
                    f"line {m}); grm eval writes one: delete one of them"
                )
        keep[key] = (n, row)
    return list(keep.values())
