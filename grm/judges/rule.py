"""Rule judges: deterministic verifiers (``grm.judges.verifiers``) behind the judge interface.

No model and no critique: one record per sample holding the verifier's explanation. A missing
reference (or, for ``constraints``, missing constraints) is a failure (masked), a wrong answer is a
score of 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grm.config.judge import JudgeSpec
from grm.config.judge_rule import RuleSpec
from grm.data.constraints import METADATA_KEY
from grm.data.judge_pairs import PAIR_KEY, chosen
from grm.judges import base, instructions
from grm.judges.cost import JudgeCost
from grm.judges.engine_slot import EngineSlot
from grm.judges.errors import JudgeError
from grm.judges.parsers import VerdictChoice
from grm.judges.types import JudgeResult, Sample, SampleRecord
from grm.judges.verifiers import check
from grm.terminal import one_line


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
        if self.rule.type == "verdict":
            return base.finish(self._verdicts(samples), t0)
        return base.finish([self._verify(s) for s in samples], t0)

    def _verdicts(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        """``verdict`` rule: each sample's verdict against its reference, then a right one weighed by
        how the same pair's other-order samples in this call agree (``RuleSpec.consistency``)."""
        read = [verdict_of(self.rule, s) for s in samples]
        picks: dict[tuple[str, str], list[int]] = {}
        for s, (v, _, _) in zip(samples, read, strict=True):
            where = s.metadata.get(PAIR_KEY)
            if v is not None and isinstance(where, dict) and (c := chosen(str(where.get("order")), v)) is not None:
                picks.setdefault((str(where.get("pair")), str(where.get("order"))), []).append(c)
        out = []
        for s, (v, score, why) in zip(samples, read, strict=True):
            details: dict[str, Any] | None = None
            if score is not None:
                details = {"verdict": v, "correct": score}
                where = s.metadata.get(PAIR_KEY)
                if isinstance(where, dict) and score > 0:
                    other = "ba" if where.get("order") == "ab" else "ab"
                    theirs = picks.get((str(where.get("pair")), other), [])
                    mine = chosen(str(where.get("order")), str(v))
                    agree = sum(c == mine for c in theirs) / len(theirs) if theirs else 1.0
                    c = self.rule.consistency
                    score = score * (1 - c + c * agree)
                    details |= {"agree": agree, "other_order_verdicts": len(theirs)}
                    why += f"; the other order agrees {agree:.2f} ({len(theirs)} verdicts)"
            out.append(self._result(score, why, details))
        return out

    def _verify(self, s: Sample) -> JudgeResult:
        details = None
        if self.rule.type == "constraints":
            where = f"item {one_line(s.id)}" if s.id is not None else "sample"
            score, why, details = instructions.verify(s.metadata.get(METADATA_KEY), s.response or "", where)
        elif self.rule.type == "signal":
            score, why = _signal(s, str(self.rule.signal))
        else:
            score, why = check(self.rule, s.response or "", s.reference, regex_timeout_s=self.spec.limits.regex_timeout_s)
        return self._result(score, why, details)

    def _result(self, score: float | None, why: str, details: dict[str, Any] | None) -> JudgeResult:
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


def verdict_of(rule: RuleSpec, s: Sample) -> tuple[str | None, float | None, str]:
    """(verdict read, score, what happened) for a ``verdict`` rule: 1.0 right, 0.0 wrong or a tie,
    None (masked) when the response has no verdict token or the sample no reference A/B."""
    want = (s.reference or "").strip().upper()
    if want not in ("A", "B"):
        return None, None, f"no reference verdict (A or B) to compare with, got {s.reference!r}"
    parsed = VerdictChoice(rule.verdict)(s.response or "")
    if parsed.error is not None:
        return None, None, parsed.error
    v = str(parsed.value)
    return v, float(v == want), f"verdict {v}, {'right' if v == want else 'wrong'} (reference {want})"


def _signal(s: Sample, name: str) -> tuple[float | None, str]:
    """An episode's environment signal ``name``: (its value, what it is), or (None, why not)."""
    if s.trajectory is None:
        return None, f"not an episode: signal '{name}' is read from an env: run's trajectories"
    value = s.trajectory.signals.get(name)
    if value is None:
        return None, f"the episode reported no signal '{name}' (it ended {s.trajectory.end_reason or 'unfinished'})"
    if not math.isfinite(value):  # NaN or infinite: no reward (json_safe wrote a NaN signal as null)
        return None, f"the episode's signal '{name}' is {value!r}, not a finite number"
    return float(value), f"environment signal {name} = {value:g}"
