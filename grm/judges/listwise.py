"""Listwise judges: all responses to a prompt in one critique, one score per response.

With ``position.shuffle`` every critique sees the responses in its own order (seeded by the item),
and its scores are mapped back to the original order before they vote.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from copy import copy

from grm.config.judge import JudgeSpec
from grm.judges import base
from grm.judges.aggregate import LIST_AGGREGATORS, final_attempts, mean_lists
from grm.judges.base import GroupPlan
from grm.judges.errors import JudgeError
from grm.judges.parsers import JudgeParsers, ParsedScore, fail, short_repr
from grm.judges.types import JudgeResult, Sample
from grm.judges.views import View
from grm.terminal import one_line


def as_list(group: Sequence[Sample]) -> Sample:
    """One listwise sample for the pointwise samples of one prompt's responses, in group order; a
    group of episodes (``Sample.trajectory``) becomes ``trajectories`` (with their final answers as
    ``responses``)."""
    first = group[0]
    responses = [s.response for s in group if s.response is not None]
    if len(responses) != len(group):
        raise JudgeError(f"group of item {one_line(str(first.id))}: every sample of a group needs 'response'")
    trajectories = [s.trajectory for s in group if s.trajectory is not None]
    if trajectories and len(trajectories) != len(group):
        raise JudgeError(
            f"group of item {one_line(str(first.id))}: either every sample of a group has a 'trajectory' or none has"
        )
    return Sample(
        prompt=first.prompt,
        messages=first.messages,
        responses=responses,
        reference=first.reference,
        metadata=first.metadata,
        id=None if first.id is None else f"{first.id}/group",
        trajectories=trajectories or None,
    )


def ungroup(result: JudgeResult | None, size: int) -> list[JudgeResult | None]:
    """Per-response results from one listwise result: copies carrying response k's score and reward.
    The group's counters (parse failures, truncated responses, text aimed at the judge, observations
    cut) stay on the first copy only, so a
    step's sums over responses count each judged group once."""
    if result is None:
        return [None] * size
    out: list[JudgeResult | None] = []
    for k in range(size):
        one = copy(result)
        one.score = result.scores[k] if result.scores else None
        one.reward = result.rewards[k] if result.rewards else None
        if k:
            one.parse_failures = one.truncated = one.judge_directed = one.observations_cut = 0
        out.append(one)
    return out


class ListwiseMode:
    """Judges ``Sample.responses`` (two or more) at once; ``scores``/``rewards`` in their order."""

    def __init__(self, spec: JudgeSpec, parsers: JudgeParsers) -> None:
        self.spec = spec
        self.parsers = parsers

    def orders(self, sample: Sample, key: str) -> list[tuple[list[int], int]]:
        k, n = len(sample.responses or []), self.spec.sampling.n
        if not self.spec.position.shuffle:
            return [(list(range(k)), n)]
        out = []
        for j in range(n):
            perm = list(range(k))
            random.Random(f"{self.spec.sampling.seed}:{key}:{j}").shuffle(perm)
            out.append((perm, 1))
        return out

    def parse(self, order: list[int], text: str) -> ParsedScore:
        """One score per response shown; a target parser's answer is held to that too."""
        parsed = self.parsers.get(expected=len(order))(text)
        v = parsed.value
        if v is not None and not (isinstance(v, list) and len(v) == len(order)):
            return fail(f"expected {len(order)} scores, found {short_repr(v)}")
        return parsed

    def from_logprobs(self, logprobs: list[float], values: list[float]) -> float:
        # JudgeSpec refuses this combination when it loads; reaching it means a spec built around validation
        raise JudgeError("the logprob parser scores one response (pointwise) or A vs B (pairwise)")

    def combine(self, views: list[View], n_responses: int) -> JudgeResult:
        """Every sample's scores mapped back to the original response order, then voted per response."""
        per_sample: list[list[float] | None] = []
        ratings: list[float] = []  # meta ratings; an unrated critique ranks last
        for v in views:
            for r in final_attempts(v.records):
                if isinstance(r.parsed, list):
                    back = [0.0] * n_responses
                    for pos, orig in enumerate(v.order):
                        back[orig] = r.parsed[pos]
                    per_sample.append(back)
                else:
                    per_sample.append(None)
                ratings.append(r.meta_rating if r.meta_rating is not None else float("-inf"))
        a = self.spec.aggregate
        if a.type == "meta":
            keep = sorted((i for i, p in enumerate(per_sample) if p is not None), key=lambda i: -ratings[i])[: a.top_k]
            per_sample = [per_sample[i] for i in keep]
        scores = LIST_AGGREGATORS.get(a.type, mean_lists)(per_sample)
        rewards = [base.rescale(self.spec, x) for x in scores] if scores else None
        return JudgeResult(judge=self.spec.name, scores=scores, rewards=rewards)

    def group(self, groups: Sequence[Sequence[Sample]]) -> GroupPlan:
        """Each group judged as one list (one listwise sample per non-empty group, one batch)."""
        sizes = [len(g) for g in groups]

        def regroup(results: list[JudgeResult]) -> list[list[JudgeResult | None]]:
            got = iter(results)
            return [ungroup(next(got), n) if n else [] for n in sizes]

        return GroupPlan([as_list(g) for g in groups if g], regroup)
