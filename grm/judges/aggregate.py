"""Voting over samples, and combining the two presentation orders of a pairwise judgment.

All functions skip failed samples (None); when every sample failed the result is None.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from grm.config.judge import AggregateSpec
from grm.judges.types import SampleRecord, Verdict


def mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


def total(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(sum(vals)) if vals else None


def majority(values: Sequence[float | None]) -> float | None:
    """Majority vote on the sign of pairwise margins: +1, -1 or 0 (tie, also for a split vote)."""
    signs = [(v > 0) - (v < 0) for v in values if v is not None]
    if not signs:
        return None
    counts = Counter(signs).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return 0.0
    return float(counts[0][0])


AGGREGATORS = {"mean": mean, "median": median, "sum": total, "majority": majority}
"""Registry of sample aggregators by ``aggregate.type`` (``meta`` selects samples, then means)."""


def mean_lists(lists: Sequence[Sequence[float] | None]) -> list[float] | None:
    """Element-wise mean of per-response score lists (listwise), skipping failed samples."""
    ok = [x for x in lists if x is not None]
    if not ok:
        return None
    return [sum(col) / len(col) for col in zip(*ok, strict=True)]


def median_lists(lists: Sequence[Sequence[float] | None]) -> list[float] | None:
    """Element-wise median of per-response score lists (listwise), skipping failed samples."""
    ok = [x for x in lists if x is not None]
    if not ok:
        return None
    return [float(statistics.median(col)) for col in zip(*ok, strict=True)]


def total_lists(lists: Sequence[Sequence[float] | None]) -> list[float] | None:
    """Element-wise sum of per-response score lists (listwise), skipping failed samples."""
    ok = [x for x in lists if x is not None]
    if not ok:
        return None
    return [float(sum(col)) for col in zip(*ok, strict=True)]


LIST_AGGREGATORS = {"mean": mean_lists, "median": median_lists, "sum": total_lists}
"""Listwise counterparts of ``AGGREGATORS`` (``meta`` selects samples, then means)."""


def top_k_mean(values: Sequence[float | None], ratings: Sequence[float | None], k: int) -> float | None:
    """DeepSeek-GRM meta-RM guided voting: mean of the k valid samples with the highest rating.

    Samples the meta judge could not rate rank last but still count if fewer than k are rated.
    """
    pairs = [(r if r is not None else float("-inf"), v) for v, r in zip(values, ratings, strict=True) if v is not None]
    if not pairs:
        return None
    pairs.sort(key=lambda p: -p[0])
    chosen = [v for _, v in pairs[:k]]
    return sum(chosen) / len(chosen)


def final_attempts(records: Sequence[SampleRecord]) -> list[SampleRecord]:
    """The record that counts for each sample slot: its last attempt (earlier failures stay on record)."""
    last: dict[int, SampleRecord] = {}
    for r in records:
        if r.index not in last or r.attempt >= last[r.index].attempt:
            last[r.index] = r
    return [last[k] for k in sorted(last)]


def vote(spec: AggregateSpec, records: Sequence[SampleRecord]) -> float | None:
    """One number from the scalar samples of a view (pointwise scores or pairwise margins)."""
    values = [r.parsed if isinstance(r.parsed, (int, float)) else None for r in records]
    if spec.type == "meta":
        return top_k_mean(values, [r.meta_rating for r in records], spec.top_k)
    return AGGREGATORS[spec.type](values)


def verdict_of(margin: float | None) -> Verdict | None:
    if margin is None:
        return None
    return "1" if margin > 0 else "2" if margin < 0 else "tie"


def combine_swap(
    m_original: float | None,
    m_swapped: float | None,
    *,
    combine: Literal["verdict", "margin"],
    on_inconsistent: Literal["tie", "mask"],
) -> tuple[Verdict | None, float | None, bool | None]:
    """Combine the two orders of a pairwise judgment.

    ``m_original`` is the preference for response 1 when it was shown first (as A);
    ``m_swapped`` is the preference for response 1 when it was shown second, already mapped back
    (i.e. minus the margin for A in the swapped order). Returns (verdict, margin, agreement), where
    agreement says whether both orders picked the same winner (None if either failed).

    | original | swapped | verdict-combine        | margin-combine          |
    |----------|---------|------------------------|-------------------------|
    | 1        | 1       | 1                      | sign of the sum         |
    | 1        | 2       | on_inconsistent        | sign of the sum         |
    | 1        | tie     | on_inconsistent        | sign of the sum         |
    | tie      | tie     | tie                    | tie                     |
    | failed   | any     | None (masked)          | None (masked)           |

    One order alone is the position-biased reading swapping exists to cancel (a small judge that
    always says "A" would hand every half-failed item to whichever response it saw first), so an
    item with a failed order is masked, after that order's retries, and counted by the caller
    (``JudgeResult.one_order_failed``).
    """
    if m_original is None or m_swapped is None:
        return None, None, None
    v1, v2 = verdict_of(m_original), verdict_of(m_swapped)
    agree = v1 == v2
    if combine == "margin":
        m = m_original + m_swapped
        return verdict_of(m), m, agree
    if agree:
        return v1, (m_original + m_swapped) / 2, True
    if on_inconsistent == "mask":
        return None, None, False
    return "tie", 0.0, False
