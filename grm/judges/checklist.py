"""Checklist judges: yes/no questions about one response, each read as P(yes) off the judge
model's log-probs (no free text is parsed), weighted into a score in [0, 1].

The questions come from the data (``Sample.metadata["checklist"]``, checked by
``grm.data.checklists``) or are written by the judge model (``ChecklistWriter``): once per distinct
prompt in a batch, all in one generate call, and kept in a bounded LRU cache keyed by the writing
request, so a prompt's whole group and its later steps reuse it. Every (response, question) is one
judge prompt, the question given to the template as ``question``; the ``CritiqueSampler`` renders
and guards them and reads the batch's yes/no log-probs in one ``score_continuations`` call.

A question whose log-probs cannot be read is left out of the score; with none read, or no checklist
written, the response is masked (score None), never given a default number.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grm.config.judge import JudgeSpec
from grm.data.checklists import METADATA_KEY, check_length, read_checklist
from grm.data.errors import DataError
from grm.engines.base import GenerationEngine, GenerationRequest
from grm.judges import base
from grm.judges.aggregate import final_attempts, vote
from grm.judges.base import GroupPlan, Judge
from grm.judges.cost import JudgeCost
from grm.judges.engine_slot import EngineSlot
from grm.judges.errors import JudgeError
from grm.judges.model import ModelJudge
from grm.judges.parsers import JudgeParsers, ParsedScore, expected_value, fail
from grm.judges.prompts import load_judge_template
from grm.judges.templates import Template, render_limits, shared_renders
from grm.judges.types import JudgeResult, Sample, SampleRecord
from grm.judges.views import View, sampling_params

QUESTION_KEY = "question"
"""``Sample.metadata`` key the sampler hands templates as ``question``."""
WRITER_VIEW = -1
"""``SampleRecord.view`` of the checklist writing (questions are views 0, 1, ...)."""
PLACEHOLDER = "<a question of the checklist the checklist stage writes>"

# The item starts at a non-space: "\s+(.*\S)" split a line of spaces every way (3 s on 20,000).
_ITEM_LINE = re.compile(r"^\s*(?:\d{1,2}\s*[.):]|\(\d{1,2}\)|[-*•])\s+(\S(?:.*\S)?)\s*$")


def parse_written(text: str, max_items: int, cut: bool = False) -> list[dict[str, Any]]:
    """The questions of a written checklist: its numbered ("1.", "2)", "(3)") or bulleted ("-", "*")
    lines of two words or more (a bare "Yes" is an answer, not a question), markdown emphasis
    stripped, repeats dropped, the first ``max_items`` kept; weight 1 each.
    ``cut``: the writing stopped at its token limit, so its last line is unfinished and dropped."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    lines = text.splitlines()
    for line in lines[:-1] if cut else lines:
        m = _ITEM_LINE.match(line)
        question = m.group(1).strip().strip("*_").strip() if m else ""
        if len(question.split()) < 2 or question.lower() in seen:
            continue
        seen.add(question.lower())
        out.append({"question": question, "weight": 1.0})
        if len(out) == max_items:
            break
    return out


def p_pass(answer: dict[str, Any]) -> float | None:
    """P(the response passes this item): P(yes), or 1 - P(yes) on an item ``pass_if: no``."""
    p = answer.get("p_yes")
    return None if p is None else (1.0 - p if answer.get("pass_if") == "no" else p)


def checklist_score(answers: Sequence[dict[str, Any]]) -> float | None:
    """Weighted mean of the read answers' P(pass) (P(yes), or P(no) on ``pass_if: no`` items;
    unread ones, ``p_yes`` None, left out of both sums); None when none was read."""
    read = [(a["weight"], p_pass(a)) for a in answers if a.get("p_yes") is not None]
    if not read:
        return None
    top = max(w for w, _ in read)  # weights scaled by the largest: huge finite weights cannot sum to infinity
    if not top > 0:
        return None
    total = sum(w / top for w, _ in read)
    return sum(w / top * p for w, p in read) / total


class QuestionMode:
    """The judge mode of one (response, question) reading: one view; the logprob parser's [yes, no]
    candidates valued [1, 0], so the value read is P(yes) renormalised over the two; the n readings
    (with a critique first, n may exceed 1) vote."""

    def __init__(self, spec: JudgeSpec, parsers: JudgeParsers) -> None:
        self.spec = spec

    def orders(self, sample: Sample, key: str) -> list[tuple[list[int], int]]:
        return [([0], self.spec.sampling.n)]

    def parse(self, order: list[int], text: str) -> ParsedScore:
        # JudgeSpec requires the logprob parser for checklist judges; text is never parsed
        return fail("a checklist judge reads log-probs, not text")

    def from_logprobs(self, logprobs: list[float], values: list[float]) -> float:
        return expected_value(logprobs, values)

    def combine(self, views: list[View], n_responses: int) -> JudgeResult:
        p = vote(self.spec.aggregate, final_attempts(views[0].records)) if views else None
        return JudgeResult(judge=self.spec.name, score=p, reward=p)

    def group(self, groups: Sequence[Sequence[Sample]]) -> GroupPlan:
        return base.alone(groups)


