"""Raw HTTP requests to a running ``grm view``: any request target and any Host header, as a browser
under DNS rebinding or a hostile local page would send them (urllib would normalise both)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

SECRET = "SECRET-5f3a9c"
"""Written only to files outside the served directories: no answer may ever contain it."""


OWN = object()
"""``request(host=OWN)``: the Host header a browser on the printed URL sends."""


def request(url: str, target: str, host: str | None | object = OWN, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``target`` verbatim; ``host`` OWN sends the server's own netloc, None sends no Host."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    try:
        conn.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", u.netloc if host is OWN else host)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def get_json(url: str, target: str) -> object:
    code, body = request(url, target)
    assert code == 200, (target, code, body[:300])
    return json.loads(body)


def get_text(url: str, target: str) -> str:
    code, body = request(url, target)
    assert code == 200, (target, code, body[:300])
    return body.decode()


def crawl(url: str) -> list[tuple[str, int, bytes]]:
    """Every answer the page itself could ask for: each directory's info, metrics, every step's
    samples under every filter, every judge's pairs, every listed file, the comparisons."""
    seen: list[tuple[str, int, bytes]] = []

    def fetch(target: str) -> bytes:
        code, body = request(url, target)
        seen.append((target, code, body))
        return body

    dirs = json.loads(fetch("/api/dirs"))
    evals = [d["id"] for d in dirs if d["kind"] == "eval"]
    for d in dirs:
        base = f"/api/d/{d['id']}"
        info = json.loads(fetch(base + "/info"))
        for f in info["files"]:
            fetch(f"{base}/file?name={f['name']}")
        if d["kind"] == "run":
            fetch(base + "/metrics")
            for step in info["steps"]:
                for filt in ("all", "masked", "truncated"):
                    fetch(f"{base}/samples?step={step}&filter={filt}")
        else:
            for judge in info["judges"]:
                for filt in ("all", "wrong", "disagree"):
                    fetch(f"{base}/pairs?judge={judge}&filter={filt}")
    for a in evals:
        for b in evals:
            fetch(f"/api/compare?a={a}&b={b}")
    for name in ("index.html", "static/app.js", "static/episode.js", "static/style.css"):
        fetch("/" + name)
    return seen
