"""Pointwise judges: each response (or episode) scored on its own; the n critiques of an item vote.
A process judge of an episode also names its first faulty turn (``grm.judges.process``)."""

from __future__ import annotations

from collections.abc import Sequence

from grm.config.judge import JudgeSpec
from grm.judges import base
from grm.judges.aggregate import final_attempts, vote
from grm.judges.base import GroupPlan
from grm.judges.parsers import JudgeParsers, ParsedScore, expected_value, fail, short_repr
from grm.judges.process import read_faulty_turn, vote_faulty_turn
from grm.judges.types import JudgeResult, Sample
from grm.judges.views import View


class PointwiseMode:
    """Scores ``Sample.response``; ``score`` is the vote of the critiques, ``reward`` it normalised."""

    def __init__(self, spec: JudgeSpec, parsers: JudgeParsers) -> None:
        self.spec = spec
        self.parsers = parsers

    def orders(self, sample: Sample, key: str) -> list[tuple[list[int], int]]:
        return [([0], self.spec.sampling.n)]

    def parse(self, order: list[int], text: str) -> ParsedScore:
        """One number: a one-element list is that number, more is a failure."""
        parsed = self.parsers.get()(text)
        v = parsed.value
        if isinstance(v, list):
            return ParsedScore(v[0]) if len(v) == 1 else fail(f"expected one score, found {short_repr(v)}")
        if isinstance(v, str):  # only a target parser can return a word
            return fail(f"expected a score, found {short_repr(v)}")
        return parsed

    def from_logprobs(self, logprobs: list[float], values: list[float]) -> float:
        return expected_value(logprobs, values)

    def combine(self, views: list[View], n_responses: int) -> JudgeResult:
        final = final_attempts(views[0].records)
        score = vote(self.spec.aggregate, final)
        res = JudgeResult(judge=self.spec.name, score=score, reward=base.normalize(self.spec, score))
        if self.spec.trajectory.first_faulty_turn:
            for r in views[0].records:
                r.faulty_turn = read_faulty_turn((self.spec.prefill or "") + r.text, views[0].turns)
            res.faulty_turn = vote_faulty_turn([r.faulty_turn for r in final if r.parsed is not None])
        return res

    def group(self, groups: Sequence[Sequence[Sample]]) -> GroupPlan:
        return base.alone(groups)