@dataclass
class Checklist:
    """One sample's questions (None: none could be written) and the writing it cost, which only
    the first sample of a prompt in a batch carries (``records``: every attempt of the writing)."""

    items: list[dict[str, Any]] | None
    records: list[SampleRecord] = field(default_factory=list)
    error: str | None = None


class ChecklistWriter:
    """Writes a prompt's checklist with the judge model (``checklist.template``), caching it."""

    def __init__(self, spec: JudgeSpec, template: Template) -> None:
        assert spec.checklist is not None
        self.spec, self.cfg, self.template = spec, spec.checklist, template
        self.cache: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self.generated = 0
        """Checklists sent to the model for writing (retries not counted): a cache hit adds none."""

    def request(self, s: Sample) -> GenerationRequest:
        user = self.template.render(
            limits=render_limits(self.spec.limits),
            prompt=s.prompt,
            messages=s.messages or [{"role": "user", "content": s.prompt}],
            reference=s.reference,
            metadata=s.metadata,
        )
        msgs = [{"role": "system", "content": self.spec.system}] if self.spec.system else []
        msgs.append({"role": "user", "content": user})
        if self.cfg.prefill:
            msgs.append({"role": "assistant", "content": self.cfg.prefill})
        return GenerationRequest(messages=msgs, continue_final=bool(self.cfg.prefill))

    @staticmethod
    def key(req: GenerationRequest) -> str:
        return hashlib.sha256(json.dumps(req.messages, ensure_ascii=False).encode()).hexdigest()

    def write(self, engine: GenerationEngine, samples: Sequence[Sample]) -> list[Checklist]:
        """Each sample's checklist: cached, or written in one generate call per attempt for all the
        batch's distinct new prompts; a reply with no question is written again with a new seed."""
        reqs = [self.request(s) for s in samples]
        keys = [self.key(r) for r in reqs]
        got: dict[str, list[dict[str, Any]]] = {}
        for k in keys:
            if k in self.cache:
                self.cache.move_to_end(k)
                got[k] = self.cache[k]
        todo = {k: r for k, r in zip(keys, reqs, strict=True) if k not in got}
        self.generated += len(todo)
        records: dict[str, list[SampleRecord]] = {k: [] for k in todo}
        s, retry = self.cfg.sampling, self.spec.on_failure
        for attempt in range(1 + retry.retries):
            if not todo:
                break
            sp = sampling_params(s)
            if attempt:
                sp = sp.replace(temperature=max(s.temperature, retry.retry_temperature))
            seed = s.seed + 7919 * attempt
            sent = [GenerationRequest(messages=r.messages, continue_final=r.continue_final, seed=seed) for r in todo.values()]
            for k, g in zip(list(todo), engine.generate(sent, sp), strict=True):
                items = parse_written((self.cfg.prefill or "") + g.text, self.cfg.max_items, cut=g.finish_reason == "length")
                error = None if items else f"no numbered or bulleted question in the written checklist: {g.text[:200]!r}"
                records[k].append(
                    SampleRecord(
                        view=WRITER_VIEW,
                        order=[],
                        index=0,
                        attempt=attempt,
                        text=g.text,
                        parsed=float(len(items)) if items else None,
                        error=error,
                        tokens=g.n_tokens,
                        finish_reason=g.finish_reason,
                    )
                )
                if items:
                    got[k] = items
                    self._keep(k, items)
                    del todo[k]
        out: list[Checklist] = []
        for k in keys:
            items = got.get(k)
            first = records.pop(k, [])  # a prompt's writing is counted on its first sample only
            out.append(Checklist(items, first, None if items is not None else "the judge wrote no checklist question"))
        return out

    def _keep(self, key: str, items: list[dict[str, Any]]) -> None:
        self.cache[key] = items
        while len(self.cache) > self.cfg.cache_size:
            self.cache.popitem(last=False)


def item_sample(s: Sample, k: int, question: str) -> Sample:
    """The sample one question reads: the response and its prompt, the question in metadata."""
    return Sample(
        prompt=s.prompt,
        messages=s.messages,
        response=s.response,
        reference=s.reference,
        metadata={**s.metadata, QUESTION_KEY: question},
        id=None if s.id is None else f"{s.id}/q{k}",
    )


