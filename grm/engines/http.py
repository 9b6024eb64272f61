"""HTTP to model servers, bounded in time, bytes and trust; the openai and sglang engines share it.

urllib from the standard library (it keeps proxies from the environment and verified TLS), with
three policies of our own:

- Credentials belong to an origin (scheme, host, port). An ``Authorization`` header goes only to
  the origin it was given for, whatever URL a caller passes, and never through urllib's redirect
  handler, which re-sends every header to wherever a 302 points (issue #39).
- Redirects are ours. One to another origin is never followed: the request carries the prompts
  and the key, and only the configured server is trusted with them. Within the origin, 307 and
  308 are followed (at most ``MAX_HOPS``): they keep method and body (RFC 9110 15.4.8-9), so the
  replay is the same request to a server that already holds the key. 301/302/303 may turn a POST
  into a GET without its body, which no inference API answers: they fail with the ``Location`` to
  configure instead. A GET (health checks) follows all five within the origin.
- One deadline per exchange. Socket timeouts bound each read, not the exchange: a server that
  sends a byte every few seconds holds a worker forever. A timer shuts the connection's socket at
  ``timeout_s``, through connect, TLS, headers and body. Bodies are read up to a byte limit.

Every message is built through ``HttpClient.fail``, which applies ``grm.engines.credentials``:
URLs without ``user:password@``, server text as one bounded line of plain text, every spelling
of a credential replaced by ``[redacted]``.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from grm.engines.base import EngineError, EngineRefused
from grm.engines.credentials import Credentials, origin, plain, public_url

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_HOPS = 5
ERROR_BODY_BYTES = 64 * 1024
"""Bytes read of a reply that is not a success (a message shows ``SHOWN_CHARS`` of them)."""


class Retryable(EngineError):
    """A failure another attempt may not meet: a timeout, a refused or dropped connection."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    url: str
    """The URL that answered (after same-origin redirects), without userinfo."""
    location: str | None = None


class _Watch:
    """Shuts down the sockets of one exchange at its deadline, whatever they are waiting for."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._conns: list[http.client.HTTPConnection] = []
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Watch:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def track(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conns.append(conn)

    def connected(self, sock: socket.socket) -> None:
        """Keep the connected socket: urllib drops ``conn.sock`` once the headers are read, while
        the response goes on reading from it. Either _expire sees it here, or we see expired."""
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                raise TimeoutError("deadline passed")

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            socks = self._socks + [c.sock for c in self._conns if c.sock is not None]  # + one still connecting
        for sock in socks:  # the plain socket's shutdown, also under TLS: wakes any blocked read
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watched:
    """An http.client connection its exchange's ``_Watch`` can cut."""

    def __init__(self, *args: Any, watch: _Watch, **kw: Any) -> None:
        super().__init__(*args, **kw)  # type: ignore[call-arg]
        self._watch = watch
        watch.track(self)  # type: ignore[arg-type]

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._watch.connected(self.sock)  # type: ignore[attr-defined]


class _HTTP(_Watched, http.client.HTTPConnection):
    pass


class _HTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _Request(urllib.request.Request):
    watch: _Watch


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: _Request) -> http.client.HTTPResponse:  # type: ignore[override]
        return self.do_open(functools.partial(_HTTP, watch=req.watch), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: _Request) -> http.client.HTTPResponse:  # type: ignore[override]
        return self.do_open(functools.partial(_HTTPS, watch=req.watch), req)


def _opener() -> urllib.request.OpenerDirector:
    # No redirect handler (redirects are ours) and no error processor (every status is a Reply).
    opener = urllib.request.OpenerDirector()
    for h in (urllib.request.ProxyHandler(), _HTTPHandler(), _HTTPSHandler(), urllib.request.UnknownHandler()):
        opener.add_handler(h)
    return opener


class _TooLarge(Exception):
    pass


def _read(resp: http.client.HTTPResponse, cap: int, *, cut: bool) -> bytes:
    """At most ``cap`` bytes of the body; more is ``_TooLarge`` unless ``cut``."""
    declared = resp.headers.get("Content-Length", "")
    if not cut and declared.isdigit() and int(declared) > cap:
        raise _TooLarge
    chunks, n = [], 0
    while n <= cap:
        chunk = resp.read(min(1 << 16, cap + 1 - n))
        if not chunk:
            break
        chunks.append(chunk)
        n += len(chunk)
    if n > cap and not cut:
        raise _TooLarge
    body = b"".join(chunks)[:cap]
    if not cut and declared.isdigit() and n < int(declared):  # http.client returns a cut body as if whole
        raise http.client.IncompleteRead(body, int(declared) - n)
    return body


