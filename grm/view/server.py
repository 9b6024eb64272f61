"""The ``grm view`` server: stdlib ThreadingHTTPServer, a JSON API over the opened directories and
the static page shipped in ``grm/view/static`` (no build step, nothing fetched from elsewhere).

The stdlib server is enough here: one local user, a handful of requests per click, and no new
dependency in the wheel. Only files the API names are read: a directory is picked by its index in
the command line, a static file or a run's top-level file by a name that must appear in a listing.
"""

from __future__ import annotations

import json
import mimetypes
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from grm.base import GrmError, json_safe
from grm.view.eval_dir import PAIR_FILTERS, EvalDir, disagreements
from grm.view.run_dir import SAMPLE_FILTERS, SAMPLE_SORTS, RunDir

TEXT_FILE_LIMIT = 2 * 2**20
"""Largest top-level file of a directory the page shows as text (report.md, a gate's JSON)."""
_SHOWN_FILES = (".md", ".json", ".yaml", ".yml", ".txt", ".log")


class ViewError(GrmError):
    """A path given to ``grm view`` is not a run or eval directory."""


def dir_kind(path: Path) -> str:
    """'run' or 'eval', from the files a directory holds; ViewError otherwise."""
    if not path.is_dir():
        raise ViewError(f"{path}: not a directory")
    if (path / "results.jsonl").exists() or (path / "metrics.json").exists():
        return "eval"
    if any((path / f).exists() for f in ("metrics.jsonl", "samples.jsonl", "placement.json")):
        return "run"
    cfg = path / "config.resolved.yaml"
    if cfg.exists():
        try:
            record = yaml.safe_load(cfg.read_text()) or {}
        except yaml.YAMLError as e:
            raise ViewError(f"{cfg}: not YAML ({e})") from None
        if isinstance(record, dict) and "algorithm" in record:
            return "run"
        if isinstance(record, dict) and "judges" in record and "data" in record:
            return "eval"
    raise ViewError(
        f"{path}: neither a run directory (metrics.jsonl, samples.jsonl) nor an eval directory (results.jsonl, metrics.json)"
    )


def open_dirs(paths: list[str]) -> list[RunDir | EvalDir]:
    out: list[RunDir | EvalDir] = []
    for p in paths:
        path = Path(p).resolve()
        out.append(RunDir(path) if dir_kind(path) == "run" else EvalDir(path))
    return out


def static_files() -> dict[str, Any]:
    root = resources.files("grm.view") / "static"
    return {f.name: f for f in root.iterdir() if f.is_file()}


def listed_files(path: Path) -> list[dict[str, Any]]:
    """Top-level files of a directory (what the page may show: the run's report, a gate's result...)."""
    out = []
    for f in sorted(path.iterdir()):
        if f.is_file() and not f.name.startswith("."):
            out.append({"name": f.name, "size": f.stat().st_size, "text": f.suffix in _SHOWN_FILES})
        elif f.is_dir() and not f.name.startswith("."):
            out.append({"name": f.name + "/", "size": None, "text": False, "entries": sorted(c.name for c in f.iterdir())[:50]})
    return out


class BadRequest(Exception):
    pass


def _int(q: dict[str, list[str]], name: str, default: int | None = None) -> int:
    raw = q.get(name, [None])[0]
    if raw is None:
        if default is None:
            raise BadRequest(f"missing parameter '{name}'")
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be an integer, not {raw!r}") from None


def _choice(q: dict[str, list[str]], name: str, options: tuple[str, ...]) -> str:
    raw = q.get(name, [options[0]])[0]
    if raw not in options:
        raise BadRequest(f"'{name}' must be one of {', '.join(options)}, not {raw!r}")
    return raw


