"""A stand-in for an SGLang server, for tests on a machine without CUDA: the part of SGLang's
native HTTP API grm calls, served by a transformers model on the CPU in fp32.

    python -m tests.serving.sglang_standin --model-path DIR --port N [--weight-version default]

Endpoints, with SGLang's request and response shapes (sglang/srt/entrypoints/http_server.py):

- ``POST /generate``: ``input_ids`` (one list, or a batch of lists), ``sampling_params`` (one dict,
  or one per row: temperature, top_p, top_k, max_new_tokens, stop, stop_token_ids, ignore_eos,
  sampling_seed), ``return_logprob``, ``logprob_start_len``. Answers one row dict, or a list for a
  batch: ``text``, ``output_ids``, ``meta_info`` (finish_reason ``{"type": "stop"|"length"|"abort"}``,
  prompt/completion tokens, ``weight_version``, and ``input_token_logprobs`` /
  ``output_token_logprobs`` as ``[logprob, token_id, None]`` rows; the first input token has
  ``None``). Log-probs are of the raw logits (temperature, top-p and top-k only shape sampling), as
  SGLang returns them by default.
- ``POST /update_weights_from_disk`` ``{"model_path", "weight_version"}``: loads the directory's
  safetensors into the live model in place (a tied LM head may be absent); waits for in-flight
  requests; ``{"success", "message", "num_paused_requests"}``, HTTP 400 on failure with the old
  weights kept. On success ``/get_model_info`` reports the new ``model_path`` and ``weight_version``.
- ``POST /init_weights_update_group`` ``{"master_address", "master_port", "rank_offset",
  "world_size", "group_name", "backend"}``: joins the trainer's weight-update group (gloo here; the
  trainer hosts the store at rank 0), answering once the group has formed.
- ``POST /update_weights_from_distributed`` ``{"names", "dtypes", "shapes", "group_name",
  "weight_version", "flush_cache"}``: receives each tensor by broadcast from rank 0, in order (all
  of them, so the group stays in step), checks names and shapes, then copies them in; waits for
  in-flight requests like a disk update.
- ``POST /pause_generation`` (mode ``abort``: in-flight rows end with finish_reason ``abort``; new
  requests wait) and ``POST /continue_generation``.
- ``GET|POST /flush_cache``: plain text, as SGLang answers (HTTP 400 while requests run).
- ``GET /get_model_info``, ``GET /get_weight_version``, ``GET /health``, ``GET /health_generate``.

A batch of generation rows is decoded together (left-padded, one forward per token for all rows,
as SGLang batches what it runs; no continuous batching across requests); a batch that asks for
input log-probs (``logprob_start_len`` >= 0) runs row by row. Sampling is seeded per row by
``sampling_seed``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


class BadRequest(ValueError):
    """A request SGLang would refuse (HTTP 400)."""


class StandIn:
    """The served model, its weights version, and the pause / update bookkeeping."""

    def __init__(self, model_path: str, weight_version: str = "default") -> None:
        self.model_path = model_path
        self.weight_version = weight_version
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        cfg = self.model.generation_config.eos_token_id
        eos = cfg if isinstance(cfg, list) else [cfg]
        self.eos_ids = {int(t) for t in [*eos, self.tokenizer.eos_token_id] if t is not None}
        self.tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        # readers (requests) and a writer (weight update) on one condition: an update waits for
        # the rows in flight, a paused or updating server holds new requests until it resumes
        self._cond = threading.Condition()
        self._active = 0
        self._paused = False
        self._updating = False
        self._abort_epoch = 0
        self.groups: dict[str, Any] = {}
        """Weight-update process groups joined (``/init_weights_update_group``), by name."""

    # ------------------------------------------------------------------ generate
    def generate(self, body: dict[str, Any]) -> Any:
        ids = body.get("input_ids")
        if not isinstance(ids, list) or not ids:
            raise BadRequest("the stand-in serves input_ids only (a list of token ids, or a batch of lists)")
        batch = isinstance(ids[0], list)
        rows = ids if batch else [ids]
        params = body.get("sampling_params") or {}
        params = params if isinstance(params, list) else [params] * len(rows)
        if len(params) != len(rows):
            raise BadRequest(f"{len(rows)} input_ids rows but {len(params)} sampling_params")
        lp, start = bool(body.get("return_logprob")), int(body.get("logprob_start_len", -1))
        with self._cond:
            self._cond.wait_for(lambda: not self._paused and not self._updating)
            self._active += 1
            epoch = self._abort_epoch
        try:
            ids = [[int(t) for t in r] for r in rows]
            if len(rows) > 1 and start < 0 and all(int(p.get("max_new_tokens", 128)) > 0 for p in params):
                out = self._batch(ids, params, lp, epoch)
            else:
                out = [self._row(r, p, lp, start, epoch) for r, p in zip(ids, params, strict=True)]
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()
        return out if batch else out[0]

    @torch.inference_mode()
    def _batch(self, rows: list[list[int]], params: list[dict[str, Any]], want_lp: bool, epoch: int) -> list[dict[str, Any]]:
        """Generation rows decoded together: left-padded prefill, then one forward per token for
        every row (a finished row rides along, its tokens ignored); each row samples from its own
        logits with its own seeded generator, so its output is what ``_row`` would give it up to
        float rounding. A pause ends every unfinished row with ``abort``."""
        t0 = time.perf_counter()
        B, L = len(rows), max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((B, L), pad, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, L - len(r) :] = torch.tensor(r)
            attn[b, L - len(r) :] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1].float()
        version = self.weight_version
        decoding = [_Decoding(p, self.eos_ids) for p in params]
        while any(d.finish is None for d in decoding):
            if self._abort_epoch != epoch:
                for d in decoding:
                    d.abort()
                break
            nxt = torch.full((B,), pad, dtype=torch.long)
            for b, d in enumerate(decoding):
                if d.finish is None:
                    nxt[b] = d.step(logits[b], self.tokenizer)
            if all(d.finish is not None for d in decoding):
                break
            attn = torch.cat([attn, attn.new_ones((B, 1))], dim=1)
            step_out = self.model(
                input_ids=nxt[:, None],
                attention_mask=attn,
                position_ids=attn.sum(-1, keepdim=True) - 1,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = step_out.past_key_values, step_out.logits[:, -1].float()
        latency = time.perf_counter() - t0
        meta = [{"id": uuid.uuid4().hex, "prompt_tokens": len(r), "weight_version": version} for r in rows]
        return [d.reply(m, want_lp, latency) for d, m in zip(decoding, meta, strict=True)]

    def _row(self, ids: list[int], sp: dict[str, Any], want_lp: bool, start: int, epoch: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        d = _Decoding(sp, self.eos_ids)
        out = self.model(input_ids=torch.tensor([ids]), use_cache=True)
        meta: dict[str, Any] = {"id": uuid.uuid4().hex, "prompt_tokens": len(ids), "weight_version": self.weight_version}
        if want_lp:
            first = len(ids) - 1 if start < 0 else min(start, len(ids) - 1)
            logp = torch.log_softmax(out.logits[0, max(first - 1, 0) : -1].float(), -1)
            rows: list[list[Any]] = [[None, ids[0], None]] if first == 0 else []
            targets = ids[max(first, 1) :]
            rows += [[float(logp[k, t]), t, None] for k, t in enumerate(targets)]
            meta["input_token_logprobs"] = rows
        cache, logits = out.past_key_values, out.logits[0, -1].float()
        while d.finish is None:
            if self._abort_epoch != epoch:
                d.abort()
                break
            tok = d.step(logits, self.tokenizer)
            if d.finish is not None:
                break
            step = self.model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            cache, logits = step.past_key_values, step.logits[0, -1].float()
        return d.reply(meta, want_lp, time.perf_counter() - t0)

    # ------------------------------------------------------------------ weights
    def update_weights_from_disk(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        path = body.get("model_path")
        if not path:
            return 400, {"success": False, "message": "model_path is required", "num_paused_requests": 0}
        with self._cond:
            if body.get("abort_all_requests"):
                self._abort_epoch += 1
            self._updating = True
            self._cond.wait_for(lambda: self._active == 0)
        try:
            ok, message = self._load(Path(path))
            if ok:
                self.model_path = str(path)
                if body.get("weight_version") is not None:
                    self.weight_version = str(body["weight_version"])
                    message += f" Weight version updated to {self.weight_version}."
        finally:
            with self._cond:
                self._updating = False
                self._cond.notify_all()
        return (200 if ok else 400), {"success": ok, "message": message, "num_paused_requests": 0}

    @torch.no_grad()
    def _load(self, path: Path) -> tuple[bool, str]:
        """Every tensor checked before any is copied: a failed update keeps the old weights."""
        from safetensors.torch import load_file

        files = sorted(path.glob("*.safetensors"))
        if not files:
            return False, f"Failed to update weights: no *.safetensors in {path}. Rolling back to the old weights."
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        live = self.model.state_dict()
        problems = [f"unexpected {k}" for k in sorted(set(state) - set(live))]
        problems += [f"missing {k}" for k in sorted(set(live) - set(state) - self.tied)]
        problems += [
            f"{k}: shape {list(v.shape)} != {list(live[k].shape)}"
            for k, v in state.items()
            if k in live and v.shape != live[k].shape
        ]
        if problems:
            return False, f"Failed to update weights: {'; '.join(problems[:5])}. Rolling back to the old weights."
        for k, v in state.items():
            live[k].copy_(v)  # in place: a tied LM head shares the embedding's storage
        return True, "Succeeded to update model weights."

    def init_weights_update_group(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        import datetime

        import torch.distributed as dist

        try:
            address, port = str(body["master_address"]), int(body["master_port"])
            rank, world = int(body["rank_offset"]), int(body["world_size"])
        except (KeyError, TypeError, ValueError) as e:
            return 400, {"success": False, "message": f"Failed to init group: bad request ({e!r})."}
        name, backend = str(body.get("group_name", "weight_update_group")), body.get("backend", "nccl")
        if backend != "gloo":
            message = f"Failed to init group: the stand-in runs on the CPU (gloo), not {backend}."
            return 400, {"success": False, "message": message}
        timeout = datetime.timedelta(seconds=300)
        store = dist.PrefixStore(name, dist.TCPStore(address, port, world, False, timeout=timeout))
        self.groups[name] = dist.ProcessGroupGloo(store, rank, world, timeout)
        return 200, {"success": True, "message": "Succeeded to initialize custom process group."}

    @torch.no_grad()
    def update_weights_from_distributed(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        import torch.distributed as dist

        group = self.groups.get(str(body.get("group_name", "weight_update_group")))
        if group is None:
            message = "Failed to update weights: no such group (init_weights_update_group first)."
            return 400, {"success": False, "message": message}
        names, dtypes, shapes = body.get("names") or [], body.get("dtypes") or [], body.get("shapes") or []
        if not (len(names) == len(dtypes) == len(shapes)):
            return 400, {"success": False, "message": "Failed to update weights: names, dtypes and shapes differ in length."}
        with self._cond:
            self._updating = True
            self._cond.wait_for(lambda: self._active == 0)
        try:
            opts = dist.BroadcastOptions()
            opts.rootRank = 0
            received = {}
            for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
                t = torch.empty([int(x) for x in shape], dtype=getattr(torch, str(dtype)))
                group.broadcast([t], opts).wait()
                received[name] = t
            live = self.model.state_dict()
            problems = [f"unexpected {k}" for k in received if k not in live]
            problems += [
                f"{k}: shape {list(v.shape)} != {list(live[k].shape)}"
                for k, v in received.items()
                if k in live and v.shape != live[k].shape
            ]
            if problems:
                return 400, {"success": False, "message": f"Failed to update weights: {'; '.join(problems[:5])}."}
            for k, v in received.items():
                live[k].copy_(v)
            if body.get("weight_version") is not None:
                self.weight_version = str(body["weight_version"])
            return 200, {"success": True, "message": "Succeeded to update parameter online."}
        finally:
            with self._cond:
                self._updating = False
                self._cond.notify_all()

    # ------------------------------------------------------------------ control
    def pause(self) -> None:
        """Mode ``abort``: rows in flight end now, new requests wait for ``resume``."""
        with self._cond:
            self._paused = True
            self._abort_epoch += 1
            self._cond.wait_for(lambda: self._active == 0)

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def busy(self) -> bool:
        with self._cond:
            return self._active > 0

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self.weight_version,
        }


class _Decoding:
    """One generation row under SGLang's rules: its sampling parameters (temperature, top-k, top-p,
    its own seeded generator), what it has generated, and why it finished (an end token, a stop
    string, which is cut from the text, or ``max_new_tokens``); ``StandIn._row`` and ``_batch``
    decode every row through one."""

    def __init__(self, sp: dict[str, Any], eos_ids: set[int]) -> None:
        self.sp = sp
        self.max_new = int(sp.get("max_new_tokens", 128))
        self.temperature = float(sp.get("temperature", 1.0))
        stops = sp.get("stop") or []
        self.stops = [stops] if isinstance(stops, str) else list(stops)
        self.stop_ids = set(sp.get("stop_token_ids") or []) | (set() if sp.get("ignore_eos") else eos_ids)
        seed = sp.get("sampling_seed")
        self.gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        self.tokens: list[int] = []
        self.logps: list[float] = []
        self.text = ""
        self.finish: dict[str, Any] | None = None if self.max_new > 0 else {"type": "length", "length": 0}

    def step(self, logits: torch.Tensor, tokenizer: Any) -> int:
        """Samples the next token from ``logits`` [V], records it, and finishes the row if it ends it."""
        tok = self.sample(logits)
        self.tokens.append(tok)
        self.logps.append(float(torch.log_softmax(logits, -1)[tok]))
        self.text = tokenizer.decode(self.tokens, skip_special_tokens=True)
        hit = min(((self.text.find(s), s) for s in self.stops if s and s in self.text), default=None)
        if tok in self.stop_ids:
            self.finish = {"type": "stop", "matched": tok}
        elif hit is not None:
            self.text, self.finish = self.text[: hit[0]], {"type": "stop", "matched": hit[1]}
        elif len(self.tokens) >= self.max_new:
            self.finish = {"type": "length", "length": self.max_new}
        return tok

    def abort(self) -> None:
        """A pause ended the row (SGLang's abort of the requests in flight)."""
        if self.finish is None:
            self.finish = {"type": "abort", "message": "Abort in waiting queue (generation paused)"}

    def reply(self, meta: dict[str, Any], want_lp: bool, latency: float) -> dict[str, Any]:
        """The row as ``/generate`` answers it, ``meta`` completed."""
        meta.update(finish_reason=self.finish, completion_tokens=len(self.tokens), cached_tokens=0, e2e_latency=latency)
        if want_lp:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(self.logps, self.tokens, strict=True)]
        return {"text": self.text, "output_ids": self.tokens, "meta_info": meta}

    def sample(self, logits: torch.Tensor) -> int:
        sp, gen = self.sp, self.gen
        if self.temperature <= 1e-5:  # SGLang samples greedily below this
            return int(logits.argmax())
        scores = logits / self.temperature
        top_k = int(sp.get("top_k", -1))
        if 0 < top_k < scores.numel():
            scores = scores.masked_fill(scores < torch.topk(scores, top_k).values[-1], float("-inf"))
        top_p = float(sp.get("top_p", 1.0))
        if top_p < 1.0:
            sorted_scores, idx = torch.sort(scores, descending=True)
            probs = torch.softmax(sorted_scores, -1)
            drop = probs.cumsum(-1) - probs > top_p  # keep the token that crosses top_p
            scores = torch.full_like(scores, float("-inf")).scatter(0, idx, sorted_scores.masked_fill(drop, float("-inf")))
        return int(torch.multinomial(torch.softmax(scores, -1), 1, generator=gen))


