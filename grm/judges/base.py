"""The ``Judge`` protocol every judge implements, and the functions over a judge spec all modes share.

A judge is built by ``grm.judges.runtime.build_judge`` (or ``load``), which picks the class for
``spec.mode``; callers only ever see this protocol.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from grm.config.judge import GroupSpec, GuardSpec, JudgeSpec
from grm.config.judge_trajectory import TrajectoryJudgeSpec
from grm.engines.base import GenerationEngine
from grm.judges.cost import JudgeCost
from grm.judges.types import JudgeResult, Sample
from grm.terminal import one_line


class Judge(Protocol):
    """Scores samples with one judge spec (a generative reward model or a rule verifier).

    What callers use, and nothing else: rendering (``grm.judges.render``), rescoring
    (``grm.judges.rescore``), normalising (``normalize``) and provenance are functions over the spec."""

    spec: JudgeSpec
    base_dir: Path
    """Directory the spec's relative paths (templates, meta judge) resolve against."""
    spec_hash: str
    """First 16 hex digits of the spec's sha256: identifies the judge in results and resumes."""
    cost: JudgeCost
    """Running totals of its model calls, tokens and retries (``grm.judges.cost.costed`` takes one
    call's share)."""

    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        """One result per sample, in order, with as few engine calls as the mode allows."""
        ...

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        """One result per response of each group, in group order.

        A group holds the pointwise samples (``response`` set) of one prompt's responses. Pointwise
        and rule judges score each alone; a listwise judge sees each group as one list. None marks a
        response the judge returned nothing for.
        """
        ...


def score_one(judge: Judge, sample: Sample) -> JudgeResult:
    """``judge``'s result for one sample."""
    return judge.score_batch([sample])[0]


@dataclass
class GroupPlan:
    """What a judge scores for a step's groups (``items``, one batch) and how the items' results
    become one result per response of each group (``regroup``)."""

    items: list[Sample]
    regroup: Callable[[list[JudgeResult]], list[list[JudgeResult | None]]]
    members: list[list[int]] | None = None
    """The items of each group, where each item is one response of it (judges scoring responses
    alone): adaptive votes compare a group's rewards. None: items are not responses of a group."""


def alone(groups: Sequence[Sequence[Sample]]) -> GroupPlan:
    """The plan of judges that score each response on its own: every response of every group in one batch."""
    sizes = [len(g) for g in groups]

    def regroup(results: list[JudgeResult]) -> list[list[JudgeResult | None]]:
        out: list[list[JudgeResult | None]] = []
        k = 0
        for n in sizes:
            out.append(list(results[k : k + n]))
            k += n
        return out

    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    members = [list(range(start, start + n)) for start, n in zip(starts, sizes, strict=True)]
    return GroupPlan([s for g in groups for s in g], regroup, members)


LATER_FIELDS = {
    "guard": GuardSpec(),
    "groups": GroupSpec(),
    "checklist": None,
    "trajectory": TrajectoryJudgeSpec(),
    "votes": None,
}
"""Spec sections added after specs were first hashed, with their defaults: left out of the hash
while at those defaults, so a spec written before they existed keeps its hash (and ``grm eval``
resumes); set otherwise (fencing, a group strategy) they change what is judged, and the hash."""


LATER_SAMPLING = {"stop_at_score": False}
"""Sampling options added after specs were first hashed: left out of the hash at these values,
wherever a sampling section sits (the judge's, its principles', its checklist's)."""


def hash_spec(spec: JudgeSpec) -> str:
    # ``limits`` (deadline, concurrency) never change a judgment: a new deadline must not make
    # ``grm eval`` refuse to resume.
    exclude: dict[str, Any] = {"limits": True}
    exclude.update({k: True for k, default in LATER_FIELDS.items() if getattr(spec, k) == default})
    for name, part in _later_sampling(spec).items():
        exclude.setdefault(name, part)
    if "guard" not in exclude and not spec.guard.neutralise:
        exclude["guard"] = {"neutralise"}  # added after fencing: a fenced spec keeps its hash
    return hashlib.sha256(spec.model_dump_json(exclude=exclude).encode()).hexdigest()[:16]


def _later_sampling(model: Any) -> dict[str, Any]:
    """Pydantic ``exclude`` paths of every ``LATER_SAMPLING`` option at its old value in ``model``."""
    from grm.config.sampling import JudgeSampling

    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, JudgeSampling):
            keys = {k for k, old in LATER_SAMPLING.items() if getattr(value, k) == old}
            if keys:
                out[name] = keys
        elif hasattr(type(value), "model_fields"):
            inner = _later_sampling(value)
            if inner:
                out[name] = inner
    return out


