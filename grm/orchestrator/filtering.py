"""Dynamic filtering (DAPO dynamic sampling): groups whose valid rewards are all equal have zero
group-relative advantage and teach nothing; replace them with groups of fresh prompts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grm.orchestrator.types import Group, StepOutcome


def refill(
    groups: list[Group], want: int, more: Callable[[int], list[Group]], rounds: int = 3
) -> tuple[list[Group], dict[str, int]]:
    """Keep ``want`` groups, informative ones first, fetching ``more(round)`` (judged and rewarded
    groups of fresh prompts) up to ``rounds`` times while fewer than ``want`` are informative. If
    still short, uninformative groups top the batch up so its size stays fixed. The kept groups stay
    in order of arrival; returns (groups, stats)."""
    pool = list(groups)
    extra_round = 0
    while sum(g.informative for g in pool) < want and extra_round < rounds:
        extra_round += 1
        pool += more(extra_round)
    good = [g for g in pool if g.informative]
    flat = [g for g in pool if not g.informative]
    keep = {g.key for g in (good + flat)[:want]}
    chosen = [g for g in pool if g.key in keep]  # batch rows stay in order of arrival
    return chosen, {"groups_kept_informative": min(len(good), want), "refill_rounds": extra_round}


def same_groups(a: list[Group], b: list[Group]) -> bool:
    """Whether two batches hold the same groups in the same order (by key, not by object)."""
    return [g.key for g in a] == [g.key for g in b]


def filter_step(
    s: StepOutcome,
    want: int,
    fresh: Callable[[int], list[Group]],
    rewards: Callable[[list[Group]], dict[str, Any]],
) -> None:
    """A step's dynamic filtering: keep ``want`` groups, informative ones first, refilled with judged
    groups of fresh prompts (``fresh(round)``, rewarded here); the step's reward statistics are
    recomputed over the kept groups when they changed."""

    def more(salt: int) -> list[Group]:
        groups = fresh(salt)
        rewards(groups)
        return groups

    kept, s.filtering = refill(s.groups, want, more)
    if not same_groups(kept, s.groups):
        s.groups, s.reward_stats = kept, rewards(kept)
