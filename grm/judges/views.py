"""What the critique sampler and the judge modes share: a ``View`` (one presentation of one item and
the records sampled for it), the ``Mode`` protocol a judge mode implements for the sampler, and the
engine sampling parameters of a judge's ``sampling`` block."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from grm.config.judge import JudgeSampling
from grm.engines.base import GenerationRequest, SamplingParams
from grm.judges.parsers import ParsedScore
from grm.judges.types import JudgeResult, Sample, SampleRecord


@dataclass
class View:
    """One presentation of one item to the judge: which responses, in which order, and the records
    of the critiques sampled for it (retries appended after the first attempts)."""

    item: int
    view: int
    order: list[int]
    n: int
    request: GenerationRequest | None = None
    """None for a view rebuilt from stored records: rescoring sends nothing."""
    records: list[SampleRecord] = field(default_factory=list)
    truncated: int = 0
    """The item's responses (and trajectories) cut to fit the judge's context (the same in every view of the item)."""
    judge_directed: int = 0
    """Spans aimed at the judge taken out of the item's responses (``guard.neutralise``)."""
    observations_cut: int = 0
    """Observations of the item's trajectories cut to their budget (``trajectory.observation_tokens``)."""
    turns: int | None = None
    """(judging one trajectory) How many turns it has: a faulty turn the judge names must be one of them."""


class Mode(Protocol):
    """What a judge mode decides for the sampler."""

    def orders(self, sample: Sample, key: str) -> list[tuple[list[int], int]]:
        """(order, n) per view of ``sample``: the responses shown, in that order, sampled n times.
        ``key`` names the item (its id, else a hash of its content) for per-item randomness."""
        ...

    def parse(self, order: list[int], text: str) -> ParsedScore:
        """What one critique (prefill included) of a view shown in ``order`` says."""
        ...

    def from_logprobs(self, logprobs: list[float], values: list[float]) -> float:
        """The value the logprob parser reads off the candidates' log-probabilities."""
        ...

    def combine(self, views: list[View], n_responses: int) -> JudgeResult:
        """An item's result from its views: the score fields only; the sampler fills in the rest."""
        ...


def sampling_params(s: JudgeSampling, n: int | None = None) -> SamplingParams:
    return SamplingParams(
        n=n or s.n,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        max_new_tokens=s.max_new_tokens,
        stop=tuple(s.stop),
        seed=s.seed,
    )