def provenance(
    spec: JudgeSpec, spec_hash: str, templates: dict[str, str | None] | None = None, engine: GenerationEngine | None = None
) -> dict[str, Any]:
    """What produced a result: spec and template hashes (``templates``: name -> sha256), model, seed
    and the engine's weights version."""
    templates = templates or {}
    return {
        "judge": spec.name,
        "spec_sha256": spec_hash,
        "mode": spec.mode,
        "template_sha256": templates.get("template_sha256"),
        "principles_template_sha256": templates.get("principles_template_sha256"),
        "model": spec.model,
        "seed": spec.sampling.seed,
        "engine_version": getattr(engine, "version", None) if engine else None,
        **{k: v for k, v in templates.items() if k not in ("template_sha256", "principles_template_sha256")},
    }


def score_range(spec: JudgeSpec) -> tuple[float, float] | None:
    """The range of the judge's raw scores that rewards map onto [0, 1] (None: no range; rewards are
    the raw scores). A checklist judge's score is a probability: [0, 1] unless ``normalize`` says."""
    if spec.normalize:
        return (spec.normalize.low, spec.normalize.high)
    if spec.mode == "checklist":
        return (0.0, 1.0)
    values = getattr(spec.parser, "values", None)
    rng: tuple[float, float] | None = getattr(spec.parser, "range", None)
    if values is not None:  # words standing for scores: the scores' own span
        rng = (min(values), max(values))
    if rng is not None and spec.aggregate.type == "sum":
        return (rng[0] * spec.sampling.n, rng[1] * spec.sampling.n)
    return (rng[0], rng[1]) if rng is not None else None


def rescale(spec: JudgeSpec, x: float) -> float:
    """``x`` mapped from the judge's score range onto [0, 1], clipped (unchanged without a range)."""
    rng = score_range(spec)
    if rng is None:
        return x
    lo, hi = rng
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


def normalize(spec: JudgeSpec, x: float | None) -> float | None:
    return None if x is None else rescale(spec, x)


def check_samples(spec: JudgeSpec, samples: Sequence[Sample]) -> None:
    """Refuse the batch before any compute if one sample does not fit the mode."""
    for k, s in enumerate(samples):
        s.check_for(spec.mode, spec.reference, where=item_name(s, k))


def item_name(s: Sample, k: int) -> str:
    """How a message names the ``k``-th sample of a batch: its id (on one line: an id is data, and
    may hold a line break) or its index."""
    return f"item {one_line(s.id)}" if s.id is not None else f"item {k}"


def finish(results: list[JudgeResult], t0: float) -> list[JudgeResult]:
    """A batch's results as every judge returns them (rule, model and checklist judges all return
    through here): a result holding a non-finite number (``mask_non_finite``) masked, and every
    result given an equal share of the batch's wall time since ``t0``."""
    elapsed = time.perf_counter() - t0
    for r in results:
        mask_non_finite(r)
        r.seconds = elapsed / len(results)
    return results


def mask_non_finite(r: JudgeResult) -> None:
    """Mask ``r`` when a number it would hand on is NaN or infinite: an environment's signal, a sum
    of huge parsed scores, a user parser's margin. Such a value is no reward (NaN compares false
    with everything, so a mean or an advantage over it is NaN too), and JSON cannot carry it. The
    result is masked like a failed parse: scores None, the reason in ``error``, counted in
    ``parse_failures``; a record's non-finite value is cleared with the same reason."""
    why = None
    for rec in r.samples:
        if _non_finite(rec.parsed):
            why = why or f"a non-finite score ({rec.parsed!r})"
            rec.error = rec.error or f"non-finite score {rec.parsed!r}"
            rec.parsed = None
    values = {
        "score": r.score,
        "reward": r.reward,
        "scores": r.scores,
        "rewards": r.rewards,
        "margin": r.margin,
        "view_margins": r.view_margins,
        "details": list((r.details or {}).values()),
        "checklist": [a.get("p_yes") for a in r.checklist or []],
    }
    bad = next((k for k, v in values.items() if _non_finite(v)), None)
    if bad is None and why is None:
        return
    why = why or f"a non-finite {bad} ({values[bad]!r})"
    r.score = r.reward = r.scores = r.rewards = r.margin = r.verdict = r.positional_agreement = None
    r.view_margins = None
    r.details = None
    for a in r.checklist or []:
        if _non_finite(a.get("p_yes")):
            a["p_yes"] = None
    r.error = f"masked: {why}" + (f"; {r.error}" if r.error else "")
    r.parse_failures += 1


def _non_finite(v: Any) -> bool:
    """Whether ``v`` (a number, or a list of them, possibly None inside) holds a NaN or an infinity."""
    if isinstance(v, list):
        return any(_non_finite(x) for x in v)
    return isinstance(v, float) and not math.isfinite(v)
