"""Hugging Face transformers backend: batched sampling with left padding and a KV cache, on the
model's device (the CPU unless the caller chose one with ``grm.models.device.role_device``).

Our own decode loop rather than ``model.generate`` because we need, per row: its own seeded
generator (so an output does not depend on batch neighbours), the log-probability of every sampled
token, stop strings with the text cut before them, and rows dropped from the cache as they finish.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from grm.engines.base import Generation, GenerationAborted, GenerationRequest, SamplingParams, render_prompt
from grm.engines.fp32_head import Fp32Head
from grm.engines.kvcache import PromptCache, prefill, warm
from grm.models.device import module_device, to_cpu
from grm.models.dtype import resolve_dtype, torch_dtype
from grm.models.loading import load_model
from grm.models.weights import token_logprobs


class HFEngine:
    """GenerationEngine over a transformers causal LM.

    ``max_batch_size`` caps the rows decoded together (requests x n) and ``max_batch_tokens`` the
    KV-cache positions they hold (rows x longest prompt+completion); longer lists are chunked.
    ``threads`` sets torch's intra-op threads for this process (None leaves it alone). ``device``:
    where the model runs (None leaves it where it is: the CPU for a model loaded here).
    """

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "fp32",
        threads: int | None = None,
        max_batch_size: int = 32,
        max_batch_tokens: int = 65536,
        model_obj: Any = None,
        tokenizer: Any = None,
        device: torch.device | str | None = None,
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.model_id = model
        if model_obj is None:
            dtype = resolve_dtype(dtype, device)  # auto: this machine's faster dtype
            model_obj, tokenizer = load_model(model, dtype)
        else:  # a model built elsewhere runs in its own dtype
            dtype = {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(next(model_obj.parameters()).dtype, "fp32")
        self.dtype_name = dtype
        self.dtype = torch_dtype(dtype)
        self.model = model_obj if device is None else model_obj.to(device)
        self.device = module_device(self.model)
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.version = 0
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self._prompt_cache: PromptCache | None = None
        self._read_tokens = self._cached_before = 0  # prompt_counts: readings' prompts; caches since closed
        self.head32 = Fp32Head.install(self.model)
        """The LM head in fp32 when the model runs in bf16/fp16 (None in fp32)."""

    @contextmanager
    def prompt_cache(self, max_bytes: int = 4 << 30) -> Iterator[PromptCache]:
        """Inside the block, prompts that ``generate`` prefills are kept, and any later prefill
        (``generate`` or ``score_continuations``) starting with the same tokens runs only the
        rest. Used by the judge runtime around critique-then-score and retries; the memory is
        freed when the block ends."""
        self._prompt_cache = PromptCache(max_bytes)
        try:
            yield self._prompt_cache
        finally:
            self._cached_before += self._prompt_cache.reused_tokens
            self._prompt_cache = None

    # ----------------------------------------------------------------- prompts
    def encode(self, request: GenerationRequest) -> list[int]:
        """The prompt's token ids: ``token_ids`` as given, else the rendered prompt tokenised."""
        if request.token_ids is not None:
            return list(request.token_ids)
        return self.tokenizer(render_prompt(self.tokenizer, request), add_special_tokens=False)["input_ids"]

    def prompt_text(self, request: GenerationRequest) -> str:
        """The exact text the model sees for ``request`` (chat template applied)."""
        return self.tokenizer.decode(self.encode(request))

    # ----------------------------------------------------------------- generation
    @torch.inference_mode()
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        prompts = [self.encode(r) for r in requests]
        seeds = [r.seed if r.seed is not None else sampling.seed for r in requests]
        rows = [(i, j) for i in range(len(prompts)) for j in range(sampling.n)]
        # Longest first so each chunk pads little; the output order is restored below.
        rows.sort(key=lambda ij: -len(prompts[ij[0]]))
        out: dict[tuple[int, int], Generation] = {}
        for chunk in self._chunks(rows, [len(prompts[i]) + sampling.max_new_tokens for i, _ in rows]):
            gens = [self._row_generator(seeds[i] if sampling.temperature > 0 else None, j, prompts[i]) for i, j in chunk]
            for (i, j), gen in zip(
                chunk, self._generate_rows([prompts[i] for i, _ in chunk], chunk, gens, sampling), strict=False
            ):  # noqa: E501
                out[(i, j)] = gen
        return [out[(i, j)] for i in range(len(prompts)) for j in range(sampling.n)]

    def _chunks(self, rows: list, sizes: list[int]) -> list[list]:
        """Consecutive runs of ``rows`` (sorted longest first) holding at most ``max_batch_size``
        rows and ``max_batch_tokens`` cache positions (rows x longest)."""
        chunks: list[list] = []
        for row, size in zip(rows, sizes, strict=False):
            if (
                chunks
                and len(chunks[-1][0]) < self.max_batch_size
                and (len(chunks[-1][0]) + 1) * chunks[-1][1] <= self.max_batch_tokens
            ):
                chunks[-1][0].append(row)
            else:
                chunks.append(([row], size))
        return [c for c, _ in chunks]

    def _row_generator(self, seed: int | None, j: int, prompt: list[int]) -> torch.Generator | None:
        """Seeded from (seed, sample index, prompt tokens): the same prompt and seed give the same
        sample whatever the batch holds, while different prompts draw independent streams. On the
        model's device (sampling draws there); greedy decoding passes no seed and needs none."""
        if seed is None:
            return None
        key = hashlib.sha256(f"{seed}:{j}:{prompt}".encode()).digest()[:8]
        g = torch.Generator(device=self.device)
        g.manual_seed(int.from_bytes(key, "little") & ((1 << 63) - 1))
        return g

    def _generate_rows(
        self, prompts: list[list[int]], ids: list[tuple[int, int]], gens: list[torch.Generator | None], sp: SamplingParams
    ) -> list[Generation]:
        B = len(prompts)
        pc = self._prompt_cache
        if pc is not None:
            pc.record = True
        cache, logits, attn = prefill(self.model, prompts, self.pad_id, extra=sp.max_new_tokens, cache=pc)
        width = attn.shape[1]  # the prompts end here in the cache, right-aligned; generated tokens follow
        tokens: list[list[int]] = [[] for _ in range(B)]
        logps: list[list[float]] = [[] for _ in range(B)]
        finish: list[str | None] = [None] * B
        texts: list[str] = [""] * B
        active = list(range(B))  # original row of each cache row; finished rows stay until compaction

        for step in range(sp.max_new_tokens):
            if sp.abort is not None and sp.abort():
                raise GenerationAborted()
            logprobs = torch.log_softmax(logits, dim=-1)
            next_tok = self._sample(logits, sp, [gens[r] for r in active])
            chosen_lp = logprobs.gather(1, next_tok[:, None])[:, 0]
            host_tok, host_lp = to_cpu(next_tok).tolist(), to_cpu(chosen_lp).tolist()  # one transfer a step
            live = []
            for k, r in enumerate(active):
                if finish[r] is not None:
                    continue
                t = host_tok[k]
                tokens[r].append(t)
                logps[r].append(host_lp[k])
                if t in self.eos_ids:
                    finish[r] = "stop"
                elif sp.stop or sp.stop_when is not None:
                    text = self.tokenizer.decode(tokens[r], skip_special_tokens=True)
                    cut = _first_stop(text, sp.stop)
                    if cut is not None:
                        texts[r] = text[:cut]
                        finish[r] = "stop"
                    elif sp.stop_when is not None and sp.stop_when(text):
                        texts[r] = text
                        finish[r] = "stop"
                if finish[r] is None and step == sp.max_new_tokens - 1:
                    finish[r] = "length"
                if finish[r] is None:
                    live.append(k)
            if not live:
                break
            # Dropping rows copies the cache, so finished rows ride along until a quarter are done.
            if len(live) <= 0.75 * len(active):
                if pc is not None:
                    done = set(range(len(active))) - set(live)
                    _keep_generated(pc, cache, width, [(k, active[k]) for k in sorted(done)], prompts, tokens)
                keep = torch.tensor(live, dtype=torch.long, device=self.device)
                cache.batch_select_indices(keep)
                attn, next_tok = attn[keep], next_tok[keep]
                active = [active[k] for k in live]
            attn = torch.cat([attn, attn.new_ones((len(active), 1))], dim=1)
            pos = attn.sum(-1, keepdim=True) - 1
            out = self.model(
                input_ids=next_tok[:, None], attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True
            )
            logits = out.logits[:, -1, :].float()
        if pc is not None:
            _keep_generated(pc, cache, width, list(enumerate(active)), prompts, tokens)

        result = []
        for b in range(B):
            text = texts[b] if finish[b] == "stop" and texts[b] else self.tokenizer.decode(tokens[b], skip_special_tokens=True)
            if finish[b] == "stop" and sp.stop and not texts[b]:
                cut = _first_stop(text, sp.stop)
                text = text[:cut] if cut is not None else text
            result.append(
                Generation(
                    text=text,
                    token_ids=tokens[b],
                    logprobs=logps[b],
                    finish_reason=finish[b] or "length",
                    version=self.version,
                    prompt_tokens=len(prompts[b]),
                    request_index=ids[b][0],
                    sample_index=ids[b][1],
                )
            )
        return result

    @staticmethod
    def _sample(logits: torch.Tensor, sp: SamplingParams, gens: list[torch.Generator | None]) -> torch.Tensor:
        if sp.temperature <= 0:
            return logits.argmax(-1)
        scores = logits / sp.temperature
        if sp.top_k and sp.top_k < scores.shape[-1]:
            kth = torch.topk(scores, sp.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if sp.top_p < 1.0:
            sorted_scores, idx = torch.sort(scores, descending=True, dim=-1)
            cum = torch.softmax(sorted_scores, -1).cumsum(-1)
            drop = cum - torch.softmax(sorted_scores, -1) > sp.top_p  # keep the token that crosses top_p
            sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
            scores = torch.full_like(scores, float("-inf")).scatter(1, idx, sorted_scores)
        return _draw(torch.softmax(scores, -1), gens)

    # ----------------------------------------------------------------- scoring
    @torch.inference_mode()
    def sequence_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """Teacher-forced log-prob of each completion token given its prompt (right padded batch)."""
        out: list[list[float]] = []
        for start in range(0, len(prompt_ids), self.max_batch_size):
            ps, cs = prompt_ids[start : start + self.max_batch_size], completion_ids[start : start + self.max_batch_size]
            seqs = [list(p) + list(c) for p, c in zip(ps, cs, strict=False)]
            L = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), L), self.pad_id, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for b, s in enumerate(seqs):
                ids[b, : len(s)] = torch.tensor(s)
                attn[b, : len(s)] = 1
            lp = to_cpu(token_logprobs(self.model, ids, attn)[0])
            for b, (p, c) in enumerate(zip(ps, cs, strict=False)):
                out.append(lp[b, len(p) - 1 : len(p) - 1 + len(c)].tolist())
        return out

    def score_continuations(
        self, requests: Sequence[GenerationRequest], continuations: Sequence[Sequence[str]]
    ) -> list[list[float | None]]:
        """Each prompt is run once; single-token candidates are read off its last position, and
        multi-token candidates are fed on top of the prompt's KV cache (a few tokens each). A
        candidate that tokenizes to nothing has no log-prob: None."""
        prompts = [self.encode(r) for r in requests]
        self._read_tokens += sum(len(p) for p in prompts)
        cont_ids = [[self.tokenize(c) for c in conts] for conts in continuations]
        if self._prompt_cache is not None:  # prefixes several prompts share (a group's instruction), once each
            warm(self.model, prompts, self.pad_id, self._prompt_cache)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        out: dict[int, list[float | None]] = {}
        extra = max((len(c) for conts in cont_ids for c in conts), default=1)
        for chunk in self._chunks(order, [len(prompts[i]) + extra for i in order]):
            for i, sc in zip(chunk, self._score_chunk([prompts[i] for i in chunk], [cont_ids[i] for i in chunk]), strict=False):
                out[i] = sc
        return [out[i] for i in range(len(prompts))]

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @property
    def prompt_counts(self) -> tuple[int, int]:
        """Running (prompt tokens of log-prob readings, prompt tokens served from the prompt cache)."""
        now = self._prompt_cache.reused_tokens if self._prompt_cache is not None else 0
        return self._read_tokens, self._cached_before + now

    @torch.inference_mode()
    def _score_chunk(self, prompts: list[list[int]], cont_ids: list[list[list[int]]]) -> list[list[float | None]]:
        extra = max((len(c) for conts in cont_ids for c in conts), default=1)
        pc = self._prompt_cache
        if pc is not None:
            pc.record = False  # a scored prompt ends a chain: nothing later extends it
        cache, last, attn = prefill(self.model, prompts, self.pad_id, extra=extra, cache=pc)
        dev = self.device
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        # each candidate's first token is read off the prompt's last position (on the device,
        # then the picked values to the host at once)
        heads = [(i, c[0]) for i, conts in enumerate(cont_ids) for c in conts if c]
        first = torch.log_softmax(last, -1)
        picked = iter(
            to_cpu(
                first[
                    torch.tensor([i for i, _ in heads], dtype=torch.long, device=dev),
                    torch.tensor([t for _, t in heads], dtype=torch.long, device=dev),
                ]
            ).tolist()
        )
        scores: list[list[float | None]] = [[next(picked) if c else None for c in conts] for conts in cont_ids]
        multi = [(i, k) for i, conts in enumerate(cont_ids) for k, c in enumerate(conts) if len(c) > 1]
        if not multi:
            return scores
        rows = torch.tensor([i for i, _ in multi], dtype=torch.long, device=dev)
        cache.batch_select_indices(rows)
        T = max(len(cont_ids[i][k]) for i, k in multi) - 1
        feed = torch.full((len(multi), T), self.pad_id, dtype=torch.long)
        fmask = torch.zeros_like(feed)
        target = torch.zeros_like(feed)
        for r, (i, k) in enumerate(multi):
            c = cont_ids[i][k]
            feed[r, : len(c) - 1] = torch.tensor(c[:-1])
            fmask[r, : len(c) - 1] = 1
            target[r, : len(c) - 1] = torch.tensor(c[1:])
        feed, fmask, target = feed.to(dev), fmask.to(dev), target.to(dev)
        full_mask = torch.cat([attn[rows], fmask], dim=1)
        fpos = pos[rows, -1:] + 1 + torch.arange(T, device=dev)[None, :]
        logits = self.model(
            input_ids=feed, attention_mask=full_mask, position_ids=fpos, past_key_values=cache, use_cache=True
        ).logits.float()
        rest = to_cpu(torch.log_softmax(logits, -1).gather(-1, target[..., None])[..., 0]).tolist()
        for r, (i, k) in enumerate(multi):
            scores[i][k] = scores[i][k] + sum(rest[r][: len(cont_ids[i][k]) - 1])  # type: ignore[operator]
        return scores

    # ----------------------------------------------------------------- weights
    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Copy (a subset of) trainer weights in place; names as in ``model.state_dict()``."""
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise KeyError(f"update_weights: unknown parameter names {unknown[:5]}")
        with torch.no_grad():
            for k, v in state_dict.items():
                own[k].copy_(torch.as_tensor(v).to(own[k].dtype))
        if self.head32 is not None:
            self.head32.refresh()
        self.version = version


def _keep_generated(
    pc: PromptCache, cache: Any, width: int, rows: list[tuple[int, int]], prompts: list[list[int]], tokens: list[list[int]]
) -> None:
    """Offer ``pc`` each (cache row, row) pair's prompt and the tokens fed after it: all the row
    generated but its last token, which was never fed. The cache holds the prompts right-aligned
    to ``width`` and the generated tokens after it. A critique's score reading (the critique and
    "Score: " appended to the prompt) then runs only what follows the critique."""
    for k, r in rows:
        p, fed = prompts[r], len(tokens[r]) - 1
        span = slice(width - len(p), width + fed)
        pc.add(tuple(p + tokens[r][:fed]), [(layer.keys[k, :, span], layer.values[k, :, span]) for layer in cache.layers])


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    cuts = [text.find(s) for s in stops if s and s in text]
    return min(cuts) if cuts else None


def _draw(probs: torch.Tensor, gens: list[torch.Generator | None]) -> torch.Tensor:
    """One token per row of ``probs`` ``[B, V]``, row ``k`` drawn with ``gens[k]``: by inverting
    the row's cumulative distribution at one uniform number (float64, so the vocabulary's tail
    keeps its mass). ``torch.multinomial`` draws an exponential number per vocabulary entry
    instead: 49k of them per token, a tenth of a CPU decode step for a 135M model. Never a token
    of probability 0, whatever the rounding."""
    cdf = probs.double().cumsum(-1)
    u = torch.stack([torch.rand((), generator=g, device=probs.device, dtype=torch.float64) for g in gens])
    picks = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0].clamp(max=probs.shape[-1] - 1)
    empty = probs.gather(1, picks[:, None])[:, 0] <= 0  # u * total rounded up to the total: the last token with mass
    if bool(empty.any()):
        picks = torch.where(empty, probs.shape[-1] - 1 - (probs.flip(-1) > 0).int().argmax(-1), picks)
    return picks
