"""The judge runtime: render, sample critiques, parse, retry, vote, combine orders.

``Judge.score_batch(samples)`` issues as few engine calls as it can: one for the principles of
the whole batch, one for every critique of every item in every presentation order, one per retry
round for the samples that failed to parse, and one log-prob pass for the logprob parser.
"""

from __future__ import annotations

import hashlib
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from grm.config.judge import JudgeSpec, LogprobParser
from grm.config.paths import resolve_judge, resolve_path
from grm.engines.base import Generation, GenerationEngine, GenerationRequest, SamplingParams
from grm.judges import aggregate as agg
from grm.judges.errors import JudgeError
from grm.judges.parsers import ParsedScore, build_parser, expected_value, logprob_candidates
from grm.judges.templates import Template, load_template
from grm.judges.types import JudgeResult, Sample, SampleRecord
from grm.judges.verifiers import check

_ENGINES: dict[str, GenerationEngine] = {}


def shared_engine(model: str, spec: Any) -> GenerationEngine:
    """One engine per (model, engine spec) in this process, shared by every judge that names it."""
    key = f"{model}|{spec.model_dump_json()}"
    if key not in _ENGINES:
        from grm.engines import build_engine

        _ENGINES[key] = build_engine(spec, model)
    return _ENGINES[key]


@dataclass
class View:
    """One presentation of one item to the judge: which responses, in which order."""

    item: int
    view: int
    order: list[int]
    request: GenerationRequest
    n: int


