"""The policy endpoint's HTTP side: requests are read (a ``Content-Length`` body of at most
``MAX_BODY``, a loopback ``Host`` only), handed to the endpoint's ``handle`` and its JSON answer
written back; nothing reaches stderr, and a client that goes away mid-request is not an error."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grm.envs.openai_chat import MAX_BODY, WireError
from grm.http_host import HostCheck

_LOOPBACK = HostCheck("127.0.0.1")
"""The ``Host`` headers the endpoint answers: it listens on 127.0.0.1 only."""


class EndpointServer(ThreadingHTTPServer):
    """Serves ``handle(method, path, body) -> (status, JSON value)`` on 127.0.0.1 at a free port."""

    daemon_threads = True

    def __init__(self, handle: Callable[[str, str, bytes], tuple[int, dict[str, Any]]]) -> None:
        self.handle = handle
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-request: nothing to report, nothing on stderr


class _Handler(BaseHTTPRequestHandler):
    server_version = "grm-policy"
    protocol_version = "HTTP/1.1"  # keep-alive: an agent's client reuses its connection
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall
    timeout = 600  # an idle connection frees its thread
    server: EndpointServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self._answer("POST")

    def _answer(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        host = self.headers.get("Host")
        if not _LOOPBACK.allows(host):  # DNS rebinding: a web page's request through a name pointed at 127.0.0.1
            self.close_connection = True  # its body is left unread
            status = 403
            why = f"Host {(host or '')[:100]!r} is not this endpoint's (127.0.0.1, localhost or [::1]): refused"
            value = WireError(403, why, "permission_error").body()
        elif not 0 <= length <= MAX_BODY or "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            status, value = 413 if length > MAX_BODY else 400, WireError(400, "send a Content-Length of at most 32 MiB").body()
        else:
            body = self.rfile.read(length) if length else b""
            status, value = self.server.handle(method, self.path, body)
        data = json.dumps(value, ensure_ascii=False).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (ConnectionError, OSError):
            self.close_connection = True
