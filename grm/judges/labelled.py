"""Judging labelled items: the calls one item needs, the verdict its results give, and accuracy.

One home for what ``grm eval`` (evaluation), the judge gate and the training canary
(orchestrator) must agree on: those two layers may not import each other, so the shared pieces
live here, below both. Pair metrics follow the LLMBar paper (Zeng et al. 2023, arXiv 2310.07641):
a tie counts as wrong, and so does a masked judgment (None), so failures cannot inflate accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grm.config.judge import JudgeSpec
from grm.data.items import EvalItem
from grm.judges.aggregate import verdict_of
from grm.judges.errors import JudgeError
from grm.judges.types import JudgeResult, Sample, Verdict


def samples_for(spec: JudgeSpec, item: EvalItem) -> list[Sample]:
    """The judge calls one item needs: a pair is one pairwise/listwise call or two pointwise calls."""
    mode = spec.mode
    base = {"prompt": item.prompt, "reference": item.reference, "metadata": dict(item.extra), "id": item.id}
    if item.kind == "pair":
        if mode in ("pairwise", "listwise"):
            return [Sample(responses=list(item.responses), **base)]
        return [Sample(response=r, **{**base, "id": f"{item.id}/{k}"}) for k, r in enumerate(item.responses)]
    if mode in ("pairwise", "listwise"):
        raise JudgeError(f"judge '{spec.name}' is {mode} but the data has single responses; map response_a/response_b")
    return [Sample(response=item.responses[0], **base)]


def outcome(mode: str, kind: str, results: Sequence[JudgeResult]) -> dict[str, Any]:
    """Final verdict (pairs) or score (singles), per-order verdicts, and masking."""
    if kind != "pair":
        r = results[0]
        return {"score": r.score, "verdict": None, "order_verdicts": None, "masked": r.score is None}
    if mode == "pairwise":
        r = results[0]
        orders = [verdict_of(m) for m in (r.view_margins or [])]
        return {"verdict": r.verdict, "order_verdicts": orders, "margin": r.margin, "masked": r.verdict is None, "scores": None}
    s = results[0].scores if mode == "listwise" else [r.score for r in results]
    if s is None or any(x is None for x in s):
        return {"verdict": None, "order_verdicts": [None, None], "scores": s, "masked": True}
    v = "1" if s[0] > s[1] else "2" if s[1] > s[0] else "tie"
    # Scoring each response alone has no presentation order: both "orders" are the same verdict.
    return {"verdict": v, "order_verdicts": [v, v], "scores": s, "masked": False}


def accuracy(verdicts: Sequence[Verdict | None], labels: Sequence[int]) -> float:
    """Share of pairs whose verdict names the labelled response (ties and masked count as wrong)."""
    if not labels:
        return float("nan")
    return sum(v == str(lab) for v, lab in zip(verdicts, labels, strict=True)) / len(labels)


def score_values(mode: str, results: Sequence[JudgeResult]) -> list[float]:
    """The numbers a judge gave: each response's raw score (pointwise, rule, checklist, listwise),
    or the margin for response 1 (pairwise); masked results give none."""
    out: list[float] = []
    for r in results:
        if mode == "pairwise":
            vals = [r.margin]
        elif r.scores is not None:
            vals = list(r.scores)
        else:
            vals = [r.score]
        out += [v for v in vals if v is not None]
    return out
