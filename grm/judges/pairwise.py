"""Pairwise judges: response 1 against response 2, optionally in both presentation orders.

Every critique reads as a margin for the response shown first (a verdict: +1, -1 or 0; the logprob
parser: the log-odds of A over B); margins of the swapped order are mapped back to response 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from grm.judges.aggregate import combine_swap, final_attempts, verdict_of, vote
from grm.judges.base import Judge
from grm.judges.errors import JudgeError
from grm.judges.parsers import ParsedScore, fail
from grm.judges.sampler import CritiqueSampler, View
from grm.judges.types import JudgeResult, Sample

MARGINS = {"A": 1.0, "B": -1.0, "tie": 0.0}
"""A verdict names a position; its margin is the preference for the response shown first."""

SCORES = {"1": 1.0, "2": 0.0, "tie": 0.5}
"""A pairwise result's ``score`` (and reward) for each verdict."""


class PairwiseMode:
    """Judges ``Sample.responses == [r1, r2]``; ``verdict`` '1', '2' or 'tie', ``margin`` for r1."""

    def __init__(self, sampler: CritiqueSampler) -> None:
        self.spec = sampler.spec
        self.sampler = sampler

    def orders(self, sample: Sample, key: str) -> list[tuple[list[int], int]]:
        n = self.spec.sampling.n
        return [([0, 1], n), ([1, 0], n)] if self.spec.position.swap else [([0, 1], n)]

    def parse(self, order: list[int], text: str) -> ParsedScore:
        """A verdict becomes the margin of the response shown first; a number already is one."""
        parsed = self.sampler.parser()(text)
        v = parsed.value
        if isinstance(v, str):
            margin = MARGINS.get(v)
            return ParsedScore(margin, None if margin is not None else f"unknown verdict {v!r}")
        if isinstance(v, list):  # only a target parser can return a list
            return fail(f"expected a verdict or a margin, found {v}")
        return parsed

    def from_logprobs(self, logprobs: list[float], values: list[float]) -> float:
        return logprobs[0] - logprobs[1]  # log-odds of A over B

    def combine(self, views: list[View], n_responses: int) -> JudgeResult:
        res = JudgeResult(judge=self.spec.name)
        margins: list[float | None] = []
        for v in views:
            m = vote(self.spec.aggregate, final_attempts(v.records))
            margins.append(None if m is None else (m if v.order == [0, 1] else -m))
        res.view_margins = margins
        if len(margins) == 2:
            verdict, margin, agree = combine_swap(
                margins[0], margins[1], combine=self.spec.position.combine, on_inconsistent=self.spec.position.on_inconsistent
            )
            res.positional_agreement = agree
        else:
            margin = margins[0]
            verdict = verdict_of(margin)
        res.verdict, res.margin = verdict, margin
        res.score = None if verdict is None else SCORES[verdict]
        res.reward = res.score
        return res

    def score_groups(self, judge: Judge, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        raise JudgeError("pairwise judges score pairs; inside a pipeline use a pointwise, listwise or rule judge")
