"""The policy behind an OpenAI-compatible endpoint (chat completions with tool calls), so agent code
that takes a base URL runs episodes that train with no re-tokenisation drift.

Each episode gets its own base URL (``open``): ``http://127.0.0.1:PORT/episodes/<token>/v1``, the
token random (128 bits) and the episode's alone, so only the agent given the URL can drive or end
the episode: not another process guessing ids, nor a web page. A web page can make the browser send
requests here through a name it points at 127.0.0.1 (DNS rebinding), so a request whose ``Host`` is
not 127.0.0.1, localhost or [::1] is answered 403 before anything else is read. Its first
request's messages and tools are rendered once by the chat template (``ChatTokens.prompt_ids``);
every later request must *extend* the episode's history: the earlier messages as they were, the
assistant messages as the endpoint returned them (content, and tool calls by name and arguments).
The new trailing messages (tool results, user turns) are the step's observations and enter the
context as the chat template's delta, exactly as ``EpisodeRunner`` adds an environment's answers:
the endpoint drives the same turn steps as the runner (``grm.envs.episode_state.EpisodeTurns``), so
turn recording, observation tokens, cutting and limits are one piece of code.
The context sent to the engine is therefore the prompt's ids, each turn's sampled ids and the
observations' ids, never the client's text re-tokenised.

The sampling is the pipeline's (``SamplingParams``): the client's ``temperature``, ``top_p``,
``seed`` and ``stop`` are ignored, since the trainer assumes the pipeline's; its ``max_tokens`` may
only lower ``max_new_tokens``. Each episode is sampled with its own seed every turn, as
``EpisodeRunner`` does. Requests of concurrent episodes are batched: a batcher thread takes what is
queued within ``window_s`` of the first and makes one ``engine.generate`` call for them (one per
distinct ``max_tokens``).

A request that rewrites the history or changes the tools is answered 400 naming the first differing
message, and ends the episode (``env_error``); a request past a limit (``max_turns``,
``max_tokens``, ``wall_time``) is answered 400 with the reason, which the episode ends with. Errors
are OpenAI's JSON ``{"error": {"message", "type", "code"}}``; nothing reaches the server's stderr.
An engine failure answers 500 and is kept in ``failure`` (the caller's run fails with it).
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from grm.data.trajectory import Task, Trajectory
from grm.engines.base import Generation, GenerationEngine, GenerationRequest, SamplingParams
from grm.envs.base import Observation, Step
from grm.envs.chat_tokens import ChatTokens
from grm.envs.endpoint_http import EndpointServer
from grm.envs.episode_state import Episode, EpisodeLimits, EpisodeTurns, describe
from grm.envs.openai_chat import (
    ChatRequest,
    WireError,
    completion,
    first_difference,
    models,
    read_request,
    reply_wire,
    template_message,
)


@dataclass
class _Live:
    """An open episode: the runner's state and what the client has seen (wire form)."""

    e: Episode
    opened: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    busy: bool = False
    closed: bool = False


@dataclass
class _Pending:
    context: list[int]
    seed: int | None
    max_new_tokens: int
    future: Future[Generation] = field(default_factory=Future)


