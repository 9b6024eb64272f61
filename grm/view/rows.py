"""The shapes the page relies on in a row of samples.jsonl or results.jsonl, checked row by row.

The files are written by the recorder and ``grm eval``, but the viewer opens whatever directory it
is given: a row whose ``response`` is a number or whose ``judges`` is a list would break sorting,
diffs or the page's script for its whole step. Each row is checked here; one that does not fit
becomes a bad row naming its file, line and field, shown as such, and the rest of the page stands.
Keys the viewer does not know pass through (``extra="allow"``): the recorder may add fields. A row
of a format newer than this grm reads is a bad row saying so; an older one is read as migrated
(``grm.run_format``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grm.run_format import read_row
from grm.view.index import bad_row

_Id = str | int


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow")
    file_kind: ClassVar[str | None] = None
    """The ``grm.run_format`` kind of the file whose lines this model reads (None: a part of a line)."""


class JudgeView(_Row):
    """One judge's result for a sample (``samples.jsonl``: ``judges.NAME``)."""

    score: float | None = None
    reward: float | None = None
    masked: bool = False
    critiques: list[str | None] = Field(default_factory=list)
    parsed: list[Any] = Field(default_factory=list)


class SampleRow(_Row):
    """A line of a run's samples.jsonl as the sample browser reads it."""

    file_kind: ClassVar[str | None] = "samples"
    step: int
    id: _Id | None = None
    group: _Id | None = None
    prompt_id: _Id | None = None
    prompt: str | None = None
    response: str | None = None
    finish_reason: str | None = None
    reward: float | None = None
    advantage: float | None = None
    judges: dict[str, JudgeView | None] = Field(default_factory=dict)
    trajectory: Any = None
    """A multi-turn episode (``Trajectory.to_dict``): read by ``grm.view.episode``, which names what is wrong."""
    turn_credit: list[float | None] | None = None
    """Per-turn credit (a process judge's first faulty turn), aligned with the trajectory's turns."""


class CritiqueSample(_Row):
    view: int = 0
    order: list[int] = Field(default_factory=list)
    text: str | None = None
    parsed: Any = None
    error: str | None = None


class JudgeResultView(_Row):
    score: Any = None
    samples: list[CritiqueSample] = Field(default_factory=list)


class ResultLine(_Row):
    """A line of an eval directory's results.jsonl as the pair browser reads it."""

    file_kind: ClassVar[str | None] = "results"
    judge: str
    item_id: _Id | None = None
    kind: str | None = None
    label: int | None = None
    verdict: str | None = None
    order_verdicts: list[str | None] | None = None
    margin: float | None = None
    score: float | None = None
    scores: list[float | None] | None = None
    masked: bool | None = None
    lengths: list[int] | None = None
    parse_failures: int | None = None
    results: list[JudgeResultView] = Field(default_factory=list)


def check(model: type[_Row], row: dict[str, Any], where: str) -> dict[str, Any]:
    """``row`` as ``model`` reads it (a plain dict, unknown keys kept), or a bad row naming the field
    (or whatever else went wrong reading it: one row's problem, never its page's)."""
    try:
        return _check(model, row, where)
    except Exception as e:  # noqa: BLE001 - one row, never its page
        return bad_row(where, f"cannot be read ({type(e).__name__}: {e})")


def _check(model: type[_Row], row: dict[str, Any], where: str) -> dict[str, Any]:
    if "_error" in row:
        return row
    try:
        if model.file_kind is not None:
            read_row(model.file_kind, row)
    except ValueError as e:
        return bad_row(where, str(e))
    try:
        return model.model_validate(row).model_dump()
    except ValidationError as e:
        err = e.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(x) for x in err["loc"]) or "row"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        return bad_row(where, f"{loc}: {err['msg']}{more}")
