"""SGLang servers on a GPU pool, driven over SGLang's native HTTP API (no ``import sglang`` here).

Generation goes to ``/generate`` as token ids with per-row sampling params and comes back with
output ids and per-token log-probs (``return_logprob``), so rollouts carry the behaviour
log-probs TIS needs. Candidate continuations are scored exactly by teacher forcing
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

import atexit
import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grm.base import free_port
from grm.engines.base import EngineError, Generation, GenerationRequest, SamplingParams, render_prompt
from grm.engines.openai_api import ServerProcess

INSTALL_HINT = "pip install 'grm-rlaif[sglang]' (SGLang needs CUDA GPUs)"


def sampling_payload(sp: SamplingParams, seed: int | None) -> dict[str, Any]:
    """SGLang ``sampling_params`` for one row."""
    p: dict[str, Any] = {"temperature": sp.temperature, "top_p": sp.top_p, "max_new_tokens": sp.max_new_tokens}
    if sp.top_k:
        p["top_k"] = sp.top_k
    if sp.stop:
        p["stop"] = list(sp.stop)
    if seed is not None:
        p["sampling_seed"] = seed
    return p


def generate_payload(prompts: Sequence[Sequence[int]], sp: SamplingParams, seeds: Sequence[int | None]) -> dict[str, Any]:
    """One batched ``/generate`` body: row ``i * n + j`` is sample j of prompt i, seeded ``seed + j``."""
    ids, params = [], []
    for p, seed in zip(prompts, seeds, strict=False):
        for j in range(sp.n):
            ids.append(list(p))
            params.append(sampling_payload(sp, None if seed is None else seed + j))
    return {"input_ids": ids, "sampling_params": params, "return_logprob": True, "logprob_start_len": -1}


def parse_generation(item: dict[str, Any], *, version: int, request_index: int, sample_index: int) -> Generation:
    """A ``/generate`` response row -> Generation. ``output_token_logprobs`` rows are
    ``[logprob, token_id, text-or-None]``."""
    meta = item.get("meta_info") or {}
    lps = meta.get("output_token_logprobs") or []
    ids = item.get("output_ids")
    if ids is None:
        ids = [int(t[1]) for t in lps]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else finish
    if kind == "abort":
        raise EngineError(f"sglang aborted request {request_index}: {finish.get('message', '')}")
    served = meta.get("weight_version")  # "default" until the first update names a version
    if isinstance(served, str) and served.isdigit() and int(served) != version:
        raise EngineError(
            f"sglang generated request {request_index} with weights version {served}, but the policy is at "
            f"version {version}: the server holds other weights (an earlier run's, or an update that never arrived)"
        )
    return Generation(
        text=item.get("text", ""),
        token_ids=list(ids),
        logprobs=[float(t[0]) for t in lps],
        finish_reason="length" if kind == "length" else "stop",
        version=version,
        prompt_tokens=int(meta.get("prompt_tokens") or 0),
        request_index=request_index,
        sample_index=sample_index,
    )


def continuation_payload(prompt: Sequence[int], cont: Sequence[int]) -> dict[str, Any]:
    """Teacher-force ``cont`` after ``prompt``: log-probs of the input from the candidate's first token."""
    return {
        "input_ids": list(prompt) + list(cont),
        "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": len(prompt),
    }


def parse_continuation(item: dict[str, Any], n_cont: int) -> float:
    rows = (item.get("meta_info") or {}).get("input_token_logprobs") or []
    vals = [float(r[0]) for r in rows if r and r[0] is not None]
    if len(vals) < n_cont:
        raise EngineError(f"sglang returned {len(vals)} input log-probs for a {n_cont}-token continuation")
    return sum(vals[-n_cont:])


def post_control(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST to a control endpoint (pause, update, flush, ...) -> ``{"success", "message", ...}``.
    Most answer JSON; ``/flush_cache`` answers plain text, and HTTP 400 with its reason when it
    refuses. Not retried: the caller decides what a failed update means."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise EngineError(f"{url}: {getattr(e, 'reason', e)}") from None
    text = raw.decode(errors="replace").strip()
    try:
        out = json.loads(text)
    except ValueError:
        out = None
    out = out if isinstance(out, dict) else {"message": text}
    if status >= 400:
        out["success"] = False
        out.setdefault("message", f"HTTP {status}: {text[:500]}")
    return out


def launch_command(model_path: str, port: int, spec: Any) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tp-size",
        str(spec.tp),
        "--dtype",
        spec.dtype,
        "--mem-fraction-static",
        str(spec.mem_fraction_static),
    ]
    return cmd + list(spec.extra_args)