class PolicyEndpoint:
    """An HTTP server on 127.0.0.1 (an ephemeral port) in a daemon thread, serving the policy's
    engine to any number of episodes; a context manager (``start``/``stop``)."""

    def __init__(
        self,
        engine: GenerationEngine,
        tokenizer: Any,
        sampling: SamplingParams,
        limits: EpisodeLimits | None = None,
        *,
        model: str | None = None,
        window_s: float = 0.02,
    ) -> None:
        if sampling.n != 1:
            raise ValueError(f"episodes sample one continuation per context (sampling.n = 1), got n={sampling.n}")
        self.turns = EpisodeTurns(ChatTokens(tokenizer), limits or EpisodeLimits())
        self.engine, self.tokenizer, self.sampling = engine, tokenizer, sampling
        self.model = model or engine.model_id
        self.window_s = window_s
        self.failure: BaseException | None = None
        """The first exception the engine raised (the caller's run should fail with it)."""
        self.generate_calls: list[int] = []
        """Requests per ``engine.generate`` call, in order."""
        self._episodes: dict[str, _Live] = {}
        self._ended: dict[str, str] = {}
        self._tokens: dict[str, str] = {}
        """The episode id of each base URL's token (kept once it ends: its late requests are told so)."""
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._stopping = threading.Event()
        self._server: EndpointServer | None = None
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> PolicyEndpoint:
        if self._server is None:
            self._stopping.clear()
            self._server = EndpointServer(self.handle)
            self._threads = [
                threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True),
                threading.Thread(target=self._batches, name="grm-endpoint-batcher", daemon=True),
            ]
            for t in self._threads:
                t.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        while not self._queue.empty():
            self._queue.get_nowait().future.set_exception(RuntimeError("the policy endpoint stopped"))
        self._server = None

    def __enter__(self) -> PolicyEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the policy endpoint is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ------------------------------------------------------------------ episodes

    def open(self, eid: str, seed: int | None = None, row: dict[str, Any] | None = None) -> str:
        """Start episode ``eid`` (sampled with ``seed`` every turn; ``row``: its data row, kept in
        the trajectory's task); its base URL (the OpenAI client appends ``/chat/completions``),
        which holds a random token of its own, not ``eid``."""
        token = secrets.token_urlsafe(16)
        with self._lock:
            if eid in self._episodes or eid in self._ended:
                raise ValueError(f"episode {eid!r} is already open or was closed")
            traj = Trajectory(eid, Task(dict(row or {}), []))
            self._episodes[eid] = _Live(Episode(traj, seed), time.monotonic())
            self._tokens[token] = eid
        return f"{self.url}/episodes/{token}/v1"

    def close(self, eid: str, reason: str = "done", detail: str | None = None) -> Trajectory:
        """End episode ``eid`` (with ``reason`` unless a limit or an error already ended it; an episode
        that never asked the policy anything ends ``env_error``) and return its trajectory. Its later
        requests are answered 400; a generation in flight for it is discarded."""
        with self._lock:
            live = self._episodes.get(eid)
        if live is None:
            raise ValueError(f"episode {eid!r} is not open")
        with live.lock:
            live.closed = True
            e = live.e
            if e.live:
                if reason == "done" and e.turns == 0:
                    reason, detail = "env_error", "the agent never asked the policy for a turn"
                self._end(live, reason, detail)
        with self._lock:
            del self._episodes[eid]
            self._ended[eid] = _ended(e)
        return e.traj

    def _end(self, live: _Live, reason: Any, detail: str | None) -> None:
        live.e.seconds = time.monotonic() - live.opened
        live.e.end(reason, detail)

    # ------------------------------------------------------------------ requests

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """The answer (status, JSON) to one HTTP request (its ``Host`` already checked); never raises."""
        try:
            parts = urlsplit(path).path.strip("/").split("/")
            if len(parts) < 4 or parts[0] != "episodes" or parts[2] != "v1":
                raise WireError(404, f"no route {path[:200]!r}: use the base URL open() gave", "not_found_error")
            token, route = unquote(parts[1]), "/".join(parts[3:])
            with self._lock:
                eid = self._tokens.get(token)
                live = self._episodes.get(eid) if eid is not None else None
                ended = self._ended.get(eid) if eid is not None else None
            if eid is None:
                raise WireError(404, f"no episode {token[:200]!r} is open on this endpoint", "not_found_error")
            if live is None:
                raise WireError(400, f"episode {eid!r} has ended ({ended})", "episode_ended", (ended or "").split(":")[0])
            if route == "models" and method == "GET":
                return 200, models(self.model)
            if route == "chat/completions" and method == "POST":
                return 200, self._chat(eid, live, read_request(body))
            raise WireError(404, f"no route {method} .../v1/{route[:100]}", "not_found_error")
        except WireError as x:
            return x.status, x.body()
        except Exception as x:  # noqa: BLE001 - a bug costs one answer, never the server
            return 500, WireError(500, f"the policy endpoint failed: {describe(x)}", "server_error").body()

    def _chat(self, eid: str, live: _Live, req: ChatRequest) -> dict[str, Any]:
        e = live.e
        with live.lock:
            if live.busy:
                raise WireError(409, f"episode {eid!r} already has a request in flight; send one at a time", "conflict_error")
            self._check_live(eid, live)
            e.seconds = time.monotonic() - live.opened
            self._first(live, req) if not live.seen else self._extend(live, req)
            self._check_live(eid, live)
            self.turns.may_generate(e, self.sampling)  # a turn starts only when a full max_new_tokens fits
            self._check_live(eid, live)
            live.busy = True
            context, seed = list(e.context), e.seed
        cap = min(self.sampling.max_new_tokens, req.max_tokens or self.sampling.max_new_tokens)
        try:
            gen = self._generate(_Pending(context, seed, cap))
        except BaseException:
            with live.lock:
                live.busy = False
            raise
        with live.lock:
            live.busy = False
            self._check_live(eid, live)
            message = self.turns.assistant_turn(e, gen)
            live.seen.append(reply_wire(gen.text, message.tool_calls))
            e.seconds = time.monotonic() - live.opened
        tokens = [self.tokenizer.decode([t]) for t in gen.token_ids]
        rid = f"chatcmpl-{quote(eid, safe='')}-{e.turns}"
        return completion(rid, req.model or self.model, gen, message.tool_calls, context, tokens)

    def _check_live(self, eid: str, live: _Live) -> None:
        if live.closed or not live.e.live:
            raise WireError(400, f"episode {eid!r} has ended ({_ended(live.e)})", "episode_ended", live.e.traj.end_reason)

    def _first(self, live: _Live, req: ChatRequest) -> None:
        """The task: the first request's messages and tools, rendered once as the prompt's ids."""
        e = live.e
        e.traj.task.messages = [template_message(m) for m in req.messages]
        e.traj.task.tools = list(req.tools)
        e.tools, e.history = list(req.tools), [template_message(m) for m in req.messages]
        live.seen, live.tools = list(req.messages), list(req.tools)
        try:
            e.context = self.turns.chat.prompt_ids(e.history, e.tools)
        except Exception as x:  # noqa: BLE001 - a template that cannot render this task ends it
            self._end(live, "env_error", f"rendering the task: {describe(x)}")
            return
        e.traj.prompt_ids = list(e.context)

    def _extend(self, live: _Live, req: ChatRequest) -> None:
        """The new trailing messages as the step's observations (``EpisodeRunner._after_step``), or
        the episode ended ``env_error`` when the request does not extend its history."""
        e = live.e
        why = "the tools differ from the episode's first request" if req.tools != live.tools else None
        why = why or first_difference(live.seen, req.messages)
        new = req.messages[len(live.seen) :]
        if why is None and not new:
            why = "no new message after the assistant's turn (send the tool results or the user's reply)"
        bad = [len(live.seen) + i for i, m in enumerate(new) if m["role"] not in ("tool", "user")]
        if why is None and bad:
            role = req.messages[bad[0]]["role"]
            why = f"messages[{bad[0]}] is a {role} message: only tool and user messages may follow the assistant's turn"
        if why is not None:
            self._end(live, "env_error", why)
            raise WireError(400, f"{why}; the episode has ended (env_error)", "invalid_request_error", "env_error")
        names = {c.id: c.name for t in e.traj.turns for c in t.tool_calls}
        observations = [
            Observation(m["role"], m["content"], m.get("name") or names.get(m.get("tool_call_id") or ""), m.get("tool_call_id"))
            if m["role"] == "tool"
            else Observation("user", m["content"])
            for m in new
        ]
        self.turns.after_step(e, Step(observations), self.sampling)
        live.seen += new

    # ------------------------------------------------------------------ batching

    def _generate(self, p: _Pending) -> Generation:
        if self.failure is not None:
            raise WireError(500, f"the policy engine failed: {describe(self.failure)}", "server_error")
        self._queue.put(p)
        try:
            return p.future.result()
        except WireError:
            raise
        except BaseException as x:  # noqa: BLE001 - the engine's failure, kept in self.failure
            raise WireError(500, f"the policy engine failed: {describe(x)}", "server_error") from None

    def _batches(self) -> None:
        """Takes what is queued within ``window_s`` of the first request and generates it in one call."""
        while not self._stopping.is_set():
            try:
                batch = [self._queue.get(timeout=0.05)]
            except queue.Empty:
                continue
            deadline = time.monotonic() + self.window_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    batch.append(self._queue.get(timeout=left))
                except queue.Empty:
                    break
            for cap in sorted({p.max_new_tokens for p in batch}):
                self._run([p for p in batch if p.max_new_tokens == cap], cap)

    def _run(self, batch: list[_Pending], cap: int) -> None:
        requests = [GenerationRequest(token_ids=p.context, seed=p.seed) for p in batch]
        try:
            self.generate_calls.append(len(batch))
            gens = self.engine.generate(requests, self.sampling.replace(max_new_tokens=cap))
            if len(gens) != len(batch):
                raise RuntimeError(f"engine returned {len(gens)} generations for {len(batch)} requests")
        except BaseException as x:  # noqa: BLE001 - handed to every waiting request; the run's failure
            self.failure = self.failure or x
            for p in batch:
                p.future.set_exception(x)
            return
        for p, g in zip(batch, gens, strict=True):
            p.future.set_result(g)


def _ended(e: Episode) -> str:
    return f"{e.traj.end_reason}" + (f": {e.traj.end_detail}" if e.traj.end_detail else "")
