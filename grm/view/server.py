"""The ``grm view`` server: stdlib ThreadingHTTPServer, a JSON API over the opened directories and
the static page shipped in ``grm/view/static`` (no build step, nothing fetched from elsewhere).

The stdlib server is enough here: one local user, a handful of requests per click, and no new
dependency in the wheel. Only files the API names are read: a directory is picked by its index in
the command line, a static file or a run's top-level file by a name that must appear in a listing,
and every file is read through ``grm.view.folder`` (regular files inside the directory only).

A page on any web site can make the browser send requests to 127.0.0.1; it cannot read the answers
unless its own host name resolves there (DNS rebinding), and then its requests carry its own name in
``Host``. So every request whose Host is not an address of this server is refused with 403.
"""

from __future__ import annotations

import json
import mimetypes
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from grm.base import GrmError
from grm.http_host import WILDCARDS, HostCheck
from grm.jsonl import json_safe
from grm.view.eval_dir import PAIR_FILTERS, EvalDir, disagreements
from grm.view.folder import SMALL_FILE_LIMIT, Folder
from grm.view.index import parse_yaml
from grm.view.run_dir import RunDir
from grm.view.sample_browser import SAMPLE_FILTERS, SAMPLE_SORTS

TEXT_FILE_LIMIT = 2 * 2**20
"""Largest top-level file of a directory the page shows as text (report.md, a gate's JSON)."""
_SHOWN_FILES = (".md", ".json", ".yaml", ".yml", ".txt", ".log")
MAX_LISTED = 500
"""Entries of a directory listed at most (and names shown of each subdirectory: 50)."""


class ViewError(GrmError):
    """A path given to ``grm view`` is not a run or eval directory."""


def dir_kind(path: Path | Folder) -> str:
    """'run' or 'eval', from the files a directory holds; ViewError otherwise."""
    if isinstance(path, Path):
        folder = _open_folder(path.resolve())
        try:
            return dir_kind(folder)
        finally:
            folder.close()
    folder = path
    if folder.lstat("results.jsonl") or folder.lstat("metrics.json"):
        return "eval"
    if any(folder.lstat(f) for f in ("metrics.jsonl", "samples.jsonl", "placement.json")):
        return "run"
    cfg = "config.resolved.yaml"
    if folder.lstat(cfg):
        try:
            record = parse_yaml(folder.read(cfg, SMALL_FILE_LIMIT), folder.where(cfg))
        except (OSError, ValueError) as e:
            raise ViewError(str(e)) from None
        if isinstance(record, dict) and "algorithm" in record:
            return "run"
        if isinstance(record, dict) and "judges" in record and "data" in record:
            return "eval"
    raise ViewError(
        f"{folder.path}: neither a run directory (metrics.jsonl, samples.jsonl) "
        "nor an eval directory (results.jsonl, metrics.json)"
    )


def _open_folder(path: Path) -> Folder:
    try:
        return Folder(path)
    except NotADirectoryError:
        raise ViewError(f"{path}: not a directory") from None
    except FileNotFoundError:
        raise ViewError(f"{path}: not a directory (it does not exist)") from None
    except OSError as e:
        raise ViewError(f"{path}: cannot open ({e.strerror or e})") from None


def open_dirs(paths: list[str]) -> list[RunDir | EvalDir]:
    out: list[RunDir | EvalDir] = []
    for p in paths:
        folder = _open_folder(Path(p).resolve())
        try:
            kind = dir_kind(folder)
        except BaseException:
            folder.close()
            raise
        out.append(RunDir(folder) if kind == "run" else EvalDir(folder))
    return out


def static_files() -> dict[str, Any]:
    root = resources.files("grm.view") / "static"
    return {f.name: f for f in root.iterdir() if f.is_file()}


def _showable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 in the name: no URL names it
        return False
    return name.endswith(_SHOWN_FILES)


