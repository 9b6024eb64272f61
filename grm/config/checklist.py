"""Checklist judges (``mode: checklist``): where each prompt's yes/no questions come from, and what
such a judge spec must hold. ``grm.judges.checklist`` runs them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from grm.config.base import Strict, check_file
from grm.config.sampling import JudgeSampling


class ChecklistSpec(Strict):
    """(mode: checklist) The questions asked about every response to a prompt. Each is one judge
    prompt (``template``, which gets the question as ``question``) read as P(yes) off the log-probs
    of the parser's two candidates; the score is the weighted mean over the questions, in [0, 1]."""

    source: Literal["data", "model"]
    """``data``: the prompt's own checklist (``data.checklist_field`` in a pipeline, ``--map
    checklist=COLUMN`` in ``grm eval``, ``metadata.checklist`` in a sample file): a list of questions
    or of ``{question, weight}``. ``model``: the judge model writes one per distinct prompt with
    ``template``, once, and keeps it for the prompt's whole group and later steps."""
    template: str | None = None
    """(source: model) Jinja2 template (path or builtin:NAME) rendering the request that writes the
    checklist; it gets prompt, messages, reference and metadata. The reply's numbered or bulleted
    lines are the questions."""
    prefill: str | None = None
    """(source: model) Text the written checklist starts with (e.g. ``"1. Does the answer"``, which
    keeps a small model to numbered questions); parsed with the rest."""
    sampling: JudgeSampling = JudgeSampling(n=1, temperature=0.0, max_new_tokens=160)
    """(source: model) How the checklist is written (one per prompt: n is 1). A reply with no
    question in it is written again (``on_failure.retries`` times, new seed, at least
    ``on_failure.retry_temperature``), then the prompt's responses are masked."""
    max_items: int = Field(6, ge=1, le=256)
    """(source: model) Questions kept from a written checklist: its first ones. (source: data) The
    most a prompt's checklist may hold: a longer one is refused, naming its row, when ``grm run``
    loads the data (or, in ``grm eval`` and ``grm judge try``, when the item is judged), never cut.
    Either source: the questions per response a derived call deadline allows for (``limits``)."""
    cache_size: int = Field(4096, ge=1, le=1 << 20)
    """(source: model) Written checklists a judge process keeps (least recently used dropped)."""

    @field_validator("template")
    @classmethod
    def _exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_file(v, info, "prompts")

    @model_validator(mode="after")
    def _source(self) -> ChecklistSpec:
        if self.source == "model" and not self.template:
            raise ValueError("source 'model' needs template: the .j2 request that writes a prompt's checklist")
        if self.source == "data" and (self.template or self.prefill):
            raise ValueError("template and prefill are for source 'model' (a data checklist is not written)")
        if self.sampling.n != 1:
            raise ValueError("sampling.n: a prompt gets one checklist (n: 1)")
        return self


def check_checklist_judge(spec: Any) -> None:
    """What a ``JudgeSpec`` needs for ``mode: checklist``, or for any other mode not to have
    (called by its validator; raises ValueError)."""
    if spec.mode != "checklist":
        if spec.checklist is not None:
            raise ValueError(f"checklist is for mode 'checklist' (mode is '{spec.mode}')")
        return
    if spec.checklist is None:
        raise ValueError("mode 'checklist' needs checklist: {source: data} or {source: model, template: ...}")
    p = spec.parser
    if p.type != "logprob":
        raise ValueError(
            f"a checklist judge reads each answer as P(yes) from log-probs, not with a '{p.type}' parser; "
            "use parser: {type: logprob, candidates: [' Yes', ' No'], critique: false}"
        )
    if p.candidates is not None and len(p.candidates) != 2:
        raise ValueError(f"parser.candidates: a checklist judge reads exactly two, [yes, no], not {p.candidates}")
    if spec.principles is not None:
        raise ValueError("principles is not for checklist judges: their checklist is the rubric")
