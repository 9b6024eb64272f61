"""The judge for every mode that asks a model (pointwise, pairwise, listwise).

``ModelJudge`` implements the ``Judge`` protocol once, by composition: ``JudgePrompts`` renders the
views of a batch, a ``CritiqueSampler`` turns their requests into critique records, an optional
meta-judge rates the critiques, and a ``JudgeMode`` (one small class per mode in ``pointwise``,
``pairwise`` and ``listwise``) decides only what differs: the presentation orders, what a critique
means, how an item's records combine, and how a pipeline's groups become the items it judges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from grm.config.judge import JudgeSpec
from grm.judges.adaptive import undecided
from grm.judges.base import GroupPlan, Judge, check_samples, finish, hash_spec, provenance
from grm.judges.cost import JudgeCost
from grm.judges.engine_slot import EngineSlot
from grm.judges.parsers import JudgeParsers
from grm.judges.prompts import JudgePrompts
from grm.judges.sampler import CritiqueSampler
from grm.judges.templates import shared_renders
from grm.judges.types import JudgeResult, Sample
from grm.judges.views import Mode, View


class JudgeMode(Mode, Protocol):
    """A sampler ``Mode`` that also says how a pipeline's groups become the samples it judges."""

    def group(self, groups: Sequence[Sequence[Sample]]) -> GroupPlan:
        """The items to score for ``groups`` and how their results become one per response."""
        ...


ModeFactory = Callable[[JudgeSpec, JudgeParsers], JudgeMode]
"""A mode class: built from the judge's spec and its text parsers."""


class ModelJudge:
    """A model judge: ``mode`` decides what the judge is shown and how its critiques combine;
    ``meta`` (``aggregate.type: meta``) rates each critique, built by ``grm.judges.runtime``."""

    def __init__(
        self, spec: JudgeSpec, base_dir: Path, slot: EngineSlot, *, mode: ModeFactory, meta: Judge | None = None
    ) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.spec_hash = hash_spec(spec)
        self.cost = JudgeCost()
        """Running totals of this judge's model calls (``grm.judges.cost``), its meta-judge's included."""
        self.prompts = JudgePrompts(spec, base_dir)
        parsers = JudgeParsers(spec)
        self.sampler = CritiqueSampler(spec, slot, parsers, self.cost)
        self.mode = mode(spec, parsers)
        self.meta = meta

    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        """One result per sample, in order, with as few engine calls as the mode allows: one for the
        principles of the whole batch, then the sampler's (``CritiqueSampler.sample``)."""
        return self._score(samples, None)

    def _score(self, samples: Sequence[Sample], members: Sequence[Sequence[int]] | None) -> list[JudgeResult]:
        """``score_batch``; ``members`` (the items of each group) lets adaptive votes compare a group's responses."""
        t0 = time.perf_counter()
        check_samples(self.spec, samples)
        with self.sampler.keeping_prompts(), shared_renders(self.spec.limits, len(samples), f"a batch of {len(samples)} samples"):
            tokens = [0] * len(samples)
            principles: list[str | None] = [None] * len(samples)
            if self.spec.principles is not None:
                requests = [self.prompts.principles_request(s) for s in samples]
                principles = list(self.sampler.principles(requests, tokens))
            views = self.prompts.views(samples, principles, self.mode.orders, self.sampler.slot.loaded)
            if self.spec.votes is None:
                self.sampler.sample(views, tokens, self.mode)
            else:
                self._adaptive(views, len(samples), tokens, members)
            if self.meta is not None:
                self._meta_rate(samples, views, tokens)
            results = [
                self.result(item_views, len(s.responses or []))
                for s, item_views in zip(samples, by_item(views, len(samples)), strict=True)
            ]
        for res, p, t in zip(results, principles, tokens, strict=True):
            res.principles, res.tokens = p, t
        return finish(results, t0)

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        plan = self.mode.group(groups)
        return plan.regroup(self._score(plan.items, plan.members) if plan.items else [])  # an empty step loads no model

    def _adaptive(self, views: list[View], n_items: int, tokens: list[int], members: Sequence[Sequence[int]] | None) -> None:
        """Adaptive votes: ``votes.first`` critiques of every view, then the rest of ``sampling.n``
        for the items ``grm.judges.adaptive.undecided`` picks from the first round's results."""
        votes = self.spec.votes
        assert votes is not None
        for v in views:
            v.n = votes.first
        self.sampler.sample(views, tokens, self.mode)
        per_item = by_item(views, n_items)
        first = [self.mode.combine(vs, 0) for vs in per_item]
        recs = [[r for v in vs for r in v.records] for vs in per_item]
        chosen = undecided(votes, self.spec.mode, first, recs, members)
        extra = [v for i in chosen for v in per_item[i]]
        for v in extra:
            v.n = self.spec.sampling.n
        if extra:
            self.sampler.more(extra, votes.first, tokens, self.mode)
        self.cost.votes_skipped += (len(views) - len(extra)) * (self.spec.sampling.n - votes.first)

    def result(self, views: list[View], n_responses: int) -> JudgeResult:
        """An item's result from its views' records: the mode's combination, plus the counts."""
        res = self.mode.combine(views, n_responses)
        recs = [r for v in views for r in v.records]
        res.samples = recs
        res.parse_failures = sum(1 for r in recs if r.error is not None)
        res.truncated = max((v.truncated for v in views), default=0)
        res.judge_directed = max((v.judge_directed for v in views), default=0)
        res.observations_cut = max((v.observations_cut for v in views), default=0)
        res.provenance = self.provenance()
        return res

    def provenance(self) -> dict[str, Any]:
        return provenance(self.spec, self.spec_hash, self.prompts.sha256(), self.sampler.slot.loaded)

    def _meta_rate(self, samples: Sequence[Sample], views: list[View], tokens: list[int]) -> None:
        """Each parsed critique rated by the meta-judge (``SampleRecord.meta_rating``), in one batch."""
        assert self.meta is not None
        slots = [(v, r) for v in views for r in v.records if r.parsed is not None]
        metas = []
        for v, r in slots:
            s = samples[v.item]
            shown = [s.responses[i] for i in v.order] if s.responses else None
            response = s.response if s.response is not None else "\n\n".join(shown or [])
            critique = (self.spec.prefill or "") + r.text
            metas.append(
                Sample(
                    prompt=s.prompt,
                    messages=s.messages,
                    response=response,
                    reference=s.reference,
                    critique=critique,
                    metadata=s.metadata,
                )
            )
        if not metas:
            return
        before = self.meta.cost.copy()
        rated = self.meta.score_batch(metas)
        self.cost.add(self.meta.cost.since(before))  # the meta judge's calls are this judge's cost
        for (v, r), res in zip(slots, rated, strict=True):
            r.meta_rating = res.score
            tokens[v.item] += res.tokens


def by_item(views: list[View], n_items: int) -> list[list[View]]:
    """The views of each item, in view order."""
    out: list[list[View]] = [[] for _ in range(n_items)]
    for v in views:
        out[v.item].append(v)
    return out
