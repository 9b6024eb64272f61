"""Pairwise judges: response 1 against response 2, optionally in both presentation orders.

Every critique reads as a margin for the response shown first (a verdict: +1, -1 or 0; the logprob
parser: the log-odds of A over B); margins of the swapped order are mapped back to response 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from grm.config.judge import GroupSpec, JudgeSpec
from grm.judges.aggregate import combine_swap, final_attempts, verdict_of, vote
from grm.judges.base import GroupPlan
from grm.judges.errors import JudgeError
from grm.judges.groups import Pair, group_results, plan_pairs
from grm.judges.parsers import JudgeParsers, ParsedScore, fail, short_repr
from grm.judges.types import JudgeResult, Sample
from grm.judges.views import View
from grm.terminal import one_line

MARGINS = {"A": 1.0, "B": -1.0, "tie": 0.0}
"""A verdict names a position; its margin is the preference for the response shown first."""

SCORES = {"1": 1.0, "2": 0.0, "tie": 0.5}
"""A pairwise result's ``score`` (and reward) for each verdict."""


class PairwiseMode:
    """Judges ``Sample.responses == [r1, r2]``; ``verdict`` '1', '2' or 'tie', ``margin`` for r1."""

    def __init__(self, spec: JudgeSpec, parsers: JudgeParsers) -> None:
        self.spec = spec
        self.parsers = parsers

    def orders(self, sample: Sample, key: str) -> list[tuple[list[int], int]]:
        n = self.spec.sampling.n
        return [([0, 1], n), ([1, 0], n)] if self.spec.position.swap else [([0, 1], n)]

    def parse(self, order: list[int], text: str) -> ParsedScore:
        """A verdict becomes the margin of the response shown first; a number already is one."""
        parsed = self.parsers.get()(text)
        v = parsed.value
        if isinstance(v, str):
            margin = MARGINS.get(v)
            return ParsedScore(margin, None if margin is not None else f"unknown verdict {v!r}")
        if isinstance(v, list):  # only a target parser can return a list
            return fail(f"expected a verdict or a margin, found {short_repr(v)}")
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
            res.one_order_failed = int((margins[0] is None) != (margins[1] is None))
        else:
            margin = margins[0]
            verdict = verdict_of(margin)
        res.verdict, res.margin = verdict, margin
        res.score = None if verdict is None else SCORES[verdict]
        res.reward = res.score
        return res

    def group(self, groups: Sequence[Sequence[Sample]]) -> GroupPlan:
        """Each group's responses compared in pairs (``spec.groups``), every comparison of every
        group in one batch, then one result per response (``grm.judges.groups``)."""
        gs = self.spec.groups
        planned: list[list[Pair]] = []
        items: list[Sample] = []
        used: list[dict[str, Any] | None] = []
        for g in groups:
            key = group_key(g)
            episodes = [s.trajectory for s in g if s.trajectory is not None]
            if episodes and (len(episodes) != len(g) or gs.strategy == "anchor"):
                raise JudgeError(
                    f"group {one_line(key)}: a group of episodes needs a 'trajectory' on every sample and groups.strategy"
                    " 'round_robin' or 'circular' (an anchor is a text answer, not an episode)"
                )
            anchor, info = anchor_of(g, gs) if g and gs.strategy == "anchor" else (None, None)
            used.append(info)
            pairs = plan_pairs(len(g), gs, key) if g and (anchor is not None or gs.strategy != "anchor") else []
            for i, j in pairs:
                other, name = (anchor, "anchor") if j == len(g) else (g[j].response, str(j))
                pair = [episodes[i], episodes[j]] if episodes else None
                items.append(
                    replace(
                        g[i],
                        response=None,
                        responses=[g[i].response, other],
                        trajectory=None,
                        trajectories=pair,
                        id=f"{key}/{i}v{name}",
                    )
                )
            planned.append(pairs)
        sizes = [len(g) for g in groups]

        def regroup(results: list[JudgeResult]) -> list[list[JudgeResult | None]]:
            it = iter(results)
            out: list[list[JudgeResult | None]] = []
            for n, pairs, info in zip(sizes, planned, used, strict=True):
                got = [next(it) for _ in pairs]
                done = group_results(self.spec.name, n, pairs, got, gs)
                for r in done:  # which anchor, so samples.jsonl says what each response was compared with
                    for c in r.comparisons or []:
                        if c["against"] == "anchor":
                            c["anchor"] = info
                out.append(list(done))
            return out

        return GroupPlan(items, regroup)


def group_key(group: Sequence[Sample]) -> str:
    """The group's name for ids and seeds: its key in a run, else its first response's id without
    the ``/k`` suffix (``grm eval``'s groups)."""
    if group and group[0].group is not None:
        return group[0].group
    first = group[0].id if group else None
    return "group" if first is None else first.rsplit("/", 1)[0]


def anchor_of(group: Sequence[Sample], spec: GroupSpec) -> tuple[str | None, dict[str, Any] | None]:
    """The answer every response of the group is compared with (``groups.strategy: anchor``) and
    what it is (``{source, policy_version, step}``): the prompt's reference, the greedy response the
    rollout put in ``Sample.anchor``, or the earlier step's greedy response the run's store put in
    ``Sample.previous_anchor`` (``groups.fallback`` when there is none). (None, None) when
    the group has none: nothing is compared and its responses are masked, as a rule verifier masks
    a response without a reference."""
    first = group[0]
    source = spec.anchor
    if source == "previous":
        if first.previous_anchor is not None:
            return first.previous_anchor.text, first.previous_anchor.info()
        source = spec.fallback
    if source == "reference":
        text, info = first.reference, {"source": "reference", "policy_version": None, "step": None}
    elif first.anchor is not None:
        text, info = first.anchor.text, first.anchor.info()
    else:
        text, info = None, None
    return (text, info) if isinstance(text, str) else (None, None)
