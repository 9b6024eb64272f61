"""The critique sampler every model judge shares: it turns a batch's requests into critique
records: the principles stage's text, every critique of every view, retries of the ones that did not
parse, and the logprob parser's readings.

The judge mode decides only what one critique means (``Mode.parse``, ``Mode.from_logprobs``); the
judge renders the views (``grm.judges.prompts``) and combines the records. ``sample`` issues as few
engine calls as it can: one for every critique of every item in every presentation order, one per
retry round for the samples that failed to parse, and one log-prob pass for the logprob parser (and
one per retry round after a critique).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from grm.config.judge import JudgeSpec
from grm.config.parsers import LogprobParser
from grm.engines.base import Generation, GenerationEngine, GenerationRequest, SamplingParams
from grm.judges.cost import JudgeCost, MeteredEngine
from grm.judges.engine_slot import EngineSlot
from grm.judges.parsers import JudgeParsers, ParsedScore, logprob_candidates, read_candidates
from grm.judges.types import SampleRecord
from grm.judges.views import Mode, View, sampling_params

MORE_SEED = 15_485_863
"""Added to ``sampling.seed`` for adaptive votes' second-round critiques (a prime, apart from the
retries' offsets)."""


def _sent(view: View) -> GenerationRequest:
    assert view.request is not None, "a view rebuilt from stored records is never sent"
    return view.request


class CritiqueSampler:
    """Samples, parses and records a model judge's critiques on the engine in ``slot``, counting
    every call into ``cost``."""

    def __init__(self, spec: JudgeSpec, slot: EngineSlot, parsers: JudgeParsers, cost: JudgeCost) -> None:
        self.spec = spec
        self.slot = slot
        self.parsers = parsers
        self.cost = cost
        self.logprob: LogprobParser | None = spec.parser if isinstance(spec.parser, LogprobParser) else None

    @property
    def engine(self) -> GenerationEngine:
        return self.slot.engine

    @property
    def metered(self) -> MeteredEngine:
        """The engine, counting every call into ``cost``: what the sampler sends its requests to."""
        return MeteredEngine(self.engine, self.cost)

    @contextmanager
    def keeping_prompts(self) -> Iterator[None]:
        """Critique-then-score and retries prefill the same judge prompts again; an engine that can
        keep their keys/values (hf) computes only the new tokens the second time. A judge that never
        prefills a prompt twice keeps none (each kept prompt is a copy of its keys/values)."""
        keep = getattr(self.engine, "prompt_cache", None) if self.prefills_again else None
        if keep is None:
            yield
            return
        with keep():
            yield

    @property
    def prefills_again(self) -> bool:
        """Whether a batch may prefill a judge prompt a second time: a log-prob reading after the
        critique or on the bare prompt, a retried critique, or a meta-judge's rating."""
        return self.logprob is not None or self.spec.on_failure.retries > 0 or self.spec.aggregate.type == "meta"

    def principles(self, requests: Sequence[GenerationRequest], tokens: list[int]) -> list[str]:
        """The principles stage's text for each item, in one call."""
        assert self.spec.principles is not None
        # One set per item, shared by all its critiques (PrinciplesSpec refuses n > 1): with n
        # generations per request, reading them as one per item indexed past the batch.
        gens = self.metered.generate(list(requests), sampling_params(self.spec.principles.sampling, n=1))
        for i, g in enumerate(gens):
            tokens[i] += g.n_tokens
        return [g.text.strip() for g in gens]

    def sample(self, views: list[View], tokens: list[int], mode: Mode) -> None:
        """Every view's records: its critiques (or, for a bare log-prob reading, one empty critique),
        the log-prob readings, and retries of what did not parse. ``tokens[item]`` counts what was generated."""
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

    def more(self, views: list[View], start: int, tokens: list[int], mode: Mode) -> None:
        """Adaptive votes' second round: critiques ``start`` to ``v.n - 1`` of each view (its first
        ``start`` are on record), read and retried like the first. They are sampled under their own
        seed (``sampling.seed`` + ``MORE_SEED``), so they never repeat a first-round critique."""
        fresh = self._critiques(views, tokens, mode, start, self.spec.sampling.seed + MORE_SEED)
        if self.logprob is not None:
            self._read_logprobs(fresh, self.logprob, mode)
        self._retry(views, tokens, mode, start=start)

    def parse(self, mode: Mode, order: list[int], text: str) -> ParsedScore:
        """What one critique says (the prefill put back in front)."""
        return mode.parse(order, (self.spec.prefill or "") + text)

    def _record(self, view: View, j: int, attempt: int, g: Generation, mode: Mode) -> SampleRecord:
        parsed = self.parse(mode, view.order, g.text) if self.logprob is None else ParsedScore(None)
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
        parse = self.parsers.get()
        now = parse(prefill + text).value
        return now is not None and len(text) > 2 and parse(prefill + text[:-2]).value == now

    def _critiques(
        self, views: list[View], tokens: list[int], mode: Mode, start: int = 0, seed: int | None = None
    ) -> list[tuple[View, SampleRecord]]:
        """Critiques ``start`` to ``v.n - 1`` of every view, one generate call per distinct count
        (usually one), under ``seed`` when given (else each view's own); the new records."""
        fresh: list[tuple[View, SampleRecord]] = []
        for n in sorted({v.n - start for v in views}):
            group = [v for v in views if v.n - start == n]
            reqs = [_sent(v) if seed is None else replace(_sent(v), seed=seed) for v in group]
            gens = self.metered.generate(reqs, self._sampling(sampling_params(self.spec.sampling, n=n)))
            for v_idx, v in enumerate(group):
                for j in range(n):
                    g = gens[v_idx * n + j]
                    tokens[v.item] += g.n_tokens
                    v.records.append(self._record(v, start + j, 0, g, mode))
                    fresh.append((v, v.records[-1]))
        return fresh

    def _retry(self, views: list[View], tokens: list[int], mode: Mode, start: int = 0) -> None:
        """Re-sample failed parses with fresh seeds, all failures of a round in one call. With the
        logprob parser a failure is a critique after which a candidate could not be read: the new
        critique is read again (one log-prob pass per round). Only slots ``start`` and later: the
        earlier ones had their retries."""
        s = self.spec.sampling
        for attempt in range(1, self.spec.on_failure.retries + 1):
            # Only the latest attempt of a slot is retried; earlier failures stay on record.
            failed = [
                (v, r.index)
                for v in views
                for r in v.records
                if r.parsed is None and r.attempt == attempt - 1 and r.index >= start
            ]
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
