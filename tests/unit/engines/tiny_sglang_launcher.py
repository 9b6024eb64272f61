"""A stand-in for ``sglang.launch_server`` that only starts: it takes the flags grm passes, answers
``GET /health`` and ``GET /env`` (the ``CUDA_VISIBLE_DEVICES`` it was started with, as JSON)."""

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        data = json.dumps({"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for flag in ("--model-path", "--host", "--port", "--tp-size", "--dtype", "--mem-fraction-static"):
        ap.add_argument(flag)
    args = ap.parse_args()
    ThreadingHTTPServer((args.host, int(args.port)), Handler).serve_forever()