class HttpClient:
    """JSON over HTTP under the policies above; one instance serves many threads."""

    def __init__(
        self,
        *,
        timeout_s: float,
        max_reply_bytes: int,
        max_retries: int = 0,
        backoff_s: float = 0.5,
        credentials: Credentials | None = None,
    ) -> None:
        self.timeout_s, self.max_reply_bytes = timeout_s, max_reply_bytes
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.credentials = credentials or Credentials()
        self.requests = 0
        """Successful JSON replies."""
        self.retries = 0
        self.before_retry: Callable[[], None] | None = None
        """Called before each retry (the openai engine restarts a launched server that died)."""
        self._lock = threading.Lock()
        self._opener = _opener()

    def __repr__(self) -> str:
        return f"HttpClient(timeout_s={self.timeout_s}, {self.credentials!r})"

    def redact(self, text: str) -> str:
        return self.credentials.redact(text)

    def fail(self, message: str, kind: type[EngineError] = EngineError) -> EngineError:
        """An error whose message holds no credential (build every message through this)."""
        return kind(self.redact(message))

    def shown(self, body: bytes) -> str:
        """A reply body for a message: its first ``ERROR_BODY_BYTES`` redacted (a key the cut split
        included), then one bounded line of plain text."""
        head = body[:ERROR_BODY_BYTES].decode("utf-8", errors="replace")
        return plain(self.credentials.redact_cut(head) if len(body) >= ERROR_BODY_BYTES else self.redact(head)) or "(empty body)"

    # ------------------------------------------------------------------ JSON with retries
    def post_json(self, url: str, body: Any) -> Any:
        """POST ``body`` as JSON; a 2xx JSON reply is returned. 429, 5xx, timeouts and dropped
        connections are retried with exponential backoff; anything else fails at once."""
        data = json.dumps(body).encode()
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self._lock:
                    self.retries += 1
                if self.before_retry is not None:
                    self.before_retry()
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                reply = self.exchange("POST", url, data)
            except Retryable as e:
                last = str(e)
                continue
            if reply.status == 429 or 500 <= reply.status <= 599:
                last = f"HTTP {reply.status}: {self.shown(reply.body)}"
                continue
            if not 200 <= reply.status <= 299:
                raise self.fail(f"{reply.url}: HTTP {reply.status} (not retried): {self.shown(reply.body)}", EngineRefused)
            out = self.parse_json(reply)
            with self._lock:
                self.requests += 1
            return out
        raise self.fail(f"{public_url(url)}: gave up after {self.max_retries + 1} attempts; last error: {last}")

    def parse_json(self, reply: Reply) -> Any:
        try:
            return json.loads(reply.body)
        except RecursionError:
            why = "nested too deeply"
        except UnicodeDecodeError:
            why = "not UTF-8"
        except ValueError as e:
            why = getattr(e, "msg", None) or "invalid"
        raise self.fail(f"{reply.url}: the reply is not JSON ({why}): {self.shown(reply.body)}")

    # ------------------------------------------------------------------ one exchange
    def exchange(self, method: str, url: str, data: bytes | None = None) -> Reply:
        """One request within one deadline, following same-origin redirects as described above;
        any other status comes back as a Reply. Retryable for timeouts and connection failures."""
        try:
            start, current = origin(url), public_url(url)
        except EngineError as e:
            raise self.fail(str(e)) from None
        deadline = time.monotonic() + self.timeout_s
        for _ in range(MAX_HOPS + 1):
            reply = self._once(method, current, data, deadline)
            if reply.status not in REDIRECTS:
                return reply
            if not reply.location:
                raise self.fail(f"{current}: HTTP {reply.status} redirect without a Location")
            try:
                target = public_url(urljoin(current, reply.location.strip()))
                same = origin(target) == start
            except (ValueError, EngineError):  # not a URL (``http://[::1``): nowhere to go, surely not here
                target, same = reply.location, False
            shown = plain(self.redact(target))
            if not same:
                raise self.fail(
                    f"{current}: HTTP {reply.status} redirect to another origin ({shown}) not followed: the request "
                    "carries the prompts and any key, which go only to the configured server; configure the URL "
                    "of the server that answers"
                )
            if method != "GET" and reply.status not in (307, 308):
                raise self.fail(
                    f"{current}: HTTP {reply.status} redirect to {shown} not followed: it would turn the {method} into "
                    "a GET without its body; configure that URL instead"
                )
            current = target
        raise self.fail(f"{public_url(url)}: more than {MAX_HOPS} redirects")

    def _once(self, method: str, url: str, data: bytes | None, deadline: float) -> Reply:
        headers = {"Content-Type": "application/json"} if data is not None else {}
        auth = self.credentials.header_for(url)
        if auth:
            headers["Authorization"] = auth
        remaining = deadline - time.monotonic()
        error: Exception | None = None
        with _Watch(remaining) as watch:
            try:
                req = _Request(url, data=data, headers=headers, method=method)
                req.watch = watch
                with self._opener.open(req, timeout=max(remaining, 0.001)) as resp:
                    ok = 200 <= resp.status <= 299
                    body = _read(resp, self.max_reply_bytes if ok else ERROR_BODY_BYTES, cut=not ok)
                    status, location = resp.status, resp.headers.get("Location")
            except _TooLarge:
                raise self.fail(f"{url}: the reply is larger than {self.max_reply_bytes} bytes; not read further") from None
            except (http.client.HTTPException, OSError, ValueError) as e:
                error = e
        cause = error.reason if isinstance(error, urllib.error.URLError) else error
        if watch.expired or isinstance(cause, TimeoutError):  # the watch, or a socket timeout that beat it
            raise self.fail(f"{url}: no complete reply within {self.timeout_s:g} s", Retryable)
        if isinstance(cause, ssl.SSLCertVerificationError):  # another attempt meets the same certificate
            raise self.fail(f"{url}: the server's TLS certificate was not accepted ({plain(str(cause), 200)})")
        if isinstance(error, (http.client.IncompleteRead, OSError)):  # refused, reset, cut short
            raise self.fail(f"{url}: {plain(self.redact(_reason(error)), 200)}", Retryable)
        if error is not None:  # a reply that is not HTTP; a URL http.client refuses
            detail = plain(self.redact(f"{type(error).__name__}: {error}"), 200)
            raise self.fail(f"{url}: the exchange is not valid HTTP ({detail})")
        return Reply(status, body, url, location)


def _reason(e: BaseException) -> str:
    if isinstance(e, http.client.IncompleteRead):
        return f"the connection closed after {len(e.partial)} bytes of the reply"
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    return f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else str(reason)
