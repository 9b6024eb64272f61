"""Pointwise judges: each response scored on its own; the n critiques of an item vote."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grm.config.judge import JudgeSpec
from grm.engines.base import GenerationEngine
from grm.judges import base
from grm.judges.aggregate import final_attempts, vote
from grm.judges.parsers import ParsedScore, expected_value, fail
from grm.judges.sampler import CritiqueSampler, View
from grm.judges.types import JudgeResult, Sample


def one_score(parsed: ParsedScore) -> ParsedScore:
    """A pointwise critique must give one number: a one-element list is that number, more is a failure."""
    v = parsed.value
    if isinstance(v, list):
        return ParsedScore(v[0]) if len(v) == 1 else fail(f"expected one score, found {v}")
    if isinstance(v, str):  # only a target parser can return a word
        return fail(f"expected a score, found {v!r}")
    return parsed


class PointwiseJudge:
    """Scores ``Sample.response``; ``score`` is the vote of the critiques, ``reward`` it normalised."""

    def __init__(self, spec: JudgeSpec, base_dir: Path | str | None = None, engine: GenerationEngine | None = None) -> None:
        self.spec = spec
        self.base_dir = Path(base_dir) if base_dir else Path.cwd()
        self.sampler = CritiqueSampler(spec, self.base_dir, engine)
        self.spec_hash = self.sampler.spec_hash

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def engine(self) -> GenerationEngine:
        return self.sampler.engine

    # ------------------------------------------------------------------ what the sampler asks of the mode
    def orders(self, sample: Sample, key: str) -> list[tuple[list[int], int]]:
        return [([0], self.spec.sampling.n)]

    def parse(self, order: list[int], text: str) -> ParsedScore:
        return one_score(self.sampler.parser()(text))

    def from_logprobs(self, logprobs: list[float], values: list[float]) -> float:
        return expected_value(logprobs, values)

    def combine(self, views: list[View], n_responses: int) -> JudgeResult:
        score = vote(self.spec.aggregate, final_attempts(views[0].records))
        return JudgeResult(judge=self.spec.name, score=score, reward=self.normalize(score))

    # ------------------------------------------------------------------ the Judge protocol
    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        return self.sampler.score_batch(samples, self)

    def score(self, sample: Sample) -> JudgeResult:
        return self.score_batch([sample])[0]

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        return base.score_alone(self, groups)

    def render(self, sample: Sample) -> list[dict[str, Any]]:
        return self.sampler.render(sample, self)

    def rescore(self, stored: dict[str, Any], n_responses: int) -> JudgeResult:
        return self.sampler.rescore(stored, n_responses, self)

    def provenance(self) -> dict[str, Any]:
        return self.sampler.provenance()

    def normalize(self, x: float | None) -> float | None:
        return base.normalize(self.spec, x)

    def score_range(self) -> tuple[float, float] | None:
        return base.score_range(self.spec)
