"""Which items of a call get the rest of their votes (adaptive votes, ``grm.config.judge_votes``):
the ones whose reward the extra critiques could still change, least decided first, within the
call's budget. Pure functions over the first round's results; ``grm.judges.model`` draws the votes."""

from __future__ import annotations

import math
from collections.abc import Sequence

from grm.config.judge_votes import AdaptiveVotes
from grm.judges.types import JudgeResult, SampleRecord

Priority = tuple[int, float]
"""(class, closeness): no parse (0) before a near tie or disagreement (1) before low confidence
(2); inside a class the smaller number first (a gap, or a probability)."""


def top_probability(record: SampleRecord) -> float | None:
    """The most likely candidate's probability, renormalised over a log-prob reading's candidates
    (None for a record without a reading)."""
    lps = [lp for lp in (record.candidate_logprobs or {}).values() if lp is not None]
    if not lps:
        return None
    top = max(lps)
    return 1.0 / sum(math.exp(lp - top) for lp in lps)


def _pairwise_undecided(r: JudgeResult) -> bool:
    """The orders disagree, one of them failed, or the verdict is a tie."""
    return r.positional_agreement is False or bool(r.one_order_failed) or r.verdict == "tie"


def undecided(
    votes: AdaptiveVotes,
    mode: str,
    results: Sequence[JudgeResult],
    records: Sequence[Sequence[SampleRecord]],
    members: Sequence[Sequence[int]] | None = None,
) -> list[int]:
    """The items (indices into ``results``) that get extra votes, in index order.

    ``records[i]``: item i's first-round records; ``members``: the items of each group (pointwise
    responses of one prompt; None or one-item groups: no group comparison)."""
    priority: dict[int, Priority] = {}

    def flag(i: int, p: Priority) -> None:
        priority[i] = min(priority.get(i, p), p)

    for i, r in enumerate(results):
        if r.reward is None:
            flag(i, (0, 0.0))
        elif mode == "pairwise" and _pairwise_undecided(r):
            flag(i, (1, 0.0))
    if mode == "pointwise":
        for group in members or []:
            scored = [(i, results[i].reward) for i in group if results[i].reward is not None]
            for a, (i, ri) in enumerate(scored):
                for j, rj in scored[a + 1 :]:
                    gap = abs(float(ri) - float(rj))  # type: ignore[arg-type]
                    if gap <= votes.margin:
                        flag(i, (1, gap))
                        flag(j, (1, gap))
    if votes.confidence > 0:
        for i, recs in enumerate(records):
            probs = [p for p in (top_probability(r) for r in recs) if p is not None]
            if probs and min(probs) < votes.confidence:
                flag(i, (2, min(probs)))
    cap = math.ceil(votes.budget * len(results))
    chosen = sorted(priority, key=lambda i: (priority[i], i))[:cap]
    return sorted(chosen)
