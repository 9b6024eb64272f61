"""SGLang servers on a GPU pool, driven over SGLang's native HTTP API (no ``import sglang`` here).

Generation goes to ``/generate`` as token ids with per-row sampling params and comes back with
output ids and per-token log-probs (``return_logprob``), so rollouts carry the behaviour
log-probs TIS needs (request bodies and reply shapes: ``grm.engines.sglang_api``; HTTP, bounded
and redirect-safe: ``grm.engines.http``). Candidate continuations are scored exactly by teacher forcing
(``logprob_start_len``; the radix cache reuses the shared prompt). Weights reach the servers
from disk (``/update_weights_from_disk`` on safetensors the sync step writes) or over an NCCL
group the trainer joins (``/init_weights_update_group`` + ``/update_weights_from_distributed``);
in-flight rollouts are paused around an update and the prefix cache is flushed after it. A row
the server says it generated with other weights than the engine last pushed (``meta_info.
weight_version``) is an error, not a sample: the server holds an earlier run's weights, or an
update never arrived.

Verified here: request building and response parsing (unit tests), and whole runs against a
stand-in that speaks the same HTTP API over a transformers model (``tests/serving/
sglang_standin.py``; ``tests/integration/orchestrator/test_sglang_standin.py``). Not verified
here: a real SGLang server (it needs CUDA; ``test_sglang_gpu.py`` runs the same checks on a GPU).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from grm.base import regular_file_bytes
from grm.engines.base import EngineError, Generation, GenerationAborted, GenerationRequest, SamplingParams, render_prompt
from grm.engines.credentials import Credentials, glimpse, plain
from grm.engines.http import HttpClient
from grm.engines.server_process import ServerProcess
from grm.engines.sglang_api import (
    CONTROL_REPLY_BYTES,
    REPLY_BYTES,
    continuation_payload,
    generate_payload,
    parse_continuation,
    parse_segment,
    post_control,
    resumed_payload,
    served_version,
)
from grm.engines.sglang_launch import launch_servers, server_plan, visible_gpus, weight_sync_dir
from grm.engines.sglang_rows import CutRow, row_end
from grm.models.model_files import VOCAB_MAX_BYTES


class SGLangEngine:
    """GenerationEngine over one or more SGLang servers (requests split across them)."""

    def __init__(
        self,
        urls: Sequence[str],
        model: str,
        tokenizer: Any,
        *,
        concurrency: int = 64,
        timeout_s: float = 600.0,
        tp: int = 1,
        post: Callable[[str, dict[str, Any]], Any] | None = None,
        max_reply_bytes: int = REPLY_BYTES,
        max_retries: int = 4,
        backoff_s: float = 0.5,
    ) -> None:
        if not urls:
            raise ValueError("SGLangEngine needs at least one server URL")
        credentials = Credentials()
        # a URL's user:password@ becomes HTTP Basic for that server alone; messages show the URL without it
        self.urls = [credentials.bind(u).rstrip("/") for u in urls]
        self.model_id = model
        self.tokenizer = tokenizer
        self.version = 0
        self.tp = tp
        self.servers: list[ServerProcess] = []
        self.sync_dir: Path | None = None  # made on the first disk weight update, removed by close()
        # retries on 429/5xx/timeouts for /generate; control calls are single attempts (post_control)
        self._http = HttpClient(
            timeout_s=timeout_s,
            max_reply_bytes=max_reply_bytes,
            max_retries=max_retries,
            backoff_s=backoff_s,
            credentials=credentials,
        )
        self._control_http = HttpClient(timeout_s=timeout_s, max_reply_bytes=CONTROL_REPLY_BYTES, credentials=credentials)
        self._post_fn = post
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.urls)))  # one call per server at a time
        self._requests = ThreadPoolExecutor(max_workers=concurrency)  # continuation scoring, request by request
        self._controls = ThreadPoolExecutor(max_workers=max(1, len(self.urls)))  # pause, update, resume
        self._begun = self._done = 0
        """Weight updates begun and ended (``_paused``): a row aborted while one ran, or after one
        began since the row was sent, was cut by it."""
        self._lock = threading.Lock()
        self._read = [0, 0]  # prompt_counts

    def __repr__(self) -> str:  # no credentials
        return f"SGLangEngine({self.urls!r}, model={self.model_id!r})"

    @classmethod
    def from_spec(cls, spec: Any, model: str, *, tokenizer: Any = None, launched: Sequence[str] = (), **_: Any) -> SGLangEngine:
        """The engine over ``spec.urls``, else over ``launched`` (servers the policy's ranks
        started, ``launch_servers``), else over ``spec.replicas`` servers launched here."""
        from grm.models import resolve_model

        path = resolve_model(model)
        if tokenizer is None:
            from grm.models.hf_load import tokenizer_at

            tokenizer = tokenizer_at(path)
        urls = list(spec.urls or launched or [])
        servers = []
        if not urls:  # all of them here, on this process's GPUs (a policy's ranks launch their own: launched=)
            servers = launch_servers(spec, path, server_plan(spec.replicas, spec.tp, 1, len(visible_gpus())))
            urls = [s.base_url for s in servers]
        eng = cls(urls, model, tokenizer, concurrency=spec.concurrency, timeout_s=spec.timeout_s, tp=spec.tp)
        eng.servers = servers
        return eng

    # ------------------------------------------------------------------ HTTP
    def _post(self, url: str, path: str, body: dict[str, Any]) -> Any:
        if self._post_fn is not None:
            return self._post_fn(url + path, body)
        return self._http.post_json(url + path, body)

    def _control(self, url: str, path: str, body: dict[str, Any]) -> Any:
        if self._post_fn is not None:
            return self._post_fn(url + path, body)
        return post_control(url + path, body, self.timeout_s, client=self._control_http)

    def _failed(self, url: str, what: Any) -> EngineError:
        message = what.get("message", what) if isinstance(what, dict) else what
        text = message if isinstance(message, str) else glimpse(message, self._http.redact)
        return self._http.fail(f"{url} failed: {plain(self._http.redact(text))}")

    def _each_server(self, path: str, body: dict[str, Any] | None = None) -> list[Any]:
        # its own threads: a pause must reach a server while this engine's /generate calls wait on it
        outs = list(self._controls.map(lambda u: self._control(u, path, body or {}), self.urls))
        for u, o in zip(self.urls, outs, strict=False):
            if isinstance(o, dict) and o.get("success") is False:
                raise self._failed(u + path, o)
        return outs

    def _parsed(self, url: str, parse: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``parse(*args, **kw)`` of a server's reply, its error naming the server (credentials redacted)."""
        try:
            return parse(*args, **kw)
        except EngineError as e:
            raise self._http.fail(f"{url}/generate: {e}") from None

    # ------------------------------------------------------------------ prompts
    def encode(self, request: GenerationRequest) -> list[int]:
        """The prompt's token ids (sent as ``/generate``'s ``input_ids``): ``token_ids`` as given,
        else the rendered prompt tokenised here."""
        if request.token_ids is not None:
            return list(request.token_ids)
        return self.tokenize(render_prompt(self.tokenizer, request))

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # ------------------------------------------------------------------ GenerationEngine
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        """Each server's share of the rows in one batched ``/generate``. Rows a weight update of this
        engine cut short (the pause aborts them) go on from their last token with the new weights,
        in one batch per server, until each is done: such a generation spans versions, and its
        ``token_versions`` say which sampled each token. ``sampling.abort`` is polled here, on the
        caller's thread (Ray's cancel flag is per thread): a stopping run returns at once and sends
        no cut row again."""
        prompts = [self.encode(r) for r in requests]
        seeds = [r.seed if r.seed is not None else sampling.seed for r in requests]
        k = len(self.urls)
        shards = [list(range(i, len(prompts), k)) for i in range(k)]  # request i -> server i % k
        stop, ends = threading.Event(), row_end(self.tokenizer, sampling)

        def run(s: int) -> list[CutRow]:
            idx, url = shards[s], self.urls[s]
            rows = [CutRow(prompts[i], i, j, None if seeds[i] is None else seeds[i] + j) for i in idx for j in range(sampling.n)]
            pending, body = rows, generate_payload([prompts[i] for i in idx], sampling, [seeds[i] for i in idx])
            while pending and not stop.is_set():
                since, done = self.version, self._done
                held = self._begun > done  # sent during an update: served once it is in
                out = self._post(url, "/generate", body)
                replies = out if isinstance(out, list) else [out]
                if len(replies) != len(pending):
                    raise EngineError(f"{url}/generate returned {len(replies)} rows for {len(pending)}")
                for row, item in zip(pending, replies, strict=True):
                    seg = self._parsed(url, parse_segment, item, row.request)
                    if seg.finish == "abort" and self._begun == done:  # no update of this engine's since it was sent
                        raise self._http.fail(f"{url}/generate: sglang aborted request {row.request}: {plain(seg.why)}")
                    version = self._parsed(url, served_version, seg, row.request, since, self.version, held)
                    row.add(seg, version, ends)
                pending = [r for r in pending if r.finish == "abort" and r.left(sampling) > 0]
                body = resumed_payload([(r.ids(), r.left(sampling), r.next_seed()) for r in pending], sampling)
            return rows

        futures = [self._pool.submit(run, s) for s in range(k)]
        try:
            while True:
                finished, running = wait(futures, timeout=0.5, return_when=FIRST_EXCEPTION)
                if not running or any(f.exception() is not None for f in finished):
                    break
                if sampling.abort is not None and sampling.abort():
                    raise GenerationAborted()
        finally:
            stop.set()  # a call left behind (an abort, another server's error) sends nothing more
        done_rows = {(r.request, r.sample): r for f in futures for r in f.result()}
        return [done_rows[(i, j)].generation(self.tokenizer, sampling) for i in range(len(prompts)) for j in range(sampling.n)]

    def score_continuations(
        self, requests: Sequence[GenerationRequest], continuations: Sequence[Sequence[str]]
    ) -> list[list[float | None]]:
        """One prefill request per (prompt, candidate); a candidate that tokenizes to nothing is None."""
        jobs = []
        for i, (r, conts) in enumerate(zip(requests, continuations, strict=True)):
            p = self.encode(r)
            for k, c in enumerate(conts):
                ids = self.tokenize(c)
                if ids:
                    jobs.append((i, k, continuation_payload(p, ids), len(ids)))
        k = len(self.urls)
        outs = list(self._requests.map(lambda jb: self._post(self.urls[jb[0] % k], "/generate", jb[2]), jobs))
        scores: list[list[float | None]] = [[None] * len(c) for c in continuations]
        for (i, kk, payload, n), item in zip(jobs, outs, strict=True):
            one = item[0] if isinstance(item, list) and len(item) == 1 else item  # a one-row batch, or the row
            scores[i][kk] = self._parsed(self.urls[i % k], parse_continuation, one, n)
            meta = one.get("meta_info") if isinstance(one, dict) else None
            cached = meta.get("cached_tokens") if isinstance(meta, dict) else None
            with self._lock:
                self._read[0] += len(payload["input_ids"]) - n  # the prompt of this (prompt, candidate) prefill
                self._read[1] += cached if isinstance(cached, int) and cached >= 0 else 0
        return scores

    @property
    def prompt_counts(self) -> tuple[int, int]:
        """Running (prompt tokens of log-prob readings, of them the server's radix cache served)."""
        with self._lock:
            return self._read[0], self._read[1]

    # ------------------------------------------------------------------ weights
    def update_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Write the weights as safetensors next to the model's config and reload them from disk."""
        from grm.models import resolve_model
        from grm.models.weights import save_weights

        if self.sync_dir is None:
            self.sync_dir = weight_sync_dir()
        target = self.sync_dir / f"v{version}"
        save_weights(state_dict, target, version)
        src = Path(resolve_model(self.model_id))
        for name in os.listdir(src):
            if name.endswith((".json", ".txt", ".model", ".jinja")) and not (target / name).exists():
                # read bounded and never from a FIFO (it would block the weight sync for good)
                data = regular_file_bytes(src / name, EngineError, limit=VOCAB_MAX_BYTES)
                if data is not None:
                    (target / name).write_bytes(data)
        self.update_weights_from_disk(str(target), version)
        for old in self.sync_dir.iterdir():  # the servers hold the new weights: older copies are dead weight on disk
            if old != target:
                shutil.rmtree(old, ignore_errors=True)

    @contextlib.contextmanager
    def _paused(self, version: int) -> Iterator[None]:
        """A weight update to ``version`` on every server: rollouts paused (the rows in flight are
        aborted; ``generate`` sends them again, and the servers hold them until they resume),
        prefix caches flushed after the update, the engine's version advanced, rollouts resumed
        (also when the update failed: its error says more than a failed resume)."""
        self._begun += 1  # before the pause: a row it aborts must be known as cut by this update
        try:
            try:
                self._each_server("/pause_generation", {})  # inside: servers a failed pause reached resume
                yield
                self._each_server("/flush_cache", {})
            except BaseException:
                with contextlib.suppress(EngineError):
                    self._each_server("/continue_generation", {})
                raise
            self.version = version  # before resuming: the rows sent again are the new weights' from here on
            self._each_server("/continue_generation", {})
        finally:
            self._done += 1

    def update_weights_from_disk(self, path: str, version: int) -> None:
        """Pause rollouts, load ``path`` on every server, flush prefix caches, resume."""
        with self._paused(version):
            self._each_server("/update_weights_from_disk", {"model_path": path, "weight_version": str(version)})

    def init_weight_group(
        self,
        master_address: str,
        master_port: int,
        world_size: int,
        group_name: str = "weight_update_group",
        backend: str = "nccl",
    ) -> None:
        """Servers join an NCCL group with the trainer at rank 0 (ranks 1.. are the servers' GPUs).
        Every server is asked at once: a server answers only when the whole group has formed, so
        asking them one after another would wait for the first forever."""

        def join(s: int) -> Any:
            body = {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": 1 + s * self.tp,
                "world_size": world_size,
                "group_name": group_name,
                "backend": backend,
            }
            return self._control(self.urls[s], "/init_weights_update_group", body)

        with ThreadPoolExecutor(max_workers=len(self.urls)) as joining:  # not behind rollouts in self._pool
            outs = list(joining.map(join, range(len(self.urls))))
        for url, out in zip(self.urls, outs, strict=True):
            if isinstance(out, dict) and out.get("success") is False:
                raise self._failed(f"{url}/init_weights_update_group", out)

    def announce_distributed_update(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], version: int, group_name: str = "weight_update_group"
    ) -> None:
        """Tell every server to receive the named tensors from the group's broadcast (the trainer
        broadcasts them concurrently, in the same order)."""
        self._announce(names, dtypes, shapes, version, group_name)
        self.version = version

    def _announce(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], version: int, group_name: str = "weight_update_group"
    ) -> None:
        body = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "flush_cache": True,
            "weight_version": str(version),
        }
        self._each_server("/update_weights_from_distributed", body)

    def update_weights_by_broadcast(
        self,
        buckets: Iterable[list[tuple[str, Any]]],
        version: int,
        send: Callable[[list[Any]], object],
        group: str = "weight_update_group",
    ) -> int:
        """Pause rollouts; for each bucket of (name, tensor) tell every server to receive it
        (``/update_weights_from_distributed``) while ``send`` broadcasts its tensors (the trainer's
        side of the group ``init_weight_group`` formed), in the same order; flush prefix caches;
        resume. The tensors go in the trainer's dtype (the server casts as it loads). Returns the
        tensors sent."""
        sent = 0
        with self._paused(version):
            for bucket in buckets:
                tensors = [t for _, t in bucket]
                names = [n for n, _ in bucket]
                dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors]
                shapes = [list(t.shape) for t in tensors]
                with ThreadPoolExecutor(max_workers=1) as side:
                    told = side.submit(self._announce, names, dtypes, shapes, version, group)
                    try:
                        send(tensors)
                    finally:
                        told.result()  # the servers' answer (an error says which), or the HTTP timeout
                sent += len(tensors)
        return sent

    @property
    def group_ranks(self) -> int:
        """Ranks the servers take in a weight-update group (each server's tensor-parallel GPUs)."""
        return len(self.urls) * self.tp

    def close(self) -> None:
        self._requests.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._controls.shutdown(wait=False, cancel_futures=True)
        for s in self.servers:
            s.stop()
        if self.sync_dir is not None:
            shutil.rmtree(self.sync_dir, ignore_errors=True)