SYNC_PREFIX = "grm-sglang-weights-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def weight_sync_dir(root: str | None = None) -> Path:
    """A fresh directory for disk weight syncs, named after this process, removed at its exit.

    A process killed without running exit handlers (Ray ends actors with SIGKILL at shutdown)
    leaves its directory behind, hundreds of MB a run: the next one removes every directory whose
    owner process is gone."""
    base = Path(root or tempfile.gettempdir())
    for old in base.glob(f"{SYNC_PREFIX}*"):
        pid = old.name[len(SYNC_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{SYNC_PREFIX}{os.getpid()}-", dir=base))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


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
    ) -> None:
        if not urls:
            raise ValueError("SGLangEngine needs at least one server URL")
        from grm.engines.openai_api import OpenAIEngine

        self.urls = [u.rstrip("/") for u in urls]
        self.model_id = model
        self.tokenizer = tokenizer
        self.version = 0
        self.tp = tp
        self.servers: list[ServerProcess] = []
        self.sync_dir: Path | None = None  # made on the first disk weight update, removed by close()
        # HTTP with retries on 429/5xx/timeouts, shared with the openai engine
        self._http = OpenAIEngine(self.urls[0], model, endpoint="chat", concurrency=concurrency, timeout_s=timeout_s)
        self._post_fn = post
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.urls)))
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: Any, model: str, *, tokenizer: Any = None, **_: Any) -> SGLangEngine:
        from grm.models import resolve_model

        path = resolve_model(model)
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path)
        urls = list(spec.urls)
        servers = []
        if not urls:
            if importlib.util.find_spec("sglang") is None:
                raise EngineError(f"engine type sglang launches SGLang servers, but sglang is not installed: {INSTALL_HINT}")
            for _ in range(spec.replicas):
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                servers.append(
                    ServerProcess(launch_command(path, port, spec), url, timeout_s=spec.launch_timeout_s, health_path="/health")
                )
                urls.append(url)
        eng = cls(urls, model, tokenizer, concurrency=spec.concurrency, timeout_s=spec.timeout_s, tp=spec.tp)
        eng.servers = servers
        return eng

    # ------------------------------------------------------------------ HTTP
    def _post(self, url: str, path: str, body: dict[str, Any]) -> Any:
        if self._post_fn is not None:
            return self._post_fn(url + path, body)
        return self._http.post_url(url + path, body)

    def _control(self, url: str, path: str, body: dict[str, Any]) -> Any:
        if self._post_fn is not None:
            return self._post_fn(url + path, body)
        return post_control(url + path, body, self.timeout_s)

    def _each_server(self, path: str, body: dict[str, Any] | None = None) -> list[Any]:
        outs = list(self._pool.map(lambda u: self._control(u, path, body or {}), self.urls))
        for u, o in zip(self.urls, outs, strict=False):
            if isinstance(o, dict) and o.get("success") is False:
                raise EngineError(f"{u}{path} failed: {o.get('message', o)}")
        return outs

    # ------------------------------------------------------------------ prompts
    def encode(self, request: GenerationRequest) -> list[int]:
        return self.tokenize(render_prompt(self.tokenizer, request))

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # ------------------------------------------------------------------ GenerationEngine
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        prompts = [self.encode(r) for r in requests]
        seeds = [r.seed if r.seed is not None else sampling.seed for r in requests]
        k = len(self.urls)
        shards = [list(range(i, len(prompts), k)) for i in range(k)]  # request i -> server i % k
        version = self.version

        def run(s: int) -> list[Any]:
            idx = shards[s]
            if not idx:
                return []
            out = self._post(
                self.urls[s], "/generate", generate_payload([prompts[i] for i in idx], sampling, [seeds[i] for i in idx])
            )
            return out if isinstance(out, list) else [out]

        results = list(self._pool.map(run, range(k)))
        gens: dict[tuple[int, int], Generation] = {}
        for s, rows in enumerate(results):
            if len(rows) != len(shards[s]) * sampling.n:
                raise EngineError(f"{self.urls[s]}/generate returned {len(rows)} rows for {len(shards[s]) * sampling.n}")
            for r, item in enumerate(rows):
                i, j = shards[s][r // sampling.n], r % sampling.n
                gens[(i, j)] = parse_generation(item, version=version, request_index=i, sample_index=j)
        return [gens[(i, j)] for i in range(len(prompts)) for j in range(sampling.n)]

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
        outs = list(self._http._pool.map(lambda jb: self._post(self.urls[jb[0] % k], "/generate", jb[2]), jobs))
        scores: list[list[float | None]] = [[None] * len(c) for c in continuations]
        for (i, kk, _, n), item in zip(jobs, outs, strict=True):
            scores[i][kk] = parse_continuation(item[0] if isinstance(item, list) else item, n)
        return scores

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
                (target / name).write_bytes((src / name).read_bytes())
        self.update_weights_from_disk(str(target), version)
        for old in self.sync_dir.iterdir():  # the servers hold the new weights: older copies are dead weight on disk
            if old != target:
                shutil.rmtree(old, ignore_errors=True)

    def update_weights_from_disk(self, path: str, version: int) -> None:
        """Pause rollouts, load ``path`` on every server, flush prefix caches, resume."""
        self._each_server("/pause_generation", {})
        try:
            self._each_server("/update_weights_from_disk", {"model_path": path, "weight_version": str(version)})
            self._each_server("/flush_cache", {})
        except BaseException:
            with contextlib.suppress(EngineError):  # the update's error says more than a failed resume
                self._each_server("/continue_generation", {})
            raise
        self._each_server("/continue_generation", {})
        self.version = version

    def init_weight_group(
        self,
        master_address: str,
        master_port: int,
        world_size: int,
        group_name: str = "weight_update_group",
        backend: str = "nccl",
    ) -> None:
        """Servers join an NCCL group with the trainer at rank 0 (ranks 1.. are the servers' GPUs)."""
        for s, url in enumerate(self.urls):
            body = {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": 1 + s * self.tp,
                "world_size": world_size,
                "group_name": group_name,
                "backend": backend,
            }
            out = self._control(url, "/init_weights_update_group", body)
            if isinstance(out, dict) and out.get("success") is False:
                raise EngineError(f"{url}/init_weights_update_group failed: {out.get('message')}")

    def announce_distributed_update(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]], version: int, group_name: str = "weight_update_group"
    ) -> None:
        """Tell every server to receive the named tensors from the group's broadcast (the trainer
        broadcasts them concurrently, in the same order)."""
        body = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "flush_cache": True,
            "weight_version": str(version),
        }
        self._each_server("/update_weights_from_distributed", body)
        self.version = version

    def close(self) -> None:
        for s in self.servers:
            s.stop()
        if self.sync_dir is not None:
            shutil.rmtree(self.sync_dir, ignore_errors=True)
