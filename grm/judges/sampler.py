"""The critique sampler every model judge shares: render, sample critiques, parse, retry, read
log-probs, meta-rate, and keep the records.

A judge mode (``Mode``) decides only what differs: in which orders an item is shown, what one
critique means, and how an item's records combine into a ``JudgeResult``. ``score_batch`` issues as
few engine calls as it can: one for the principles of the whole batch, one for every critique of
every item in every presentation order, one per retry round for the samples that failed to parse,
and one log-prob pass for the logprob parser (and one per retry round after a critique).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from grm.config.judge import JudgeSpec
from grm.config.parsers import LogprobParser
from grm.config.paths import resolve_path
from grm.config.policy import EngineSpec, OpenAIEngineSpec
from grm.engines.base import Generation, GenerationEngine, GenerationRequest, SamplingParams
from grm.judges.base import Judge, check_samples, hash_spec, provenance, spread_seconds
from grm.judges.cost import JudgeCost, MeteredEngine
from grm.judges.errors import JudgeError
from grm.judges.guard import InputGuard, Lengths
from grm.judges.parsers import ParsedScore, Parser, build_parser, logprob_candidates, read_candidates
from grm.judges.templates import Template, load_template, render_limits
from grm.judges.types import JudgeResult, Sample, SampleRecord
from grm.judges.views import Mode, View, sampling_params

_ENGINES: dict[str, GenerationEngine] = {}


def shared_engine(model: str, spec: Any) -> GenerationEngine:
    """One engine per (model, engine spec) in this process, shared by every judge that names it."""
    key = f"{model}|{spec.model_dump_json()}"
    if key not in _ENGINES:
        from grm.engines import build_engine

        _ENGINES[key] = build_engine(spec, model)
    return _ENGINES[key]


def same_weights(a: EngineSpec, b: EngineSpec) -> bool:
    """Whether two judges naming the same model can share one engine: local engines loading it in
    the same dtype can; a server is shared only when everything about it is the same."""
    if isinstance(a, OpenAIEngineSpec) or isinstance(b, OpenAIEngineSpec):
        return a == b
    return a.type == b.type and a.dtype == b.dtype


def _sent(view: View) -> GenerationRequest:
    assert view.request is not None, "a view rebuilt from stored records is never sent"
    return view.request


class CritiqueSampler:
    """Samples, parses and records a model judge's critiques. ``engine`` defaults to a shared hf
    engine for ``spec.model``, loaded on first use."""

    def __init__(self, spec: JudgeSpec, base_dir: Path, engine: GenerationEngine | None = None) -> None:
        if spec.template is None:
            raise JudgeError(f"mode '{spec.mode}' needs template: a .j2 file")
        self.spec = spec
        self.base_dir = base_dir
        self.spec_hash = hash_spec(spec)
        self._engine = engine
        self.render_limits = render_limits(spec.limits)
        self.template: Template = self._load(spec.template)
        self.principles_template: Template | None = self._load(spec.principles.template) if spec.principles else None
        self.guard = InputGuard(spec)
        self.logprob: LogprobParser | None = spec.parser if isinstance(spec.parser, LogprobParser) else None
        self._parsers: dict[int | None, Parser] = {}
        if self.logprob is None:
            self.parser()  # a parser target that cannot be imported fails when the judge is built, not mid-batch
        self._meta: Judge | None = None
        self.cost = JudgeCost()
        """Running totals of the model calls of this judge (``grm.judges.cost``)."""

    def _load(self, ref: str) -> Template:
        try:
            return load_template(resolve_path(ref, self.base_dir, "prompts"))
        except FileNotFoundError as e:
            raise JudgeError(str(e)) from None

    @property
    def engine(self) -> GenerationEngine:
        if self._engine is None:
            self._engine = shared_engine(self.spec.model or "", self.spec.engine)
        return self._engine

    @property
    def metered(self) -> MeteredEngine:
        """The engine, counting every call into ``cost``: what the sampler sends its requests to."""
        return MeteredEngine(self.engine, self.cost)

    def parser(self, expected: int | None = None) -> Parser:
        """The text parser for outputs holding ``expected`` scores (listwise), or any number (None)."""
        if expected not in self._parsers:
            self._parsers[expected] = build_parser(
                self.spec.parser, expected=expected, regex_timeout_s=self.spec.limits.regex_timeout_s
            )
        return self._parsers[expected]

    def provenance(self) -> dict[str, Any]:
        return provenance(self.spec, self.spec_hash, self.template, self.principles_template, self._engine)

    # ------------------------------------------------------------------ rendering
    def _variables(self, s: Sample, order: list[int] | None, principles: str | None) -> dict[str, Any]:
        responses = [s.responses[i] for i in order] if s.responses is not None and order is not None else s.responses
        return {
            "prompt": s.prompt,
            "messages": s.messages or [{"role": "user", "content": s.prompt}],
            "response": s.response,
            "responses": responses,
            "reference": s.reference,
            "principles": principles,
            "metadata": s.metadata,
            "critique": s.critique,
            "question": s.metadata.get("question"),  # a checklist judge's item (grm.judges.checklist)
        }

    def _request(self, user: str) -> GenerationRequest:
        prefill = self.spec.prefill or ""
        if not self.spec.chat:
            system = f"{self.spec.system}\n\n" if self.spec.system else ""
            return GenerationRequest(text=system + user + prefill)
        msgs = [{"role": "system", "content": self.spec.system}] if self.spec.system else []
        msgs.append({"role": "user", "content": user})
        if prefill:
            msgs.append({"role": "assistant", "content": prefill})
        return GenerationRequest(messages=msgs, continue_final=bool(prefill))

    def _principles_request(self, s: Sample) -> GenerationRequest:
        assert self.principles_template is not None
        text = self.principles_template.render(limits=self.render_limits, **self._variables(s, None, None))
        msgs = [{"role": "system", "content": self.spec.system}] if self.spec.system else []
        return GenerationRequest(messages=msgs + [{"role": "user", "content": text}])

    def views(self, samples: Sequence[Sample], principles: Sequence[str | None], mode: Mode) -> list[View]:
        """Every presentation of every item, its responses guarded (``grm.judges.guard``). Lengths are
        judge tokens when the engine is loaded and can count them (``render`` before any scoring
        counts characters)."""
        out = []
        lengths = Lengths(self._engine, self.spec.guard)
        for i, (s, p) in enumerate(zip(samples, principles, strict=True)):
            key = s.id or hashlib.sha256(f"{s.prompt}\x00{s.response}\x00{s.responses}".encode()).hexdigest()[:12]

            def prompt_tokens(bare: Sample, note: str, p: str | None = p) -> int:
                return lengths.prompt(
                    self._request(note + self.template.render(limits=self.render_limits, **self._variables(bare, None, p)))
                )

            shown = self.guard.apply(s, key, lengths, prompt_tokens)
            for v, (order, n) in enumerate(mode.orders(s, key)):
                user = shown.note + self.template.render(limits=self.render_limits, **self._variables(shown.sample, order, p))
                out.append(
                    View(
                        item=i,
                        view=v,
                        order=order,
                        n=n,
                        request=self._request(user),
                        truncated=shown.truncated,
                        judge_directed=shown.judge_directed,
                    )
                )
        return out

    def render(self, sample: Sample, mode: Mode) -> list[dict[str, Any]]:
        """Every prompt the judge would send for ``sample`` (principles stage shown with a placeholder)."""
        sample.check_for(self.spec.mode, self.spec.reference)
        stages: list[dict[str, Any]] = []
        placeholder = None
        if self.principles_template is not None:
            stages.append({"stage": "principles", "request": self._principles_request(sample)})
            placeholder = "<principles generated by the principles stage>"
        for v in self.views([sample], [placeholder], mode):
            stages.append({"stage": "judge", "view": v.view, "order": v.order, "n": v.n, "request": v.request})
        return stages

    # ------------------------------------------------------------------ scoring
    def score_batch(self, samples: Sequence[Sample], mode: Mode) -> list[JudgeResult]:
        t0 = time.perf_counter()
        check_samples(self.spec, samples)
        # Critique-then-score and retries prefill the same judge prompts again; an engine that can
        # keep their keys/values (hf) computes only the new tokens the second time. A judge that
        # never prefills a prompt twice keeps none (each kept prompt is a copy of its keys/values).
        keep_prompts = getattr(self.engine, "prompt_cache", None) if self.prefills_again else None
        with keep_prompts() if keep_prompts is not None else nullcontext():
            results = self._score_batch(samples, mode)
        return spread_seconds(results, t0)

    @property
    def prefills_again(self) -> bool:
        """Whether a batch may prefill a judge prompt a second time: a log-prob reading after the
        critique or on the bare prompt, a retried critique, or a meta-judge's rating."""
        return self.logprob is not None or self.spec.on_failure.retries > 0 or self.spec.aggregate.type == "meta"

    def _score_batch(self, samples: Sequence[Sample], mode: Mode) -> list[JudgeResult]:
        tokens = [0] * len(samples)
        principles: list[str | None] = [None] * len(samples)
        if self.spec.principles is not None:
            requests = [self._principles_request(s) for s in samples]
            # One set per item, shared by all its critiques (PrinciplesSpec refuses n > 1): with n
            # generations per request, reading them as one per item indexed past the batch.
            gens = self.metered.generate(requests, sampling_params(self.spec.principles.sampling, n=1))
            principles = [g.text.strip() for g in gens]
            for i, g in enumerate(gens):
                tokens[i] += g.n_tokens

        views = self.views(samples, principles, mode)
        if self.logprob is None or self.logprob.critique:
            self._critiques(views, tokens, mode)
        else:  # the score is read right after the prompt: one empty critique per view
            for v in views:
                v.records.append(
                    SampleRecord(view=v.view, order=v.order, index=0, attempt=0, text="", parsed=None, error=None, tokens=0)
                )
        if self.logprob is not None:
            self._read_logprobs([(v, r) for v in views for r in v.records], self.logprob, mode)
        if self.logprob is None or self.logprob.critique:
            # Without a critique a reading is one deterministic pass over the same prompt: a retry
            # would read the same log-probs again, so only critiques are re-sampled.
            self._retry(views, tokens, mode)
        if self.spec.aggregate.type == "meta":
            self._meta_rate(samples, views, tokens)

        by_item: list[list[View]] = [[] for _ in samples]
        for v in views:
            by_item[v.item].append(v)
        results = []
        for i, s in enumerate(samples):
            res = mode.combine(by_item[i], len(s.responses or []))
            recs = [r for v in by_item[i] for r in v.records]
            res.principles = principles[i]
            res.samples = recs
            res.parse_failures = sum(1 for r in recs if r.error is not None)
            res.truncated = max((v.truncated for v in by_item[i]), default=0)
            res.judge_directed = max((v.judge_directed for v in by_item[i]), default=0)
            res.tokens = tokens[i]
            res.provenance = self.provenance()
            results.append(res)
        return results

    def _parse(self, mode: Mode, order: list[int], text: str) -> ParsedScore:
        return mode.parse(order, (self.spec.prefill or "") + text)

    def _record(self, view: View, j: int, attempt: int, g: Generation, mode: Mode) -> SampleRecord:
        parsed = self._parse(mode, view.order, g.text) if self.logprob is None else ParsedScore(None)
        return SampleRecord(
            view=view.view,
            order=view.order,
            index=j,
            attempt=attempt,
            text=g.text,
            parsed=parsed.value,
            error=parsed.error,
            tokens=g.n_tokens,
            finish_reason=g.finish_reason,
        )

    def _sampling(self, sp: SamplingParams) -> SamplingParams:
        """``sp`` with the critique ending at its score when the spec asks (``sampling.stop_at_score``)."""
        return sp.replace(stop_when=self.score_settled) if self.spec.sampling.stop_at_score else sp

    def score_settled(self, text: str) -> bool:
        """Whether the parser reads a score from critique ``text`` (after the prefill) that its last
        two characters did not change: a number or verdict is complete once text follows it."""
        prefill = self.spec.prefill or ""
        now = self.parser()(prefill + text).value
        return now is not None and len(text) > 2 and self.parser()(prefill + text[:-2]).value == now

    def _critiques(self, views: list[View], tokens: list[int], mode: Mode) -> None:
        """All critiques of the batch: one generate call per distinct n (usually one)."""
        for n in sorted({v.n for v in views}):
            group = [v for v in views if v.n == n]
            gens = self.metered.generate([_sent(v) for v in group], self._sampling(sampling_params(self.spec.sampling, n=n)))
            for v_idx, v in enumerate(group):
                for j in range(n):
                    g = gens[v_idx * n + j]
                    tokens[v.item] += g.n_tokens
                    v.records.append(self._record(v, j, 0, g, mode))

    def _retry(self, views: list[View], tokens: list[int], mode: Mode) -> None:
        """Re-sample failed parses with fresh seeds, all failures of a round in one call. With the
        logprob parser a failure is a critique after which a candidate could not be read: the new
        critique is read again (one log-prob pass per round)."""
        s = self.spec.sampling
        for attempt in range(1, self.spec.on_failure.retries + 1):
            # Only the latest attempt of a slot is retried; earlier failures stay on record.
            failed = [(v, r.index) for v in views for r in v.records if r.parsed is None and r.attempt == attempt - 1]
            if not failed:
                return
            reqs = []
            for v, index in failed:
                base = _sent(v)
                seed = s.seed + 7919 * attempt + 104729 * index
                reqs.append(
                    GenerationRequest(messages=base.messages, text=base.text, continue_final=base.continue_final, seed=seed)
                )
            sp = self._sampling(
                sampling_params(s, n=1).replace(temperature=max(s.temperature, self.spec.on_failure.retry_temperature))
            )
            gens = self.metered.generate(reqs, sp)
            self.cost.retries += len(gens)
            fresh = []
            for (v, index), g in zip(failed, gens, strict=True):
                tokens[v.item] += g.n_tokens
                fresh.append((v, self._record(v, index, attempt, g, mode)))
                v.records.append(fresh[-1][1])
            if self.logprob is not None:
                self._read_logprobs(fresh, self.logprob, mode)

    def _read_logprobs(self, slots: list[tuple[View, SampleRecord]], spec: LogprobParser, mode: Mode) -> None:
        """Each record's score read off the candidates' log-probs after its critique, in one pass."""
        prefix, cands, values = logprob_candidates(spec, self.spec.mode, getattr(self.engine, "tokenize", None))
        requests = []
        for v, r in slots:
            base = _sent(v)
            if base.messages is not None:
                msgs = [dict(m) for m in base.messages]
                tail = r.text + prefix
                if base.continue_final:
                    msgs[-1]["content"] += tail
                else:
                    msgs.append({"role": "assistant", "content": tail})
                requests.append(GenerationRequest(messages=msgs, continue_final=True))
            else:
                requests.append(GenerationRequest(text=(base.text or "") + r.text + prefix))
        scored = self.metered.score_continuations(requests, [cands] * len(requests))
        for (_, r), lps in zip(slots, scored, strict=True):
            r.candidate_logprobs = dict(zip(cands, lps, strict=True))
            read = read_candidates(mode.from_logprobs, r.candidate_logprobs, values)
            r.parsed, r.error = read.value, read.error

    def _meta_rate(self, samples: Sequence[Sample], views: list[View], tokens: list[int]) -> None:
        if self._meta is None:
            from grm.config import load_judge
            from grm.judges.runtime import build_judge  # runtime imports the mode classes, which import this module

            spec = load_judge(self.spec.aggregate.meta_judge or "", self.base_dir)
            engine = self._engine if spec.model == self.spec.model and same_weights(spec.engine, self.spec.engine) else None
            self._meta = build_judge(spec, self.base_dir, engine)
        slots = [(v, r) for v in views for r in v.records if r.parsed is not None]
        metas = []
        for v, r in slots:
            s = samples[v.item]
            shown = [s.responses[i] for i in v.order] if s.responses else None
            response = s.response if s.response is not None else "\n\n".join(shown or [])
            metas.append(
                Sample(
                    prompt=s.prompt,
                    messages=s.messages,
                    response=response,
                    reference=s.reference,
                    critique=(self.spec.prefill or "") + r.text,
                    metadata=s.metadata,
                )
            )
        if not metas:
            return
        before = self._meta.cost.copy()
        rated = self._meta.score_batch(metas)
        self.cost.add(self._meta.cost.since(before))  # the meta judge's calls are this judge's cost
        for (v, r), res in zip(slots, rated, strict=True):
            r.meta_rating = res.score
            tokens[v.item] += res.tokens

    # ------------------------------------------------------------------ rescoring
    def rescore(self, stored: dict[str, Any], n_responses: int, mode: Mode) -> JudgeResult:
        """Re-parse and re-aggregate a stored result (``JudgeResult.to_dict()``) without generating.

        Text parsers re-read every stored critique; the logprob parser recomputes from the stored
        candidate log-probabilities. Meta ratings are reused as stored.
        """
        views: dict[int, View] = {}
        for d in stored.get("samples", []):
            rec = SampleRecord(**{k: d.get(k) for k in SampleRecord.__dataclass_fields__})
            v = views.setdefault(rec.view, View(item=0, view=rec.view, order=list(rec.order), n=0))
            if self.logprob is not None:
                if not rec.candidate_logprobs:
                    raise JudgeError("stored result has no candidate log-probs; it was not produced by a logprob parser")
                _, _, values = logprob_candidates(self.logprob, self.spec.mode)
                if len(values) != len(rec.candidate_logprobs):
                    raise JudgeError("the logprob parser's candidates differ from the stored ones")
                read = read_candidates(mode.from_logprobs, rec.candidate_logprobs, values)
                rec.parsed, rec.error = read.value, read.error
            else:
                parsed = self._parse(mode, v.order, rec.text)
                rec.parsed, rec.error = parsed.value, parsed.error
            v.records.append(rec)
        item_views = [views[k] for k in sorted(views)]
        res = mode.combine(item_views, n_responses)
        recs = [r for v in item_views for r in v.records]
        res.samples = recs
        res.parse_failures = sum(1 for r in recs if r.error is not None)
        res.principles = stored.get("principles")
        res.tokens = stored.get("tokens", 0)
        res.seconds = stored.get("seconds", 0.0)
        res.provenance = {**stored.get("provenance", {}), **self.provenance(), "rescored": True}
        return res
