"""Real local HTTP servers for the engine tests (http.server in a thread on 127.0.0.1).

Each server records what arrived (method, path, headers, body), so a test can check where a key
went, and answers with ``answer(arrival)``: an ``Answer`` (status, body, headers), or a function
that writes the reply itself (a slow-loris, an endless body, a reply that is not HTTP). Such a
function is handed a stop event; every loop in one ends when the test closes the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Arrival:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)


Writer = Callable[[BaseHTTPRequestHandler, threading.Event], None]
Answerer = Callable[[Arrival], Answer | Writer]


class LocalServer:
    def __init__(self, answer: Answerer | None = None) -> None:
        self.arrivals: list[Arrival] = []
        self.answer: Answerer = answer or (lambda a: Answer())
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                arrival = Arrival(self.command, self.path, dict(self.headers), self.rfile.read(n))
                outer.arrivals.append(arrival)
                reply = outer.answer(arrival)
                if callable(reply):
                    try:
                        reply(self, outer.stop)
                    except OSError:  # the client hung up: what a bounded client does to these
                        pass
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                headers = {"Content-Length": str(len(reply.body)), **reply.headers}
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = _serve

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hangs up mid-reply is what these tests provoke

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def trickle_body(h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """Headers at once, then one byte of a long body every 50 ms: each read is quick, the reply never ends."""
    h.send_response(200)
    h.send_header("Content-Length", "1000000")
    h.end_headers()
    while not stop.is_set():
        h.wfile.write(b" ")
        time.sleep(0.05)


def trickle_headers(h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """A status line, then one header byte every 50 ms, forever."""
    h.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not stop.is_set():
        h.wfile.write(b"a")
        time.sleep(0.05)


def silence(h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """Accepts the request and never answers."""
    stop.wait()


def endless_body(h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """A chunked body that never ends, as fast as the client reads it."""
    h.send_response(200)
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    chunk = b"[" * 65536
    while not stop.is_set():
        h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def not_http(h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    h.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")


def cut_short(h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """Promises 100 bytes, sends 10, hangs up."""
    h.send_response(200)
    h.send_header("Content-Length", "100")
    h.end_headers()
    h.wfile.write(b'{"choices"')
