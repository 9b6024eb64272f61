"""A judge's per-call deadline and concurrency cap, resolved from its spec's ``limits``.

The deadline of a call grows linearly with the samples it judges; see ``JudgeLimits`` (in
``grm.config.judge``) for the formula and where its default rates come from. ``grm run``'s
scheduler and ``grm eval`` both take their deadlines from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from grm.config.judge import GroupSpec, JudgeSpec
from grm.judges.groups import plan_pairs


def views(spec: JudgeSpec) -> int:
    """Judge prompts a sample is shown in: 2 for a swapped pairwise judge, one per question for a
    checklist judge (``checklist.max_items``, also taken as the size of a checklist from the data),
    else 1."""
    if spec.checklist is not None:
        return spec.checklist.max_items
    return 2 if spec.mode == "pairwise" and spec.position.swap else 1


def _writes(spec: JudgeSpec) -> bool:
    """A checklist judge that writes each prompt's checklist (one more judge prompt, at most)."""
    return spec.checklist is not None and spec.checklist.source == "model"


def prompts_per_sample(spec: JudgeSpec) -> int:
    """Judge prompts read for one sample: one per view, plus the principles stage or the checklist
    writing (0 for a rule)."""
    if spec.mode == "rule":
        return 0
    return views(spec) + int(spec.principles is not None) + int(_writes(spec))


def tokens_per_sample(spec: JudgeSpec) -> int:
    """The most tokens the judge may generate for one sample: every view's n critiques, each
    re-sampled ``on_failure.retries`` times at worst, plus the principles stage. A logprob parser
    re-samples a critique after which a candidate was unread; with ``critique: false`` it generates
    nothing (and never retries: the same prompt reads the same log-probs)."""
    if spec.mode == "rule":
        return 0
    s = spec.sampling
    critique = getattr(spec.parser, "critique", True)
    tokens = views(spec) * s.n * (1 + spec.on_failure.retries) * s.max_new_tokens if critique else 0
    if spec.principles is not None:
        tokens += spec.principles.sampling.n * spec.principles.sampling.max_new_tokens
    if spec.checklist is not None and _writes(spec):  # written once per prompt; a retry writes again
        tokens += (1 + spec.on_failure.retries) * spec.checklist.sampling.max_new_tokens
    return tokens


@dataclass(frozen=True)
class CallLimits:
    """One judge's limits per call. ``CallLimits()`` (a judge handle built without a spec) allows
    one call in flight and sets no deadline of its own."""

    max_concurrent_calls: int = 1
    deadline_s: float | None = None
    """Every call's deadline whatever its size (the spec's ``limits.deadline_s``); None: derived."""
    overhead_s: float = math.inf
    """Seconds a derived deadline starts from (inf: no derived deadline)."""
    sample_s: float = 0.0
    """Seconds a derived deadline adds per judged sample."""
    per_group: bool = False
    """A group of responses is one judged sample (listwise); otherwise each response is one."""
    pairs: GroupSpec | None = None
    """(pairwise) each comparison a group's plan holds is one judged sample."""

    @property
    def explicit(self) -> bool:
        return self.deadline_s is not None

    def deadline(self, samples: int) -> float:
        """Seconds a call judging ``samples`` samples may take."""
        if self.deadline_s is not None:
            return self.deadline_s
        return self.overhead_s + samples * self.sample_s

    def samples_in(self, group_sizes: Sequence[int]) -> int:
        """Samples the judge scores for groups of these sizes (``Judge.score_groups``)."""
        if self.pairs is not None:
            return sum(len(plan_pairs(k, self.pairs, "")) for k in group_sizes)
        return sum(1 for k in group_sizes if k) if self.per_group else sum(group_sizes)


def call_limits(spec: JudgeSpec) -> CallLimits:
    """``spec.limits`` resolved against the spec's sampling, mode and failure policy."""
    lim = spec.limits
    per_sample = prompts_per_sample(spec) * lim.seconds_per_prompt + tokens_per_sample(spec) * lim.seconds_per_token
    return CallLimits(
        max_concurrent_calls=lim.max_concurrent_calls,
        deadline_s=lim.deadline_s,
        overhead_s=lim.overhead_s,
        sample_s=per_sample,
        per_group=spec.mode == "listwise",
        pairs=spec.groups if spec.mode == "pairwise" else None,
    )


def past_deadline(spec: JudgeSpec, samples: int, seconds: float) -> str | None:
    """A warning when a batch of ``samples`` took longer than the judge's deadline for a call that
    size (``grm run`` would re-issue such a call, then mask it); None when it was in time."""
    deadline = call_limits(spec).deadline(samples)
    if seconds <= deadline:
        return None
    return (
        f"judge '{spec.name}': a batch of {samples} samples took {seconds:.0f} s, past its {deadline:.0f} s deadline "
        "(limits in the judge spec); grm run would re-issue such a call, then mask it"
    )
