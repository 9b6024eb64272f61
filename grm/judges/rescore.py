"""Re-reading a judge's stored results (``JudgeResult.to_dict()``) without generating: after a parser
or aggregation change, ``grm rescore`` re-parses every stored critique and re-combines the item.

Text parsers re-read every stored critique; the logprob parser recomputes from the stored candidate
log-probabilities; meta ratings are reused as stored. A rule verifier keeps no raw output to re-read.
"""

from __future__ import annotations

from typing import Any

from grm.data.checklists import read_checklist
from grm.data.errors import DataError
from grm.judges.base import Judge, mask_non_finite
from grm.judges.checklist import WRITER_VIEW, Checklist, ChecklistJudge
from grm.judges.errors import JudgeError
from grm.judges.model import ModelJudge
from grm.judges.parsers import logprob_candidates, read_candidates
from grm.judges.types import JudgeResult, SampleRecord
from grm.judges.views import View


def rescore(judge: Judge, stored: dict[str, Any], n_responses: int) -> JudgeResult:
    """``judge``'s result re-read from a stored one of the same item (``n_responses`` judged together)."""
    if isinstance(judge, ChecklistJudge):
        res = _checklist(judge, stored)
    elif isinstance(judge, ModelJudge):
        res = _reread(judge, stored, n_responses)
        res.truncated = stored.get("truncated", 0)  # what the judge was shown does not change on a re-parse
        res.observations_cut = stored.get("observations_cut", 0)
    else:
        raise JudgeError("rule verifiers keep no raw output to rescore; re-run them instead")
    mask_non_finite(res)  # as every judge's results are (``grm.judges.base.finish``)
    return res


def _record(d: dict[str, Any]) -> SampleRecord:
    return SampleRecord(**{k: d.get(k) for k in SampleRecord.__dataclass_fields__})


def _reread(judge: ModelJudge, stored: dict[str, Any], n_responses: int) -> JudgeResult:
    spec, sampler, mode = judge.spec, judge.sampler, judge.mode
    views: dict[int, View] = {}
    for d in stored.get("samples", []):
        rec = _record(d)
        v = views.setdefault(rec.view, View(item=0, view=rec.view, order=list(rec.order), n=0))
        if sampler.logprob is not None:
            if not rec.candidate_logprobs:
                raise JudgeError("stored result has no candidate log-probs; it was not produced by a logprob parser")
            _, _, values = logprob_candidates(sampler.logprob, spec.mode)
            if len(values) != len(rec.candidate_logprobs):
                raise JudgeError("the logprob parser's candidates differ from the stored ones")
            read = read_candidates(mode.from_logprobs, rec.candidate_logprobs, values)
            rec.parsed, rec.error = read.value, read.error
        else:
            parsed = sampler.parse(mode, v.order, rec.text)
            rec.parsed, rec.error = parsed.value, parsed.error
        v.records.append(rec)
    res = judge.result([views[k] for k in sorted(views)], n_responses)
    res.principles = stored.get("principles")
    res.tokens = stored.get("tokens", 0)
    res.seconds = stored.get("seconds", 0.0)
    res.provenance = {**stored.get("provenance", {}), **judge.provenance(), "rescored": True}
    return res


def _checklist(judge: ChecklistJudge, stored: dict[str, Any]) -> JudgeResult:
    """Each question re-read from its stored yes/no log-probs; the checklist is the stored one."""
    answers = stored.get("checklist")
    if answers is None:
        raise JudgeError("stored result has no checklist; it was not produced by a checklist judge")
    recs = stored.get("samples", [])
    readings = [
        _reread(judge.reader, {"samples": [{**d, "view": 0} for d in recs if d.get("view") == k]}, 1) for k in range(len(answers))
    ]
    written = [_record(d) for d in recs if d.get("view") == WRITER_VIEW]
    try:  # the stored file is data: its questions and weights are checked as a data row's are
        kept = [{k: a[k] for k in ("question", "weight", "pass_if") if k in a} for a in answers]
        items = read_checklist(kept, "stored result: checklist") if kept else []
    except (DataError, TypeError):
        raise JudgeError("stored result's checklist is not a list of {question, weight} items with weights above 0") from None
    res = judge.fold(Checklist(items or None, written, stored.get("error") if not items else None), readings)
    res.tokens, res.seconds, res.truncated = stored.get("tokens", 0), stored.get("seconds", 0.0), stored.get("truncated", 0)
    res.provenance = {**stored.get("provenance", {}), **judge.provenance(), "rescored": True}
    return res