class Judge:
    """A judge built from a spec. ``engine`` defaults to a shared hf engine for ``spec.model``."""

    def __init__(self, spec: JudgeSpec, base_dir: Path | str | None = None, engine: GenerationEngine | None = None) -> None:
        self.spec = spec
        self.base_dir = Path(base_dir) if base_dir else Path.cwd()
        self._engine = engine
        self.template: Template | None = self._template(spec.template) if spec.template else None
        self.principles_template: Template | None = (
            self._template(spec.principles.template) if spec.principles else None
        )
        self.is_logprob = isinstance(spec.parser, LogprobParser)
        self.parser = None if spec.mode == "rule" or self.is_logprob else build_parser(spec.parser, expected=None)
        self._meta: Judge | None = None
        self.spec_hash = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:16]

    def _template(self, ref: str) -> Template:
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
    def name(self) -> str:
        return self.spec.name

    # ------------------------------------------------------------------ rendering
    def _variables(self, s: Sample, order: list[int] | None, principles: str | None) -> dict[str, Any]:
        responses = [s.responses[i] for i in order] if s.responses is not None and order is not None else s.responses
        return {
            "prompt": s.prompt, "messages": s.messages or [{"role": "user", "content": s.prompt}],
            "response": s.response, "responses": responses, "reference": s.reference,
            "principles": principles, "metadata": s.metadata, "critique": s.critique,
        }

    def _request(self, user: str, extra_assistant: str = "") -> GenerationRequest:
        prefill = (self.spec.prefill or "") + extra_assistant
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
        text = self.principles_template.render(**self._variables(s, None, None))
        msgs = [{"role": "system", "content": self.spec.system}] if self.spec.system else []
        return GenerationRequest(messages=msgs + [{"role": "user", "content": text}])

    def _orders(self, s: Sample, item_key: str) -> list[tuple[list[int], int]]:
        """(order, n) per view of an item."""
        n = self.spec.sampling.n
        if self.spec.mode == "pairwise":
            return [([0, 1], n), ([1, 0], n)] if self.spec.position.swap else [([0, 1], n)]
        if self.spec.mode == "listwise":
            k = len(s.responses or [])
            if not self.spec.position.shuffle:
                return [(list(range(k)), n)]
            out = []
            for j in range(n):
                perm = list(range(k))
                random.Random(f"{self.spec.sampling.seed}:{item_key}:{j}").shuffle(perm)
                out.append((perm, 1))
            return out
        return [([0], n)]

    def views(self, samples: Sequence[Sample], principles: Sequence[str | None]) -> list[View]:
        out = []
        for i, (s, p) in enumerate(zip(samples, principles)):
            key = s.id or hashlib.sha256(f"{s.prompt}\x00{s.response}\x00{s.responses}".encode()).hexdigest()[:12]
            for v, (order, n) in enumerate(self._orders(s, key)):
                assert self.template is not None
                user = self.template.render(**self._variables(s, order, p))
                out.append(View(item=i, view=v, order=order, request=self._request(user), n=n))
        return out

    def render(self, sample: Sample) -> list[dict[str, Any]]:
        """Every prompt the judge would send for ``sample`` (principles stage shown with a placeholder)."""
        sample.check_for(self.spec.mode, self.spec.reference)
        if self.spec.mode == "rule":
            return []
        stages = []
        placeholder = None
        if self.principles_template is not None:
            req = self._principles_request(sample)
            stages.append({"stage": "principles", "request": req})
            placeholder = "<principles generated by the principles stage>"
        for v in self.views([sample], [placeholder]):
            stages.append({"stage": "judge", "view": v.view, "order": v.order, "n": v.n, "request": v.request})
        return stages

    # ------------------------------------------------------------------ scoring
    def score(self, sample: Sample) -> JudgeResult:
        return self.score_batch([sample])[0]

    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        t0 = time.perf_counter()
        for k, s in enumerate(samples):
            s.check_for(self.spec.mode, self.spec.reference, where=f"item {s.id if s.id is not None else k}")
        if self.spec.mode == "rule":
            return self._verify(samples, t0)
        # Critique-then-score and retries prefill the same judge prompts again; an engine that can
        # keep their keys/values (hf) computes only the new tokens the second time.
        keep_prompts = getattr(self.engine, "prompt_cache", None)
        with keep_prompts() if keep_prompts is not None else nullcontext():
            results = self._score_batch(samples)
        elapsed = time.perf_counter() - t0
        for res in results:
            res.seconds = elapsed / len(samples)
        return results

    def _score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        tokens = [0] * len(samples)

        principles: list[str | None] = [None] * len(samples)
        if self.spec.principles is not None:
            ps = self.spec.principles.sampling
            gens = self.engine.generate([self._principles_request(s) for s in samples], self._sampling(ps, ps.seed))
            principles = [g.text.strip() for g in gens]
            for i, g in enumerate(gens):
                tokens[i] += g.n_tokens

        views = self.views(samples, principles)
        records: dict[tuple[int, int], list[SampleRecord]] = {}
        for vi, v in enumerate(views):
            records[(v.item, v.view)] = []

        # All critiques of the batch: one generate call per distinct n (usually one).
        if not (self.is_logprob and not self.spec.parser.critique):  # type: ignore[union-attr]
            for n in sorted({v.n for v in views}):
                group = [v for v in views if v.n == n]
                gens = self.engine.generate([v.request for v in group], self._sampling(self.spec.sampling, self.spec.sampling.seed, n=n))
                for v_idx, v in enumerate(group):
                    for j in range(n):
                        g = gens[v_idx * n + j]
                        tokens[v.item] += g.n_tokens
                        records[(v.item, v.view)].append(self._record(v, j, 0, g))
        else:
            for v in views:
                records[(v.item, v.view)] = [SampleRecord(view=v.view, order=v.order, index=0, attempt=0, text="",
                                                          parsed=None, error=None, tokens=0)]

        if self.is_logprob:
            self._read_logprobs(views, records)
        else:
            self._retry(views, records, tokens)

        if self.spec.aggregate.type == "meta":
            self._meta_rate(samples, views, records, tokens)

        results = []
        for i, s in enumerate(samples):
            item_views = [v for v in views if v.item == i]
            recs = [r for v in item_views for r in records[(i, v.view)]]
            res = self._combine(item_views, records, len(s.responses or []))
            res.principles = principles[i]
            res.samples = recs
            res.parse_failures = sum(1 for r in recs if r.error is not None)
            res.tokens = tokens[i]
            res.provenance = self.provenance()
            results.append(res)
        return results

    def provenance(self) -> dict[str, Any]:
        return {
            "judge": self.spec.name, "spec_sha256": self.spec_hash, "mode": self.spec.mode,
            "template_sha256": self.template.sha256 if self.template else None,
            "principles_template_sha256": self.principles_template.sha256 if self.principles_template else None,
            "model": self.spec.model, "seed": self.spec.sampling.seed,
            "engine_version": getattr(self._engine, "version", None) if self._engine else None,
        }

    @staticmethod
    def _sampling(s: Any, seed: int, n: int | None = None, stop_extra: Sequence[str] = ()) -> SamplingParams:
        return SamplingParams(n=n or s.n, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                              max_new_tokens=s.max_new_tokens, stop=tuple(s.stop) + tuple(stop_extra), seed=seed)

    def _parse(self, view: View, text: str) -> ParsedScore:
        assert self.parser is not None
        full = (self.spec.prefill or "") + text
        if self.spec.mode == "listwise":
            parsed = build_parser(self.spec.parser, expected=len(view.order))(full)
        else:
            parsed = self.parser(full)
        if self.spec.mode == "pairwise" and isinstance(parsed.value, str):
            # A verdict names a position; keep it as the margin for the response shown first.
            margin = {"A": 1.0, "B": -1.0, "tie": 0.0}.get(parsed.value)
            parsed = ParsedScore(margin, None if margin is not None else f"unknown verdict {parsed.value!r}")
        if self.spec.mode == "pointwise" and isinstance(parsed.value, list):
            parsed = ParsedScore(parsed.value[0]) if len(parsed.value) == 1 else ParsedScore(None, f"expected one score, found {parsed.value}")
        return parsed

    def _record(self, view: View, j: int, attempt: int, g: Generation) -> SampleRecord:
        parsed = self._parse(view, g.text) if not self.is_logprob else ParsedScore(None)
        return SampleRecord(view=view.view, order=view.order, index=j, attempt=attempt, text=g.text,
                            parsed=parsed.value, error=parsed.error, tokens=g.n_tokens,
                            finish_reason=g.finish_reason)

    def _retry(self, views: list[View], records: dict[tuple[int, int], list[SampleRecord]], tokens: list[int]) -> None:
        """Re-sample failed parses with fresh seeds, all failures of a round in one call."""
        by_key = {(v.item, v.view): v for v in views}
        for attempt in range(1, self.spec.on_failure.retries + 1):
            failed = [(key, k) for key, recs in records.items() for k, r in enumerate(recs) if r.parsed is None and r.attempt == attempt - 1]
            # Only the latest attempt of a slot is retried; earlier failures stay on record.
            if not failed:
                return
            s = self.spec.sampling
            reqs = []
            for key, k in failed:
                base = by_key[key].request
                seed = s.seed + 7919 * attempt + 104729 * records[key][k].index
                reqs.append(GenerationRequest(messages=base.messages, text=base.text, continue_final=base.continue_final, seed=seed))
            sp = self._sampling(s, s.seed, n=1).replace(temperature=max(s.temperature, self.spec.on_failure.retry_temperature))
            gens = self.engine.generate(reqs, sp)
            for (key, k), g in zip(failed, gens):
                v = by_key[key]
                tokens[v.item] += g.n_tokens
                rec = self._record(v, records[key][k].index, attempt, g)
                records[key].append(rec)

    def _read_logprobs(self, views: list[View], records: dict[tuple[int, int], list[SampleRecord]]) -> None:
        spec: LogprobParser = self.spec.parser  # type: ignore[assignment]
        prefix, cands, values = logprob_candidates(spec, self.spec.mode, getattr(self.engine, "tokenize", None))
        slots = [(v, r) for v in views for r in records[(v.item, v.view)]]
        user_msgs = []
        for v, r in slots:
            base = v.request
            if base.messages is not None:
                msgs = [dict(m) for m in base.messages]
                tail = r.text + prefix
                if base.continue_final:
                    msgs[-1]["content"] += tail
                else:
                    msgs.append({"role": "assistant", "content": tail})
                user_msgs.append(GenerationRequest(messages=msgs, continue_final=True))
            else:
                user_msgs.append(GenerationRequest(text=(base.text or "") + r.text + prefix))
        scored = self.engine.score_continuations(user_msgs, [cands] * len(user_msgs))
        for (v, r), lps in zip(slots, scored):
            r.candidate_logprobs = dict(zip(cands, lps))
            if self.spec.mode == "pairwise":
                r.parsed = lps[0] - lps[1]  # log-odds of A over B
            else:
                r.parsed = expected_value(lps, values)
            r.error = None

    def _meta_rate(self, samples: Sequence[Sample], views: list[View], records: dict[tuple[int, int], list[SampleRecord]], tokens: list[int]) -> None:
        if self._meta is None:
            from grm.config import load_judge

            spec = load_judge(self.spec.aggregate.meta_judge or "", self.base_dir)
            engine = self._engine if spec.model == self.spec.model and spec.engine.dtype == self.spec.engine.dtype else None
            self._meta = Judge(spec, self.base_dir, engine)
        slots = [(v, r) for v in views for r in records[(v.item, v.view)] if r.parsed is not None]
        metas = []
        for v, r in slots:
            s = samples[v.item]
            shown = [s.responses[i] for i in v.order] if s.responses else None
            metas.append(Sample(prompt=s.prompt, messages=s.messages, response=s.response if s.response is not None else "\n\n".join(shown or []),
                                reference=s.reference, critique=(self.spec.prefill or "") + r.text, metadata=s.metadata))
        if not metas:
            return
        for (v, r), res in zip(slots, self._meta.score_batch(metas)):
            r.meta_rating = res.score
            tokens[v.item] += res.tokens

    # ------------------------------------------------------------------ rescoring
    def rescore(self, stored: dict[str, Any], n_responses: int) -> JudgeResult:
        """Re-parse and re-aggregate a stored result (``JudgeResult.to_dict()``) without generating.

        Text parsers re-read every stored critique; the logprob parser recomputes from the stored
        candidate log-probabilities. Meta ratings are reused as stored.
        """
        if self.spec.mode == "rule":
            raise JudgeError("rule verifiers keep no raw output to rescore; re-run them instead")
        records: dict[tuple[int, int], list[SampleRecord]] = {}
        views: dict[int, View] = {}
        for d in stored.get("samples", []):
            rec = SampleRecord(**{k: d.get(k) for k in SampleRecord.__dataclass_fields__})
            v = views.setdefault(rec.view, View(item=0, view=rec.view, order=list(rec.order), request=None, n=0))  # type: ignore[arg-type]
            if self.is_logprob:
                if not rec.candidate_logprobs:
                    raise JudgeError("stored result has no candidate log-probs; it was not produced by a logprob parser")
                lps = list(rec.candidate_logprobs.values())
                _, _, values = logprob_candidates(self.spec.parser, self.spec.mode)  # type: ignore[arg-type]
                if len(values) != len(lps):
                    raise JudgeError("the logprob parser's candidates differ from the stored ones")
                rec.parsed = lps[0] - lps[1] if self.spec.mode == "pairwise" else expected_value(lps, values)
                rec.error = None
            else:
                parsed = self._parse(v, rec.text)
                rec.parsed, rec.error = parsed.value, parsed.error
            records.setdefault((0, rec.view), []).append(rec)
        item_views = [views[k] for k in sorted(views)]
        res = self._combine(item_views, records, n_responses)
        recs = [r for k in sorted(records) for r in records[k]]
        res.samples = recs
        res.parse_failures = sum(1 for r in recs if r.error is not None)
        res.principles = stored.get("principles")
        res.tokens = stored.get("tokens", 0)
        res.seconds = stored.get("seconds", 0.0)
        res.provenance = {**stored.get("provenance", {}), **self.provenance(), "rescored": True}
        return res

    # ------------------------------------------------------------------ combination
    def _final(self, recs: list[SampleRecord]) -> list[SampleRecord]:
        """The record that counts for each sample slot: its last attempt."""
        last: dict[int, SampleRecord] = {}
        for r in recs:
            if r.index not in last or r.attempt >= last[r.index].attempt:
                last[r.index] = r
        return [last[k] for k in sorted(last)]

    def _vote(self, recs: list[SampleRecord]) -> float | None:
        a = self.spec.aggregate
        vals = [r.parsed for r in recs]
        if a.type == "meta":
            return agg.top_k_mean(vals, [r.meta_rating for r in recs], a.top_k)  # type: ignore[arg-type]
        return agg.AGGREGATORS[a.type](vals)  # type: ignore[arg-type]

    def _combine(self, item_views: list[View], records: dict[tuple[int, int], list[SampleRecord]], k: int) -> JudgeResult:
        res = JudgeResult(judge=self.spec.name)
        if self.spec.mode == "pointwise":
            res.score = self._vote(self._final(records[(item_views[0].item, 0)]))
            res.reward = self.normalize(res.score)
        elif self.spec.mode == "pairwise":
            margins = []
            for v in item_views:
                m = self._vote(self._final(records[(v.item, v.view)]))
                margins.append(None if m is None else (m if v.order == [0, 1] else -m))
            res.view_margins = margins
            if len(margins) == 2:
                verdict, margin, agree = agg.combine_swap(margins[0], margins[1], combine=self.spec.position.combine,
                                                          on_inconsistent=self.spec.position.on_inconsistent)
                res.positional_agreement = agree
            else:
                margin = margins[0]
                verdict = agg.verdict_of(margin)
            res.verdict, res.margin = verdict, margin
            res.score = None if verdict is None else {"1": 1.0, "2": 0.0, "tie": 0.5}[verdict]
            res.reward = res.score
        else:  # listwise: map every sample's scores back to the original response order
            per_sample: list[list[float] | None] = []
            ratings: list[float | None] = []
            for v in item_views:
                for r in self._final(records[(v.item, v.view)]):
                    if isinstance(r.parsed, list):
                        back = [0.0] * k
                        for pos, orig in enumerate(v.order):
                            back[orig] = r.parsed[pos]
                        per_sample.append(back)
                    else:
                        per_sample.append(None)
                    ratings.append(r.meta_rating)
            if self.spec.aggregate.type == "meta":
                keep = sorted((i for i, p in enumerate(per_sample) if p is not None),
                              key=lambda i: -(ratings[i] if ratings[i] is not None else float("-inf")))[: self.spec.aggregate.top_k]
                per_sample = [per_sample[i] for i in keep]
            if self.spec.aggregate.type in ("median",):
                ok = [p for p in per_sample if p is not None]
                res.scores = [agg.median(list(col)) for col in zip(*ok)] if ok else None  # type: ignore[misc]
            elif self.spec.aggregate.type == "sum":
                ok = [p for p in per_sample if p is not None]
                res.scores = [float(sum(col)) for col in zip(*ok)] if ok else None
            else:
                res.scores = agg.mean_lists(per_sample)
            res.rewards = [self.normalize(x) for x in res.scores] if res.scores else None  # type: ignore[misc]
        return res

    def score_range(self) -> tuple[float, float] | None:
        if self.spec.normalize:
            return (self.spec.normalize.low, self.spec.normalize.high)
        rng = getattr(self.spec.parser, "range", None)
        if rng is not None and self.spec.aggregate.type == "sum":
            return (rng[0] * self.spec.sampling.n, rng[1] * self.spec.sampling.n)
        return tuple(rng) if rng is not None else None  # type: ignore[return-value]

    def normalize(self, x: float | None) -> float | None:
        if x is None:
            return None
        rng = self.score_range()
        if rng is None:
            return x
        lo, hi = rng
        return min(1.0, max(0.0, (x - lo) / (hi - lo)))

    # ------------------------------------------------------------------ rules
    def _verify(self, samples: Sequence[Sample], t0: float) -> list[JudgeResult]:
        assert self.spec.rule is not None
        out = []
        for s in samples:
            score, why = check(self.spec.rule, s.response or "", s.reference)
            out.append(JudgeResult(
                judge=self.spec.name, score=score, reward=score,
                samples=[SampleRecord(view=0, order=[0], index=0, attempt=0, text=why, parsed=score,
                                      error=None if score is not None else why, tokens=0)],
                parse_failures=int(score is None), provenance=self.provenance(),
                error=None if score is not None else why,
            ))
        elapsed = time.perf_counter() - t0
        for r in out:
            r.seconds = elapsed / max(1, len(out))
        return out


def load(ref: str | Path, base_dir: Path | None = None, engine: GenerationEngine | None = None, overrides: Sequence[str] = ()) -> Judge:
    """Load a judge from a spec path or ``builtin:NAME``."""
    from grm.config import load_judge

    try:
        path = resolve_judge(str(ref), base_dir or Path.cwd(), overrides)
    except FileNotFoundError as e:
        raise JudgeError(str(e)) from None
    return Judge(load_judge(path, overrides=overrides), path.parent, engine)