class App:
    """The API: a path and query in, a JSON-able value (or raw text) out. Pure of HTTP, for tests."""

    def __init__(self, dirs: list[RunDir | EvalDir]) -> None:
        self.dirs = dirs

    def _dir(self, raw: str, kind: str | None = None) -> Any:
        try:
            d = self.dirs[int(raw)]
        except (ValueError, IndexError):
            raise BadRequest(f"no directory {raw!r}") from None
        if kind and d.kind != kind:
            raise BadRequest(f"directory {raw} is a {d.kind} directory, not a {kind} directory")
        return d

    def handle(self, path: str, q: dict[str, list[str]]) -> Any:
        parts = [p for p in path.split("/") if p]
        if parts == ["api", "dirs"]:
            return [{"id": i, "kind": d.kind, "name": d.path.name, "path": str(d.path)} for i, d in enumerate(self.dirs)]
        if len(parts) == 4 and parts[:2] == ["api", "d"]:
            return self._dir_api(self._dir(parts[2]), parts[3], q)
        if parts == ["api", "compare"]:
            a, b = self._dir(q.get("a", [""])[0], "eval"), self._dir(q.get("b", [""])[0], "eval")
            ja = q.get("ja", [None])[0] or (a.judges() or [""])[0]
            jb = q.get("jb", [None])[0] or (b.judges() or [""])[0]
            return {"judge_a": ja, "judge_b": jb, **disagreements(a, ja, b, jb, page=_int(q, "page", 0))}
        raise LookupError(path)

    def _dir_api(self, d: Any, what: str, q: dict[str, list[str]]) -> Any:
        if what == "info":
            info = {"kind": d.kind, "name": d.path.name, "path": str(d.path), "files": listed_files(d.path)}
            if d.kind == "run":
                info["steps"] = d.steps()
            else:
                info.update(d.summary())
            return info
        if what == "file":
            name = q.get("name", [""])[0]
            if name not in {f["name"] for f in listed_files(d.path) if f["text"]}:
                raise BadRequest(f"no such file to show: {name!r}")
            f = d.path / name
            if f.stat().st_size > TEXT_FILE_LIMIT:
                raise BadRequest(f"{name} is larger than {TEXT_FILE_LIMIT // 2**20} MiB; open it from disk")
            return f.read_text(errors="replace")
        if d.kind == "run" and what == "metrics":
            return d.metrics()
        if d.kind == "run" and what == "samples":
            return d.sample_page(
                _int(q, "step"),
                sort=_choice(q, "sort", SAMPLE_SORTS),
                desc=q.get("desc", ["1"])[0] != "0",
                filt=_choice(q, "filter", SAMPLE_FILTERS),
                page=_int(q, "page", 0),
            )
        if d.kind == "eval" and what == "pairs":
            judges = d.judges()
            judge = q.get("judge", [judges[0] if judges else ""])[0]
            if judge not in judges:
                raise BadRequest(f"no judge {judge!r} in {d.path.name} (judges: {', '.join(judges)})")
            return d.pair_page(judge, filt=_choice(q, "filter", PAIR_FILTERS), page=_int(q, "page", 0))
        raise LookupError(what)


def make_handler(app: App, files: dict[str, Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "grm-view"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass  # one line per request would drown the URL the user needs

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, value: Any) -> None:
            self._send(code, json.dumps(json_safe(value), default=str).encode(), "application/json; charset=utf-8")

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            url = urlsplit(self.path)
            if url.path in ("/", "/index.html"):
                return self._static("index.html")
            if url.path.startswith("/static/"):
                return self._static(url.path.removeprefix("/static/"))
            if not url.path.startswith("/api/"):
                return self._json(404, {"error": f"not found: {url.path}"})
            try:
                value = app.handle(url.path, parse_qs(url.query))
            except BadRequest as e:
                return self._json(400, {"error": str(e)})
            except LookupError:
                return self._json(404, {"error": f"not found: {url.path}"})
            except OSError as e:
                return self._json(500, {"error": f"cannot read: {e}"})
            if isinstance(value, str):
                return self._send(200, value.encode(), "text/plain; charset=utf-8")
            self._json(200, value)

        def _static(self, name: str) -> None:
            f = files.get(name)
            if f is None:
                return self._json(404, {"error": f"not found: {name}"})
            ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
            self._send(200, f.read_bytes(), ctype + ("; charset=utf-8" if ctype.startswith("text/") else ""))

    return Handler


def serve(paths: list[str], host: str = "127.0.0.1", port: int = 0, ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; ``ready`` gets the URL once the socket listens."""
    app = App(open_dirs(paths))
    try:
        httpd = ThreadingHTTPServer((host, port), make_handler(app, static_files()))
    except OSError as e:
        raise ViewError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None
    httpd.daemon_threads = True
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{httpd.server_address[1]}/"
    (ready or print)(url)
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()


def start_in_thread(paths: list[str], host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, str]:
    """A server on a free port in a daemon thread (tests, the benchmark); ``shutdown()`` stops it."""
    httpd = ThreadingHTTPServer((host, 0), make_handler(App(open_dirs(paths)), static_files()))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, f"http://{host}:{httpd.server_address[1]}/"
