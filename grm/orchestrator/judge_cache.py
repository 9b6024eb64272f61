"""The critique cache (``judges[i].cache``): a frozen judge's judgment of a sample is a function of
the judge spec (its template, model, sampling and seed: ``grm.judges.base.hash_spec``) and the
sample's content, so a response judged before (a repeated answer, the next epoch over the same
prompts) is not judged again.

Only judges that read each sample alone are cached (pointwise and checklist modes; pairwise and
listwise judgments depend on the other responses and anchors). The scheduler asks ``plan`` before
it issues a call: the cached results are kept aside and only the rest is sent; ``merge`` puts the
answer back together in the groups' shape, and ``store`` keeps the new results. Entries live in
memory (at most ``MAX_ENTRIES`` a judge, the oldest dropped first) and in
``RUN/judge_cache/JUDGE.jsonl`` (appended and fsynced, read back on ``--resume``; a torn last line
from a kill is skipped). A masked result is never cached: the sample is judged again.

The hf engine seeds a critique from the spec's seed and the sample's tokens, so a cached critique
is the one a new call would write; a judgment that needed retries is kept as it came out (a retry's
seed also depends on the sample's place in its batch).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grm.base import regular_file_bytes
from grm.config.judge import JudgeSpec
from grm.jsonl import append_jsonl
from grm.judges.base import hash_spec
from grm.judges.types import JudgeResult, Sample, SampleRecord
from grm.orchestrator.errors import RunError
from grm.orchestrator.types import GroupResults

CACHEABLE = ("pointwise", "checklist")
"""Judge modes whose judgment of a sample depends on that sample alone."""
MAX_ENTRIES = 100_000
"""Judgments kept per judge (memory and file); past it the oldest go first."""
DIR = "judge_cache"


def sample_key(spec_hash: str, s: Sample) -> str:
    """What a judgment depends on: the spec and the sample's content (never its id, group or anchors)."""
    content = {
        "prompt": s.prompt,
        "messages": s.messages,
        "response": s.response,
        "responses": s.responses,
        "reference": s.reference,
        "metadata": s.metadata,
        "critique": s.critique,
        "trajectory": s.trajectory.to_dict() if s.trajectory is not None else None,
    }
    blob = json.dumps([spec_hash, content], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def result_from_dict(d: dict[str, Any]) -> JudgeResult:
    fields = {k: v for k, v in d.items() if k in JudgeResult.__dataclass_fields__ and k != "samples"}
    samples = [SampleRecord(**{k: x.get(k) for k in SampleRecord.__dataclass_fields__}) for x in d.get("samples") or []]
    return JudgeResult(**fields, samples=samples)


@dataclass
class Plan:
    """One call's split: which samples were found, and the groups still to send."""

    cached: list[list[JudgeResult | None]]
    """Per group, per sample: the cached result, or None where the judge must be asked."""
    missing: list[list[Sample]]
    """The groups to send (only their uncached samples; groups with none left out)."""
    where: list[tuple[int, list[int]]]
    """For each sent group: its index among the call's groups and its samples' indices there."""
    keys: list[list[str]]
    """Per group, per sample: its cache key."""

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def hits(self) -> int:
        return sum(r is not None for g in self.cached for r in g)

    @property
    def saved_s(self) -> float:
        """The judge seconds the found results had cost when they were made."""
        return sum(r.seconds for g in self.cached for r in g if r is not None)

    def merge(self, answered: GroupResults) -> GroupResults:
        """The call's results in its groups' shape: the cached ones, then the judge's for the rest."""
        out = [list(g) for g in self.cached]
        for (gi, idx), results in zip(self.where, answered, strict=True):
            for i, r in zip(idx, results, strict=True):
                out[gi][i] = r
        return out


@dataclass
class JudgeCache:
    """One judge's cache (see the module docstring)."""

    name: str
    spec_hash: str
    path: Path | None = None
    entries: OrderedDict[str, JudgeResult] = field(default_factory=OrderedDict)

    @classmethod
    def open(cls, spec: JudgeSpec, run_dir: Path | None) -> JudgeCache:
        """The cache of ``spec``'s judge, with what ``run_dir`` kept of it (a resumed run)."""
        path = run_dir / DIR / f"{spec.name}.jsonl" if run_dir is not None else None
        cache = cls(spec.name, hash_spec(spec), path)
        if path is not None and path.is_file():
            raw = regular_file_bytes(path, RunError, own=True) or b""
            for line in raw.split(b"\n"):
                try:
                    row = json.loads(line)
                    if isinstance(row, dict) and row.get("spec") == cache.spec_hash:
                        cache._keep(row["key"], result_from_dict(row["result"]))
                except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # cut short by a kill, or not grm's
                    continue
        return cache

    def _keep(self, key: str, result: JudgeResult) -> None:
        self.entries[key] = result
        self.entries.move_to_end(key)
        while len(self.entries) > MAX_ENTRIES:
            self.entries.popitem(last=False)

    def plan(self, groups: Sequence[Sequence[Sample]]) -> Plan:
        keys = [[sample_key(self.spec_hash, s) for s in g] for g in groups]
        cached = [[self.entries.get(k) for k in g] for g in keys]
        missing, where = [], []
        for gi, (g, got) in enumerate(zip(groups, cached, strict=True)):
            idx = [i for i, r in enumerate(got) if r is None]
            if idx:
                missing.append([g[i] for i in idx])
                where.append((gi, idx))
        return Plan(cached, missing, where, keys)

    def store(self, plan: Plan, answered: GroupResults) -> None:
        """Keep the judge's new, unmasked results (``answered``: per sent group, as ``merge`` takes
        them) in memory and the run directory's file."""
        rows = []
        for (gi, idx), got in zip(plan.where, answered, strict=True):
            for i, r in zip(idx, got, strict=True):
                if r is None or r.masked:
                    continue
                key = plan.keys[gi][i]
                self._keep(key, r)
                rows.append({"spec": self.spec_hash, "key": key, "result": r.to_dict()})
        if rows and self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_jsonl(self.path, rows)


def open_caches(judges: Sequence[tuple[JudgeSpec, bool]], run_dir: Path | None) -> dict[str, JudgeCache]:
    """A cache for each judge that reads samples alone and has ``cache`` on."""
    return {spec.name: JudgeCache.open(spec, run_dir) for spec, on in judges if on and spec.mode in CACHEABLE}
