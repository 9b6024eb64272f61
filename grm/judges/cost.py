"""What a judge's work costs: model calls, re-samples, prompt and generated tokens, seconds, and
what an OpenAI-compatible server says it used.

Counting happens where the model is asked (``MeteredEngine``, wrapped around a judge's engine by
its ``CritiqueSampler``), so every stage is counted once: principles, critiques, parse retries,
log-prob readings, checklist writing and a meta judge's ratings. A judge keeps running totals in
its ``cost``; ``costed`` takes the difference around one call and adds the call's wall seconds,
which is what ``grm run`` carries back from the judge actors (per step, per judge) and ``grm eval``
records per batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from grm.engines.base import Generation, GenerationEngine, GenerationRequest, SamplingParams

COUNTS = ("calls", "retries", "prompt_tokens", "cached_tokens", "generated_tokens", "votes_skipped")
USAGE = ("requests", "retries", "prompt_tokens", "completion_tokens", "server_restarts")
"""The counters an engine with a ``usage`` dict keeps (the openai engine: the server's reply, and
how often a server it launched was found dead and started again)."""


@dataclass
class JudgeCost:
    """Counts of one judge call, or running totals of a judge."""

    calls: int = 0
    """Model calls: one per sampled output (critique, parse retry, principles, written checklist)
    and one per log-prob reading; for a rule verifier, one per sample verified."""
    retries: int = 0
    """Of ``calls``, the re-samples of outputs the parser rejected (``on_failure.retries``)."""
    prompt_tokens: int = 0
    """Prompt tokens of every call, as the engine reports them: a prompt sampled n times counts n
    times (as a server bills it); a log-prob reading counts its prompt once (its prefill, nearly
    all of its cost), and a reading an API server makes in several requests counts each."""
    cached_tokens: int = 0
    """Of ``prompt_tokens``, those served from a prefix the engine had already computed (the hf
    engine's prompt cache: a critique's prompt read again with its score; a server's
    ``cached_tokens``): prompt tokens that cost next to nothing."""
    generated_tokens: int = 0
    """Tokens the judge's model generated."""
    votes_skipped: int = 0
    """Critiques fixed voting (``sampling.n`` per view) would have drawn that adaptive votes
    (``votes``) did not: the items already decided after their first ``votes.first``."""
    seconds: float = 0.0
    """Wall seconds of the judge call(s), measured around them (``costed``); 0 in running totals."""
    usage: dict[str, int] = field(default_factory=dict)
    """What the server reported (openai engine): ``requests``, HTTP ``retries``, ``prompt_tokens``,
    ``completion_tokens``, and ``server_restarts`` of a launched server; empty for engines that
    report nothing."""

    def add(self, other: JudgeCost) -> JudgeCost:
        """Add ``other`` into this one (in place); returns self."""
        for k in COUNTS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.seconds += other.seconds
        for k, v in other.usage.items():
            self.usage[k] = self.usage.get(k, 0) + v
        return self

    def since(self, before: JudgeCost) -> JudgeCost:
        """What was counted after ``before`` (a copy of these totals taken earlier)."""
        out = JudgeCost(**{k: getattr(self, k) - getattr(before, k) for k in COUNTS})
        out.seconds = self.seconds - before.seconds
        out.usage = {k: v - before.usage.get(k, 0) for k, v in self.usage.items()}
        return out

    def copy(self) -> JudgeCost:
        return JudgeCost().add(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> JudgeCost:
        d = d or {}
        counts = {k: int(d.get(k) or 0) for k in COUNTS}
        return cls(**counts, seconds=float(d.get("seconds") or 0.0), usage=dict(d.get("usage") or {}))

    def metrics(self, judge: str) -> dict[str, float | int]:
        """metrics.jsonl keys: ``judge_cost/<judge>/{calls,retries,prompt_tokens,generated_tokens,
        seconds}`` and ``judge_cost/<judge>/usage_<counter>`` when a server reported usage."""
        m: dict[str, float | int] = {f"judge_cost/{judge}/{k}": getattr(self, k) for k in COUNTS}
        m[f"judge_cost/{judge}/seconds"] = self.seconds
        m.update({f"judge_cost/{judge}/usage_{k}": v for k, v in self.usage.items()})
        return m


def server_usage(engine: Any) -> dict[str, int] | None:
    """The engine's running usage counters (a copy), or None if it keeps none."""
    usage = getattr(engine, "usage", None)
    return {k: int(usage.get(k, 0)) for k in USAGE} if isinstance(usage, dict) else None


def prompt_counts(engine: Any) -> tuple[int, int]:
    """The engine's running (prompt tokens its log-prob readings read, prompt tokens it served from
    a prefix already computed): ``engine.prompt_counts``, (0, 0) for an engine that keeps none."""
    counts = getattr(engine, "prompt_counts", None)
    return (int(counts[0]), int(counts[1])) if isinstance(counts, tuple) and len(counts) == 2 else (0, 0)


class MeteredEngine:
    """A judge's engine that counts what the judge asks of it into ``cost``. Everything else (the
    tokenizer, ``prompt_cache``, ``version``) passes through to the engine."""

    def __init__(self, engine: GenerationEngine, cost: JudgeCost) -> None:
        self.engine, self.cost = engine, cost

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        before, reads = server_usage(self.engine), prompt_counts(self.engine)
        gens = self.engine.generate(requests, sampling)
        self.cost.calls += len(gens)
        self.cost.prompt_tokens += sum(g.prompt_tokens for g in gens)
        self.cost.generated_tokens += sum(g.n_tokens for g in gens)
        self.cost.cached_tokens += prompt_counts(self.engine)[1] - reads[1]
        self._usage(before)
        return gens

    def score_continuations(
        self, requests: Sequence[GenerationRequest], continuations: Sequence[Sequence[str]]
    ) -> list[list[float | None]]:
        before, reads = server_usage(self.engine), prompt_counts(self.engine)
        out = self.engine.score_continuations(requests, continuations)
        self.cost.calls += len(requests)
        after = prompt_counts(self.engine)
        self.cost.prompt_tokens += after[0] - reads[0]
        self.cost.cached_tokens += after[1] - reads[1]
        self._usage(before)
        return out

    def _usage(self, before: dict[str, int] | None) -> None:
        after = server_usage(self.engine)
        if before is None or after is None:
            return
        for k in USAGE:
            self.cost.usage[k] = self.cost.usage.get(k, 0) + after[k] - before[k]


T = TypeVar("T")


def costed(judge: Any, call: Callable[..., T], *args: Any) -> tuple[T, JudgeCost]:
    """``call(*args)`` (a method of ``judge``) and what it cost: the change in ``judge.cost`` plus
    the call's wall seconds. A judge that keeps no ``cost`` is charged seconds only."""
    totals = getattr(judge, "cost", None)
    before = totals.copy() if isinstance(totals, JudgeCost) else None
    t0 = time.perf_counter()
    out = call(*args)
    spent = totals.since(before) if isinstance(totals, JudgeCost) and before is not None else JudgeCost()
    spent.seconds = time.perf_counter() - t0
    return out, spent


def split(cost: JudgeCost, parts: int) -> list[JudgeCost]:
    """``cost`` shared among ``parts`` items (one batch's lines in ``grm eval``): counts as whole
    numbers that sum to the total (the first items take the remainder), seconds evenly."""
    out = [JudgeCost(seconds=cost.seconds / parts) for _ in range(parts)]
    for k in COUNTS:
        q, r = divmod(getattr(cost, k), parts)
        for i, c in enumerate(out):
            setattr(c, k, q + (i < r))
    for k, v in cost.usage.items():
        q, r = divmod(v, parts)
        for i, c in enumerate(out):
            c.usage[k] = q + (i < r)
    return out


def total(costs: Sequence[JudgeCost]) -> JudgeCost:
    out = JudgeCost()
    for c in costs:
        out.add(c)
    return out
