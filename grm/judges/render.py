"""Every prompt a judge would send for a sample, without sending any: ``grm judge render``, lint and
the benchmarks that time a judge's requests."""

from __future__ import annotations

from typing import Any

from grm.judges.base import Judge
from grm.judges.checklist import ChecklistJudge
from grm.judges.model import ModelJudge
from grm.judges.templates import shared_renders
from grm.judges.types import Sample


def render(judge: Judge, sample: Sample) -> list[dict[str, Any]]:
    """Each stage's request for ``sample``: ``{"stage", "request", ...}`` (a principles stage, a
    checklist's writing and questions, the judge's views; none for a rule verifier). Lengths are the
    judge model's tokens once its engine is loaded, else characters."""
    with shared_renders(judge.spec.limits, 1, "one sample's prompts"):
        if isinstance(judge, ChecklistJudge):
            return judge.stages(sample)
        if isinstance(judge, ModelJudge):
            return judge.prompts.stages(sample, judge.mode.orders, judge.sampler.slot.loaded)
    sample.check_for(judge.spec.mode, judge.spec.reference)
    return []