def listed_files(folder: Folder) -> list[dict[str, Any]]:
    """Top-level entries of a directory (what the page may show: the run's report, a gate's result...).
    Only regular files can be shown; a link or FIFO is listed with what it is, never followed."""
    out: list[dict[str, Any]] = []
    entries, more = folder.entries(MAX_LISTED)
    for e in entries:
        if e.name.startswith("."):
            continue
        if e.is_file:
            out.append({"name": e.name, "size": e.size, "text": _showable(e.name)})
        elif e.is_dir:
            try:
                names, more_names = folder.subdir_entries(e.name, 50)
            except OSError:
                names, more_names = [], False
            out.append({"name": e.name + "/", "size": None, "text": False, "entries": names + (["..."] if more_names else [])})
        else:
            out.append({"name": e.name, "size": None, "text": False, "note": f"{e.kind}: not shown"})
    if more:
        out.append({"name": f"(only {MAX_LISTED} entries listed)", "size": None, "text": False})
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
        value = int(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be an integer, not {raw[:40]!r}") from None
    if name == "page" and value < 0:
        raise BadRequest(f"'page' must be 0 or more, not {value}")
    return value


def _choice(q: dict[str, list[str]], name: str, options: tuple[str, ...]) -> str:
    raw = q.get(name, [options[0]])[0]
    if raw not in options:
        raise BadRequest(f"'{name}' must be one of {', '.join(options)}, not {raw[:40]!r}")
    return raw


class App:
    """The API: a path and query in, a JSON-able value (or raw text) out. Pure of HTTP, for tests."""

    def __init__(self, dirs: list[RunDir | EvalDir]) -> None:
        self.dirs = dirs

    def _dir(self, raw: str, kind: str | None = None) -> Any:
        i = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 6 else -1
        if not 0 <= i < len(self.dirs):
            raise BadRequest(f"no directory {raw[:40]!r}")
        d = self.dirs[i]
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
            info = {"kind": d.kind, "name": d.path.name, "path": str(d.path), "files": listed_files(d.folder)}
            if d.kind == "run":
                info["steps"] = d.steps()
                info["problems"] = d.problems()
            else:
                info.update(d.summary())
            return info
        if what == "file":
            name = q.get("name", [""])[0]
            if name not in {f["name"] for f in listed_files(d.folder) if f["text"]}:
                raise BadRequest(f"no such file to show: {name[:100]!r}")
            try:
                return d.folder.read(name, TEXT_FILE_LIMIT).decode("utf-8", errors="replace")
            except OSError as e:  # replaced by a link, grown past the limit: the message names it
                raise BadRequest(str(e)) from None
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
                raise BadRequest(f"no judge {judge[:100]!r} in {d.path.name} (judges: {', '.join(judges)})")
            return d.pair_page(judge, filt=_choice(q, "filter", PAIR_FILTERS), page=_int(q, "page", 0))
        raise LookupError(what)


def make_handler(app: App, files: dict[str, Any], hosts: HostCheck) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "grm-view"
        timeout = 60  # an idle or stalled connection frees its thread

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
            try:
                self._get()
            except ConnectionError:
                pass  # the browser went away mid-answer
            except Exception as e:  # a bug must cost one answer, never the server or a hung page
                self._json(500, {"error": f"grm view failed on this request ({type(e).__name__}: {str(e)[:300]})"})

        def _get(self) -> None:
            hosts_sent = self.headers.get_all("Host") or []
            if len(hosts_sent) != 1 or not hosts.allows(hosts_sent[0]):
                return self._json(403, {"error": "this Host is not an address of this grm view server"})
            url = urlsplit(self.path)
            if url.path in ("/", "/index.html"):
                return self._static("index.html")
            if url.path.startswith("/static/"):
                return self._static(url.path.removeprefix("/static/"))
            if not url.path.startswith("/api/"):
                return self._json(404, {"error": f"not found: {url.path[:200]}"})
            if self.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site"):  # only our own page calls the API
                return self._json(403, {"error": "the API answers this server's own page only"})
            try:
                value = app.handle(url.path, parse_qs(url.query))
            except BadRequest as e:
                return self._json(400, {"error": str(e)})
            except LookupError:
                return self._json(404, {"error": f"not found: {url.path[:200]}"})
            except OSError as e:
                return self._json(500, {"error": f"cannot read: {e}"})
            if isinstance(value, str):
                return self._send(200, value.encode("utf-8", errors="replace"), "text/plain; charset=utf-8")
            self._json(200, value)

        def _static(self, name: str) -> None:
            f = files.get(name)
            if f is None:
                return self._json(404, {"error": f"not found: {name[:200]}"})
            ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
            self._send(200, f.read_bytes(), ctype + ("; charset=utf-8" if ctype.startswith("text/") else ""))

    return Handler


class ViewServer(ThreadingHTTPServer):
    """The HTTP server over ``dirs``; closing it closes their directory descriptors."""

    daemon_threads = True

    def __init__(self, host: str, port: int, dirs: list[RunDir | EvalDir]) -> None:
        self.dirs = dirs
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), make_handler(App(dirs), static_files(), HostCheck(host)))

    def server_close(self) -> None:
        super().server_close()
        for d in self.dirs:
            d.folder.close()
        self.dirs = []


def _url(host: str, port: int) -> str:
    """The address to open: a wildcard bind (every interface) is reached on this machine's loopback."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(
    paths: list[str],
    host: str = "127.0.0.1",
    port: int = 0,
    ready: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted; ``ready`` gets the URL once the socket listens, ``warn`` a line when
    the server is reachable from other machines."""
    dirs = open_dirs(paths)
    try:
        httpd = ViewServer(host, port, dirs)
    except (OSError, OverflowError) as e:
        for d in dirs:  # a failed bind already closed them (server_close); closing is idempotent
            d.folder.close()
        raise ViewError(f"cannot listen on {host}:{port} ({getattr(e, 'strerror', None) or e})") from None
    try:
        if host in WILDCARDS:
            (warn or (lambda m: print(m, file=sys.stderr, flush=True)))(
                f"grm view: warning: listening on every interface ({host or '*'}): anyone who can reach port "
                f"{httpd.server_address[1]} of this machine can read these directories through the API"
            )
        (ready or print)(_url(host, httpd.server_address[1]))
        httpd.serve_forever()
    finally:
        httpd.server_close()


def start_in_thread(paths: list[str], host: str = "127.0.0.1") -> tuple[ViewServer, str]:
    """A server on a free port in a daemon thread (tests, the benchmark); ``shutdown()`` stops it."""
    httpd = ViewServer(host, 0, open_dirs(paths))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, _url(host, httpd.server_address[1])
