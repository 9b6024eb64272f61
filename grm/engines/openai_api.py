"""A frozen model behind an OpenAI-compatible HTTP server (llama.cpp, vLLM, SGLang, a hosted API).

Standard library only: requests go out from a thread pool (``concurrency`` in flight), each retried
with exponential backoff on 429, 5xx, timeouts and refused connections; other 4xx are the caller's
mistake and fail at once with the server's message. The API key is read from the environment
variable the spec names, never from YAML, and never logged.

With ``endpoint: completions`` (the default when the model's tokenizer is available locally) the
prompt is rendered with the model's own chat template here, so a judge's prefill (``Critique:``)
and the exact prompt text match the hf engine; ``chat`` sends messages and lets the server render.
"""

from __future__ import annotations

import atexit
import json
import math
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grm.engines.base import EngineError, Generation, GenerationRequest, SamplingParams, render_prompt


class _Retryable(Exception):
    pass


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
    ) -> None:
        if endpoint == "completions" and tokenizer is None:
            raise ValueError(
                "the completions endpoint needs the model's tokenizer to render chat prompts; "
                "use endpoint: chat or give a local model"
            )
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.endpoint = endpoint
        self.tokenizer = tokenizer
        self.version = 0
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.top_logprobs = top_logprobs
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="grm-openai")
        self.usage = {"requests": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self._lock = threading.Lock()
        self.server: ServerProcess | None = None

    def __repr__(self) -> str:  # no headers: they hold the key
        return f"OpenAIEngine({self.base_url!r}, model={self.model_id!r}, endpoint={self.endpoint!r})"

    # ------------------------------------------------------------------ HTTP
    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.post_url(self.base_url + path, body)

    def post_url(self, url: str, body: dict[str, Any]) -> Any:
        """POST JSON to ``url``, retrying 429/5xx/timeouts/refused connections with backoff."""
        data = json.dumps(body).encode()
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self._lock:
                    self.usage["retries"] += 1
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                return self._post_once(url, data)
            except _Retryable as e:
                last = str(e)
        raise EngineError(f"{url}: gave up after {self.max_retries + 1} attempts; last error: {last}")

    def _post_once(self, url: str, data: bytes) -> Any:
        req = urllib.request.Request(url, data=data, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                out = json.loads(r.read())
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode(errors="replace")
            if e.code == 429 or e.code >= 500:
                raise _Retryable(f"HTTP {e.code}: {detail}") from None
            raise EngineError(f"{url}: HTTP {e.code} (not retried): {detail}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise _Retryable(f"{type(e).__name__}: {getattr(e, 'reason', e)}") from None
        with self._lock:
            self.usage["requests"] += 1
            u = (out.get("usage") if isinstance(out, dict) else None) or {}
            self.usage["prompt_tokens"] += int(u.get("prompt_tokens") or 0)
            self.usage["completion_tokens"] += int(u.get("completion_tokens") or 0)
        return out

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
        out = []
        for (i, j, _), res in zip(jobs, results, strict=False):
            choices = res.get("choices") or []
            if not choices:
                raise EngineError(f"{self.base_url}: response without choices for request {i}: {str(res)[:200]}")
            out.append(self._generation(choices[0], res, i, j))
        return out

    def _generation(self, choice: dict[str, Any], res: dict[str, Any], i: int, j: int) -> Generation:
        text = choice.get("text")
        if text is None:
            text = (choice.get("message") or {}).get("content") or ""
        lps = _token_logprobs(choice.get("logprobs"))
        if any(math.isnan(x) for x in lps):
            raise EngineError(f"{self.base_url}: a generated token of request {i} came back without a log-prob")
        reason = "length" if choice.get("finish_reason") == "length" else "stop"
        usage = res.get("usage") or {}
        n_tok = len(lps) if lps else None
        return Generation(
            text=text,
            token_ids=[],
            logprobs=lps,
            finish_reason=reason,
            version=self.version,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            request_index=i,
            sample_index=j,
            completion_tokens=n_tok if n_tok is not None else int(usage.get("completion_tokens") or 0),
        )

    def score_continuations(
        self, requests: Sequence[GenerationRequest], continuations: Sequence[Sequence[str]]
    ) -> list[list[float | None]]:
        """From the top-``top_logprobs`` alternatives of one generated token: a candidate is the
        best-scoring listed token equal to it (exactly, else after stripping spaces). A candidate
        that is not listed is None: its log-prob is unknown (below the lowest listed one), and a
        judge masks the reading rather than guess a value for it."""
        sp = SamplingParams(n=1, temperature=0.0, max_new_tokens=1)
        jobs = [self._body(r, sp, 1, None, self.top_logprobs) for r in requests]
        results = list(self._pool.map(lambda job: self._post(*job), jobs))
        out = []
        for conts, res in zip(continuations, results, strict=False):
            top = _first_top_logprobs((res.get("choices") or [{}])[0].get("logprobs"))
            if not top:
                raise EngineError(
                    f"{self.base_url}: the server returned no top log-probs; it must support "
                    "logprobs for the logprob parser (llama.cpp: start it with logits_all)"
                )
            row: list[float | None] = []
            for c in conts:
                exact = top.get(c)
                loose = [v for t, v in top.items() if t.strip() == c.strip()]
                row.append(exact if exact is not None else max(loose) if loose else None)
            out.append(row)
        return out

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        raise EngineError("the openai engine serves a frozen model; weights cannot be pushed to it")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.server is not None:
            self.server.stop()


def _token_logprobs(lp: Any) -> list[float]:
    if not lp:
        return []
    if isinstance(lp, dict) and "content" in lp:  # chat format
        return [_number(t.get("logprob")) for t in lp.get("content") or []]
    return [_number(x) for x in lp.get("token_logprobs") or []]


def _number(x: Any) -> float:
    """A log-prob from a server reply; NaN when missing, for the caller to refuse (never a 0.0)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _first_top_logprobs(lp: Any) -> dict[str, float]:
    if not lp:
        return {}
    if isinstance(lp, dict) and "content" in lp:
        content = lp.get("content") or []
        return {t["token"]: float(t["logprob"]) for t in (content[0].get("top_logprobs") or [])} if content else {}
    tops = lp.get("top_logprobs") or []
    return {t: float(v) for t, v in (tops[0] or {}).items() if v is not None and not math.isnan(float(v))} if tops else {}


class ServerProcess:
    """A server command started by the engine (``engine.launch``), health-checked on ``/models``
    before first use (``health_path``) and stopped with the process that started it."""

    def __init__(
        self,
        command: Sequence[str],
        base_url: str,
        *,
        timeout_s: float = 300.0,
        log_path: str | None = None,
        health_path: str = "/models",
    ) -> None:
        self.command, self.base_url, self.health_path = list(command), base_url.rstrip("/"), health_path
        self._log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        atexit.register(self.stop)
        self._wait_healthy(timeout_s)

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(
                    f"server command exited with code {self.proc.returncode} before it was ready: {shlex.join(self.command)}"
                )
            try:
                with urllib.request.urlopen(self.base_url + self.health_path, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"server at {self.base_url} not healthy after {timeout_s:.0f} s: {shlex.join(self.command)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