class ChecklistJudge:
    """A checklist judge (``mode: checklist``): implements the ``Judge`` protocol. Its questions are
    read by a model judge of the same spec in ``QuestionMode`` (``reader``), one item per question."""

    def __init__(self, spec: JudgeSpec, base_dir: Path, slot: EngineSlot, meta: Judge | None = None) -> None:
        if spec.checklist is None:
            raise JudgeError(f"judge '{spec.name}': mode 'checklist' needs checklist: {{source: data|model}}")
        self.spec = spec
        self.base_dir = base_dir
        self.reader = ModelJudge(spec, base_dir, slot, mode=QuestionMode, meta=meta)
        self.spec_hash = self.reader.spec_hash
        self.writer: ChecklistWriter | None = None
        if spec.checklist.source == "model":
            self.writer = ChecklistWriter(spec, load_judge_template(spec.checklist.template or "", base_dir))

    @property
    def cost(self) -> JudgeCost:
        """The reader's running totals: the questions' readings and the checklists' writing."""
        return self.reader.cost

    def from_data(self, s: Sample, where: str) -> list[dict[str, Any]]:
        """A sample's own checklist (``metadata["checklist"]``), or a JudgeError naming the sample."""
        if METADATA_KEY not in s.metadata:
            raise JudgeError(
                f"{where}: judge '{self.spec.name}' reads the checklist from the data (checklist.source: data) but the "
                f"sample has no metadata.{METADATA_KEY} (pipelines: data.checklist_field; grm eval: --map checklist=COLUMN)"
            )
        assert self.spec.checklist is not None
        try:
            items = read_checklist(s.metadata[METADATA_KEY], f"{where}: metadata.{METADATA_KEY}")
            check_length(items, self.spec.checklist.max_items, self.spec.name, f"{where}: metadata.{METADATA_KEY}")
            return items
        except DataError as e:
            raise JudgeError(str(e)) from None

    def checklists(self, samples: Sequence[Sample]) -> list[Checklist]:
        if self.writer is not None:
            if not samples:
                return []
            lists = self.writer.write(self.reader.sampler.metered, samples)
            self.cost.retries += sum(r.attempt > 0 for c in lists for r in c.records)  # checklists written again
            return lists
        return [Checklist(self.from_data(s, base.item_name(s, k))) for k, s in enumerate(samples)]

    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        t0 = time.perf_counter()
        base.check_samples(self.spec, samples)
        # the writing and every question's prompt of a sample share one sample's render time
        with shared_renders(self.spec.limits, len(samples), f"a batch of {len(samples)} samples"):
            lists = self.checklists(samples)
            subs, owner = [], []
            for i, (s, c) in enumerate(zip(samples, lists, strict=True)):
                for k, item in enumerate(c.items or []):
                    subs.append(item_sample(s, k, item["question"]))
                    owner.append(i)
            readings: list[list[JudgeResult]] = [[] for _ in samples]
            for i, r in zip(owner, self.reader.score_batch(subs) if subs else [], strict=True):
                readings[i].append(r)
        return base.finish([self.fold(c, rs) for c, rs in zip(lists, readings, strict=True)], t0)

    def fold(self, checklist: Checklist, readings: Sequence[JudgeResult]) -> JudgeResult:
        """One response's result from its questions' readings (in checklist order)."""
        answers, records = [], list(checklist.records)
        for k, (item, r) in enumerate(zip(checklist.items or [], readings, strict=True)):
            answers.append({**item, "p_yes": r.score})
            for rec in r.samples:
                rec.view = k
                records.append(rec)
        score = checklist_score(answers)
        error = checklist.error
        if error is None and score is None:
            why = next((rec.error for rec in records if rec.error), "unknown")
            error = f"no checklist answer could be read ({why})"
        return JudgeResult(
            judge=self.spec.name,
            score=score,
            reward=base.normalize(self.spec, score),
            checklist=answers,
            samples=records,
            parse_failures=sum(1 for rec in records if rec.error is not None),
            truncated=max((r.truncated for r in readings), default=0),
            judge_directed=max((r.judge_directed for r in readings), default=0),
            tokens=sum(rec.tokens for rec in records),
            provenance=self.provenance(),
            error=error,
        )

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[JudgeResult | None]]:
        plan = base.alone(groups)
        return plan.regroup(self.score_batch(plan.items) if plan.items else [])

    def stages(self, sample: Sample) -> list[dict[str, Any]]:
        """The checklist writing (when the model writes it) and one judge prompt per question: a
        written checklist's questions are shown as one placeholder question."""
        sample.check_for(self.spec.mode, self.spec.reference)
        stages: list[dict[str, Any]] = []
        if self.writer is not None:
            stages.append({"stage": "checklist", "request": self.writer.request(sample)})
            questions = [PLACEHOLDER]
        else:
            questions = [item["question"] for item in self.from_data(sample, "sample")]
        for k, q in enumerate(questions):
            reader = self.reader
            for st in reader.prompts.stages(item_sample(sample, k, q), reader.mode.orders, reader.sampler.slot.loaded):
                stages.append({**st, "view": k, "question": q})
        return stages

    def provenance(self) -> dict[str, Any]:
        out = self.reader.provenance()
        out["checklist_template_sha256"] = self.writer.template.sha256 if self.writer else None
        return out
