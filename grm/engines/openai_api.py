"""A frozen model behind an OpenAI-compatible HTTP server (llama.cpp, vLLM, SGLang, a hosted API).

Requests go out from a thread pool (``concurrency`` in flight) through ``grm.engines.http``: each
retried with exponential backoff on 429, 5xx, timeouts and refused connections; other 4xx are the
caller's mistake and fail at once with the server's message (bounded, plain, redacted). The API key
is read from the environment variable the spec names, never from YAML; it goes only to the origin
of ``base_url`` (never along a redirect to another one) and never into a message or repr. Replies
are validated against the shape below: a reply of any other shape is one error naming the URL.

With ``endpoint: completions`` (the default when the model's tokenizer is available locally) the
prompt is rendered with the model's own chat template here, so a judge's prefill (``Critique:``)
and the exact prompt text match the hf engine; ``chat`` sends messages and lets the server render.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from pydantic import BaseModel, Discriminator, Field, Tag, ValidationError

from grm.engines.base import EngineError, Generation, GenerationRequest, SamplingParams, TokenCount, render_prompt
from grm.engines.credentials import Credentials, shape_error
from grm.engines.http import HttpClient
from grm.engines.server_process import ServerProcess
from grm.jsonl import without_lone_surrogates

__all__ = ["OpenAIEngine", "ServerProcess"]

REPLY_BYTES = 64 * 1024 * 1024
"""Largest reply read: one sample per request; 32k tokens with 20 alternatives each is ~20 MB."""


# ---------------------------------------------------------------------- the reply we accept
# Fields we do not read are ignored; those we read must have these types.
class _CompletionLogprobs(BaseModel):
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float | None] | None] | None = None


class _ChatAlternative(BaseModel):
    token: str
    logprob: float | None = None


class _ChatToken(BaseModel):
    logprob: float | None = None
    top_logprobs: list[_ChatAlternative] | None = None


class _ChatLogprobs(BaseModel):
    content: list[_ChatToken] | None = None


def _logprobs_format(v: Any) -> str:
    return "chat" if isinstance(v, dict) and "content" in v else "completions"


_Logprobs = Annotated[
    Annotated[_ChatLogprobs, Tag("chat")] | Annotated[_CompletionLogprobs, Tag("completions")],
    Discriminator(_logprobs_format),
]


class _Message(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    text: str | None = None
    message: _Message | None = None
    logprobs: _Logprobs | None = None
    finish_reason: str | None = None


class _PromptDetails(BaseModel):
    cached_tokens: TokenCount | None = None


class _Usage(BaseModel):
    prompt_tokens: TokenCount | None = None
    completion_tokens: TokenCount | None = None
    prompt_tokens_details: _PromptDetails | None = None


class _Reply(BaseModel):
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


class OpenAIEngine:
    """GenerationEngine over ``base_url`` (ending in ``/v1``)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        endpoint: str = "completions",
        tokenizer: Any = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        top_logprobs: int = 20,
        max_reply_bytes: int = REPLY_BYTES,
    ) -> None:
        if endpoint == "completions" and tokenizer is None:
            raise ValueError(
                "the completions endpoint needs the model's tokenizer to render chat prompts; "
                "use endpoint: chat or give a local model"
            )
        credentials = Credentials()
        # the key (or the URL's user:password) is bound to base_url's origin; messages show the URL without userinfo
        self.base_url = credentials.bind(base_url, api_key).rstrip("/")
        self.model_id = model
        self.endpoint = endpoint
        self.tokenizer = tokenizer
        self.version = 0
        self.top_logprobs = top_logprobs
        self._http = HttpClient(
            timeout_s=timeout_s,
            max_reply_bytes=max_reply_bytes,
            max_retries=max_retries,
            backoff_s=backoff_s,
            credentials=credentials,
        )
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="grm-openai")
        self._tokens = {"prompt_tokens": 0, "completion_tokens": 0}
        self._lock = threading.Lock()
        self._server: ServerProcess | None = None
        self._read = [0, 0]  # prompt_counts: prompt tokens of log-prob readings, cached tokens of all replies

    @property
    def server(self) -> ServerProcess | None:
        """The server this engine launched (``engine.launch``), if any: one that dies is started
        again before the failed request's next retry, so the request is re-issued, not lost."""
        return self._server

    @server.setter
    def server(self, server: ServerProcess | None) -> None:
        self._server = server
        self._http.before_retry = None if server is None else server.revive

    def __repr__(self) -> str:  # no credentials
        return f"OpenAIEngine({self.base_url!r}, model={self.model_id!r}, endpoint={self.endpoint!r})"

    @property
    def usage(self) -> dict[str, int]:
        """Running counters: successful requests, retries, the tokens the server reported, and the
        restarts of a launched server."""
        restarts = self._server.restarts if self._server is not None else 0
        with self._lock:
            return {"requests": self._http.requests, "retries": self._http.retries, **self._tokens, "server_restarts": restarts}

    # ------------------------------------------------------------------ HTTP
    def _post(self, path: str, body: dict[str, Any]) -> _Reply:
        """POST to the server and validate the reply's shape (one error naming the URL otherwise)."""
        url = self.base_url + path
        raw = self._http.post_json(url, body)
        try:
            reply = _Reply.model_validate(raw)
        except ValidationError as e:
            raise self._http.fail(f"{url}: unexpected reply: {shape_error(e, self._http.redact)}") from None
        with self._lock:
            u = reply.usage or _Usage()
            self._tokens["prompt_tokens"] += u.prompt_tokens or 0
            self._tokens["completion_tokens"] += u.completion_tokens or 0
            self._read[1] += (u.prompt_tokens_details.cached_tokens or 0) if u.prompt_tokens_details else 0
        return reply

    @property
    def prompt_counts(self) -> tuple[int, int]:
        """Running (prompt tokens the server reported for log-prob readings, prompt tokens it
        reported as cached, for any request)."""
        with self._lock:
            return self._read[0], self._read[1]

    # ------------------------------------------------------------------ prompts
    def prompt_text(self, request: GenerationRequest) -> str:
        return render_prompt(self.tokenizer, request)

    def _body(
        self, request: GenerationRequest, sp: SamplingParams, n: int, seed: int | None, logprobs: int | None
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model_id,
            "n": n,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "max_tokens": sp.max_new_tokens,
        }
        if sp.top_k:
            body["top_k"] = sp.top_k  # a common extension (vLLM, SGLang, llama.cpp); others ignore it
        if sp.stop:
            body["stop"] = list(sp.stop)
        if seed is not None:
            body["seed"] = seed
        if request.token_ids is not None:
            # an OpenAI-compatible server re-renders or re-tokenises what it is sent, and returns no
            # ids to check it against: an episode's exact context cannot be kept through it
            raise EngineError(
                "the openai engine cannot send exact prompt token ids (multi-turn episodes); "
                "serve the policy with the hf or sglang engine"
            )
        if self.endpoint == "chat":
            if request.messages is None or request.continue_final:
                raise EngineError(
                    "endpoint: chat cannot send raw text or continue a prefilled assistant message; use endpoint: completions"
                )
            body["messages"] = request.messages
            if logprobs is not None:
                body["logprobs"], body["top_logprobs"] = True, logprobs
            return "/chat/completions", body
        body["prompt"] = self.prompt_text(request)
        if logprobs is not None:
            body["logprobs"] = logprobs
        return "/completions", body

    # ------------------------------------------------------------------ GenerationEngine
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        # One request per sample (n=1): servers differ in whether they honour n, and sample j is
        # then reproducible on its own under seed + j. Prefix caching on the server shares the prompt.
        jobs = []
        for i, r in enumerate(requests):
            seed = r.seed if r.seed is not None else sampling.seed
            jobs += [(i, j, self._body(r, sampling, 1, None if seed is None else seed + j, None)) for j in range(sampling.n)]
        results = list(self._pool.map(lambda job: self._post(*job[2]), jobs))
        return [self._generation(res, i, j) for (i, j, _), res in zip(jobs, results, strict=True)]

    def _generation(self, res: _Reply, i: int, j: int) -> Generation:
        choice = res.choices[0]
        text = choice.text if choice.text is not None else (choice.message.content if choice.message else None) or ""
        # a server that echoes the request puts the key in the text, which results files keep; a
        # lone surrogate ("\\ud800" in the JSON) is no text any file or hash can hold
        text = without_lone_surrogates(self._http.credentials.redact_secrets(text))
        lps = _token_logprobs(choice.logprobs)
        if not all(math.isfinite(x) for x in lps):
            raise EngineError(
                f"{self.base_url}: a generated token of request {i} came back without a log-prob (null, NaN or infinite)"
            )
        reason = "length" if choice.finish_reason == "length" else "stop"
        usage = res.usage or _Usage()
        return Generation(
            text=text,
            token_ids=[],
            logprobs=lps,
            finish_reason=reason,
            version=self.version,
            prompt_tokens=usage.prompt_tokens or 0,
            request_index=i,
            sample_index=j,
            completion_tokens=len(lps) if lps else usage.completion_tokens or 0,
        )

    def score_continuations(
        self, requests: Sequence[GenerationRequest], continuations: Sequence[Sequence[str]]
    ) -> list[list[float | None]]:
        """From the top-``top_logprobs`` alternatives of one generated token: a candidate is the
        best-scoring listed token equal to it (exactly, else after stripping spaces). A candidate
        of several tokens (``10`` after ``Score: `` for most tokenizers) that is not listed whole is
        read token by token, as the hf engine reads it: the alternatives after the prompt plus the
        tokens before, one request per distinct prefix (``endpoint: completions``, which has the
        tokenizer). A candidate with a token that is not listed is None: its log-prob is unknown
        (below the lowest listed one), and a judge masks the reading rather than guess a value."""
        prompts = [self.prompt_text(r) if self.endpoint == "completions" else None for r in requests]
        tops: dict[tuple[int, str], dict[str, float]] = {}
        self._read_tops(requests, prompts, [(i, "") for i in range(len(requests))], tops)
        out: list[list[float | None]] = [[_listed(tops[i, ""], c) for c in conts] for i, conts in enumerate(continuations)]
        # candidates not listed whole: token by token, one round of requests per token position
        unread = [(i, k, c) for i, conts in enumerate(continuations) for k, c in enumerate(conts) if out[i][k] is None]
        pieces = {(i, k): p for i, k, c in unread if len(p := self._pieces(c)) > 1}
        for depth in range(1, max((len(p) for p in pieces.values()), default=0)):
            need = sorted({(i, "".join(p[:depth])) for (i, _), p in pieces.items() if len(p) > depth} - set(tops))
            self._read_tops(requests, prompts, need, tops)
        for (i, k), p in pieces.items():
            lps = [_listed(tops[i, "".join(p[:d])], piece) for d, piece in enumerate(p)]
            out[i][k] = None if any(v is None for v in lps) else sum(lps)  # type: ignore[arg-type]
        return out

    def _pieces(self, text: str) -> list[str]:
        """``text`` as the model's tokens (their strings), or itself alone without a tokenizer."""
        if self.tokenizer is None or self.endpoint != "completions":
            return [text]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return [self.tokenizer.decode([t]) for t in ids] or [text]

    def _read_tops(
        self,
        requests: Sequence[GenerationRequest],
        prompts: Sequence[str | None],
        keys: Sequence[tuple[int, str]],
        into: dict[tuple[int, str], dict[str, float]],
    ) -> None:
        """The listed alternatives of the token after request ``i``'s prompt plus ``prefix``, for
        each ``(i, prefix)`` of ``keys``, into ``into``. Where the model's greedy choice is the end
        of text, a server sends no alternatives (llama.cpp: no token, no log-probs): the request is
        made again with that token banned by ``logit_bias``, which llama.cpp and vLLM apply after
        the log-probs they report; still none is an empty (unknown) listing."""
        sp = SamplingParams(n=1, temperature=0.0, max_new_tokens=1)
        eos = getattr(self.tokenizer, "eos_token_id", None)

        def ask(key: tuple[int, str], ban: bool) -> _Reply:
            i, prefix = key
            req = requests[i] if not prefix else GenerationRequest(text=f"{prompts[i]}{prefix}")
            path, body = self._body(req, sp, 1, None, self.top_logprobs)
            if ban:
                body["logit_bias"] = {str(eos): -100}
            return self._post(path, body)

        ended: list[tuple[int, str]] = []
        for key, res in zip(keys, self._pool.map(lambda key: ask(key, False), keys), strict=True):
            self._count_read(res)
            into[key] = _first_top_logprobs(res.choices[0].logprobs)
            if not into[key]:
                if not _ended_at_once(res):
                    raise EngineError(
                        f"{self.base_url}: the server returned no top log-probs; it must support "
                        "logprobs for the logprob parser (llama.cpp: start it with logits_all)"
                    )
                ended.append(key)
        if ended and isinstance(eos, int):
            for key, res in zip(ended, self._pool.map(lambda key: ask(key, True), ended), strict=True):
                self._count_read(res)
                into[key] = _first_top_logprobs(res.choices[0].logprobs)

    def _count_read(self, res: _Reply) -> None:
        with self._lock:
            self._read[0] += (res.usage.prompt_tokens or 0) if res.usage else 0

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        raise EngineError("the openai engine serves a frozen model; weights cannot be pushed to it")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._server is not None:
            self._server.stop()


