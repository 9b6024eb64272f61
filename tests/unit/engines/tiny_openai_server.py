"""A minimal OpenAI-compatible server for tests that launch one (``engine.launch``):

    python tiny_openai_server.py PORT [--once FLAG]

answers ``GET /v1/models`` and ``POST /v1/chat/completions`` (the reply names this process's pid);
with ``--once FLAG`` it starts only while FLAG does not exist (it creates it), so a restart fails.
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _json(self, out):
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._json({"data": [{"id": "tiny"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        choice = {"index": 0, "message": {"role": "assistant", "content": f"pid {os.getpid()}"}, "finish_reason": "stop"}
        self._json({"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--once":
        flag = Path(sys.argv[3])
        if flag.exists():
            sys.exit(3)
        flag.touch()
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
