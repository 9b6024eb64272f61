"""The judge for every mode that asks a model (pointwise, pairwise, listwise).

``ModelJudge`` implements the ``Judge`` protocol once, by composition: a ``CritiqueSampler`` does
the rendering, sampling, parsing, retries, log-probs and meta-rating, and a ``JudgeMode`` (one small
class per mode in ``pointwise``, ``pairwise`` and ``listwise``) decides only what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from grm.config.judge import JudgeSpec
from grm.engines.base import GenerationEngine
from grm.judges import base
from grm.judges.base import Judge
from grm.judges.cost import JudgeCost
from grm.judges.sampler import CritiqueSampler
from grm.judges.types import JudgeResult, Sample
from grm.judges.views import Mode


class JudgeMode(Mode, Protocol):
    """A sampler ``Mode`` that also says how a pipeline's groups become the samples it judges."""

    def score_groups(self, judge: Judge, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        """``Judge.score_groups`` for this mode; ``judge`` scores whatever samples the groups become."""
        ...


ModeFactory = Callable[[CritiqueSampler], JudgeMode]
"""A mode class: built from the judge's sampler, whose spec and parsers it reads."""


class ModelJudge:
    """A model judge: ``mode`` decides what the judge is shown and how its critiques combine.

    The registry (``grm.judges.runtime.JUDGES``) binds ``mode`` per ``spec.mode``.
    """

    def __init__(
        self, spec: JudgeSpec, base_dir: Path | str | None = None, engine: GenerationEngine | None = None, *, mode: ModeFactory
    ) -> None:
        self.spec = spec
        self.base_dir = Path(base_dir) if base_dir else Path.cwd()
        self.sampler = CritiqueSampler(spec, self.base_dir, engine)
        self.spec_hash = self.sampler.spec_hash
        self.mode = mode(self.sampler)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def engine(self) -> GenerationEngine:
        return self.sampler.engine

    @property
    def cost(self) -> JudgeCost:
        return self.sampler.cost

    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        return self.sampler.score_batch(samples, self.mode)

    def score(self, sample: Sample) -> JudgeResult:
        return self.score_batch([sample])[0]

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        return self.mode.score_groups(self, groups)

    def render(self, sample: Sample) -> list[dict[str, Any]]:
        return self.sampler.render(sample, self.mode)

    def rescore(self, stored: dict[str, Any], n_responses: int) -> JudgeResult:
        res = self.sampler.rescore(stored, n_responses, self.mode)
        res.truncated = stored.get("truncated", 0)  # what the judge was shown does not change on a re-parse
        return res

    def provenance(self) -> dict[str, Any]:
        return self.sampler.provenance()

    def normalize(self, x: float | None) -> float | None:
        return base.normalize(self.spec, x)

    def score_range(self) -> tuple[float, float] | None:
        return base.score_range(self.spec)
