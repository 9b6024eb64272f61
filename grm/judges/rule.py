"""Rule judges: deterministic verifiers (``grm.judges.verifiers``) behind the judge interface.

No model and no critique: one record per sample holding the verifier's explanation. A missing
reference (or, for ``constraints``, missing constraints) is a failure (masked), a wrong answer is a
score of 0.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grm.config.judge import JudgeSpec
from grm.data.constraints import METADATA_KEY
from grm.judges import base, instructions
from grm.judges.cost import JudgeCost
from grm.judges.engine_slot import EngineSlot
from grm.judges.errors import JudgeError
from grm.judges.types import JudgeResult, Sample, SampleRecord
from grm.judges.verifiers import check


class RuleJudge:
    """Scores ``Sample.response`` with ``spec.rule``."""

    def __init__(self, spec: JudgeSpec, base_dir: Path, slot: EngineSlot) -> None:
        if spec.rule is None:
            raise JudgeError(f"judge '{spec.name}': mode 'rule' needs a rule")
        self.spec = spec
        self.rule = spec.rule
        self.base_dir = base_dir
        self.spec_hash = base.hash_spec(spec)
        self.slot = slot  # judges nothing; an engine given is named in provenance as for every judge
        self.cost = JudgeCost()
        """Calls only (one per sample verified): a verifier has no tokens."""

    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        t0 = time.perf_counter()
        base.check_samples(self.spec, samples)
        self.cost.calls += len(samples)
        return base.spread_seconds([self._verify(s) for s in samples], t0)

    def _verify(self, s: Sample) -> JudgeResult:
        details = None
        if self.rule.type == "constraints":
            where = f"item {s.id}" if s.id is not None else "sample"
            score, why, details = instructions.verify(s.metadata.get(METADATA_KEY), s.response or "", where)
        elif self.rule.type == "signal":
            score, why = _signal(s, str(self.rule.signal))
        else:
            score, why = check(self.rule, s.response or "", s.reference, regex_timeout_s=self.spec.limits.regex_timeout_s)
        return JudgeResult(
            judge=self.spec.name,
            score=score,
            reward=score,
            details=details,
            samples=[
                SampleRecord(
                    view=0,
                    order=[0],
                    index=0,
                    attempt=0,
                    text=why,
                    parsed=score,
                    error=None if score is not None else why,
                    tokens=0,
                )
            ],
            parse_failures=int(score is None),
            provenance=self.provenance(),
            error=None if score is not None else why,
        )

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        plan = base.alone(groups)
        return plan.regroup(self.score_batch(plan.items) if plan.items else [])

    def provenance(self) -> dict[str, Any]:
        return base.provenance(self.spec, self.spec_hash, engine=self.slot.loaded)


def _signal(s: Sample, name: str) -> tuple[float | None, str]:
    """An episode's environment signal ``name``: (its value, what it is), or (None, why not)."""
    if s.trajectory is None:
        return None, f"not an episode: signal '{name}' is read from an env: run's trajectories"
    value = s.trajectory.signals.get(name)
    if value is None:
        return None, f"the episode reported no signal '{name}' (it ended {s.trajectory.end_reason or 'unfinished'})"
    return float(value), f"environment signal {name} = {value:g}"