def _token_logprobs(lp: _ChatLogprobs | _CompletionLogprobs | None) -> list[float]:
    """Log-probs of the generated tokens; NaN where the server gave none, for the caller to refuse."""
    if isinstance(lp, _ChatLogprobs):
        values = [t.logprob for t in lp.content or []]
    else:
        values = list(lp.token_logprobs or []) if lp else []
    return [math.nan if v is None else v for v in values]


def _ended_at_once(res: _Reply) -> bool:
    """The reply generated nothing because its first token was the end of text."""
    choice = res.choices[0]
    text = choice.text if choice.text is not None else (choice.message.content if choice.message else None)
    return not text and choice.finish_reason == "stop"


def _listed(top: dict[str, float], candidate: str) -> float | None:
    """``candidate``'s log-prob among listed alternatives: exact, else the best equal after
    stripping spaces; None when it is not listed."""
    exact = top.get(candidate)
    loose = [v for t, v in top.items() if t.strip() == candidate.strip()]
    return exact if exact is not None else max(loose) if loose else None


def _usable(v: float | None) -> bool:
    return v is not None and not math.isnan(v) and v != math.inf


def _first_top_logprobs(lp: _ChatLogprobs | _CompletionLogprobs | None) -> dict[str, float]:
    """The listed alternatives of the first generated token; a null or NaN value is not listed."""
    if isinstance(lp, _ChatLogprobs):
        first = (lp.content or [None])[0]
        alts = (first.top_logprobs or []) if first else []
        return {a.token: a.logprob for a in alts if _usable(a.logprob)}  # type: ignore[misc]
    tops = (lp.top_logprobs if lp else None) or [None]
    return {t: v for t, v in (tops[0] or {}).items() if _usable(v)}  # type: ignore[misc]