def handler(served: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet: tests read their own output
            pass

        def _send(self, status: int, payload: Any, text: bool = False) -> None:
            data = payload.encode() if text else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n)) if n else {}

        def do_GET(self) -> None:
            self._route("GET", {})

        def do_POST(self) -> None:
            try:
                body = self._body()
            except ValueError as e:
                return self._send(400, {"object": "error", "message": f"invalid JSON: {e}", "code": 400})
            self._route("POST", body)

        def _route(self, method: str, body: dict[str, Any]) -> None:
            path = self.path.split("?", 1)[0]
            try:
                if path in ("/health", "/health_generate"):
                    self._send(200, "", text=True)
                elif path == "/get_model_info":
                    self._send(200, served.model_info())
                elif path == "/get_weight_version":
                    self._send(200, {"weight_version": served.weight_version})
                elif path == "/flush_cache":
                    self._send(400 if served.busy() else 200, FLUSHED, text=True)
                elif path == "/generate" and method == "POST":
                    self._send(200, served.generate(body))
                elif path == "/update_weights_from_disk" and method == "POST":
                    self._send(*served.update_weights_from_disk(body))
                elif path == "/init_weights_update_group" and method == "POST":
                    self._send(*served.init_weights_update_group(body))
                elif path == "/update_weights_from_distributed" and method == "POST":
                    self._send(*served.update_weights_from_distributed(body))
                elif path == "/pause_generation" and method == "POST":
                    served.pause()
                    self._send(200, {"message": "Generation paused successfully.", "status": "ok"})
                elif path == "/continue_generation" and method == "POST":
                    served.resume()
                    self._send(200, {"message": "Generation continued successfully.", "status": "ok"})
                else:
                    self._send(404, {"detail": "Not Found"})
            except BadRequest as e:
                self._send(400, {"object": "error", "message": str(e), "type": "Bad Request", "code": 400})

    return Handler


def serve(served: StandIn, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A started server (``server_address`` has the port); ``shutdown()`` stops it."""
    httpd = ThreadingHTTPServer((host, port), handler(served))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--weight-version", default="default")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    # sglang.launch_server flags grm passes when it launches a server: accepted, not used
    for flag in ("--tp-size", "--dtype", "--mem-fraction-static"):
        ap.add_argument(flag)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    httpd = serve(StandIn(args.model_path, args.weight_version), args.host, args.port)
    print(f"sglang stand-in serving {args.model_path} on http://{args.host}:{httpd.server_address[1]}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
