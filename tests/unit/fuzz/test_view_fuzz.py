"""Fuzz `grm view` (issue #39): request targets and Host headers against a running server over
crafted directories, and the rows of its data files.

Properties: no answer holds a byte from outside the served directories (``SECRET`` is written only
there); every answer is 200, 400, 403 or 404, never a server error; a Host header is answered iff it
names this loopback server; and a row of any shape is either shown or listed as a bad row naming
its file and line, while the rest of its page still answers.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.view.eval_dir import EvalDir
from grm.view.run_dir import RunDir
from grm.view.server import start_in_thread
from tests.unit.fuzz.support import budget, count
from tests.unit.view.hostile import make_hostile
from tests.unit.view.http_probe import SECRET, request
from tests.unit.view.synthetic import eval_line, sample_row, write_eval, write_run


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    dirs, _, out = make_hostile(tmp_path_factory.mktemp("view-fuzz"))
    inside = {f.read_bytes() for d in dirs for f in d.iterdir() if f.is_file() and not f.is_symlink()}
    httpd, url = start_in_thread([str(d) for d in dirs])
    yield url, inside, out
    httpd.shutdown()
    httpd.server_close()


SEGMENTS = ["..", ".", "", "%2e%2e", "%2E%2E%2F", "%2F", "%00", "0", "1", "2", "3", "4", "-1", "01", "info", "file", "samples",
            "pairs", "metrics", "api", "d", "static", "app.js", "index.html", "notes.log", "linkdir", "rel.log", "fifo.log",
            "loop.log", "gate.json", "report.md", "secret.txt", "outside", "~", "%7E", "\\..\\", "%5C"]  # fmt: skip
PARAMS = ["name", "step", "page", "judge", "filter", "sort", "desc", "a", "b", "ja", "jb"]


@st.composite
def targets(draw: st.DrawFn, outside: Path) -> str:
    """A request target: API-shaped or not, with traversal pieces, absolute paths and NULs, raw or
    percent-encoded, in the path and the query."""
    values = st.one_of(
        st.sampled_from(SEGMENTS + [str(outside / "secret.txt"), "../outside/secret.txt", "linkdir/secret.txt", "1", "2"]),
        st.text(max_size=12).map(lambda t: quote(t, safe="")),
    )
    prefix = draw(st.sampled_from(["/api/d/", "/api/", "/static/", "/", "//", "/api/compare", "/api/dirs"]))
    path = prefix + "/".join(draw(st.lists(values, max_size=4)))
    query = "&".join(f"{draw(st.sampled_from(PARAMS))}={draw(values)}" for _ in range(draw(st.integers(0, 3))))
    return path + ("?" + query if query else "")


@settings(max_examples=budget(300))
@given(data=st.data())
def test_no_request_target_reaches_outside(served, data):
    url, inside, outside = served
    target = data.draw(targets(outside))
    count("view targets")
    code, body = request(url, target)
    assert code in (200, 400, 403, 404), (target, code, body[:300])
    assert SECRET.encode() not in body, target
    if code == 200 and "/file?" in target:
        assert body in inside, (target, body[:100])  # only a regular file of a served directory


_ALLOWED = re.compile(r"(localhost|127\.0\.0\.1|\[::1\])(:[0-9]{1,5})?", re.IGNORECASE)
HOSTS = ["localhost", "127.0.0.1", "[::1]", "evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "0.0.0.0",
         "[::]", "LocalHost", "127.1", "0x7f000001", "2130706433", "[::ffff:127.0.0.1]", "localhost.", "::1", "[::1]:",
         ":80"]  # fmt: skip


@settings(max_examples=budget(200))
@given(
    host=st.one_of(
        st.sampled_from(HOSTS),
        st.tuples(st.sampled_from(HOSTS), st.sampled_from(["", ":1", ":8080", ":65535", ":99999", ":x", "::", "@evil", "/"])).map(
            "".join
        ),
        st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF), max_size=30),
    )
)
def test_a_host_header_is_answered_iff_it_names_this_server(served, host):
    url, _, _ = served
    count("view hosts")
    code, body = request(url, "/api/dirs", host=host)
    if _ALLOWED.fullmatch(host):
        assert code == 200, (host, body[:200])
    else:
        assert code == 403 and b"run" not in body, (host, code)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from([2**63, -(2**63) - 1, 10**30]), st.floats(), st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=5), kids, max_size=3)),
    max_leaves=8,
)


def mutate(draw: st.DrawFn, row: dict[str, Any], paths: list[tuple[str, ...]]) -> bytes:
    """``row`` with a few of its fields (nested ones included) replaced by any JSON value or
    removed, or the whole line replaced by bytes that are not a row."""
    if draw(st.integers(0, 9)) == 0:
        return draw(
            st.sampled_from([b"{", b"[]", b"null", b'"row"', b"\xff\xfe", b'{"step": 1, "x": ' + b"[" * 100 + b"]" * 100 + b"}"])
        )
    row = json.loads(json.dumps(row))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        node = row
        for k in path[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict):
            if draw(st.booleans()):
                node[path[-1]] = draw(json_values)
            else:
                node.pop(path[-1], None)
    return json.dumps(row, allow_nan=True).encode()


SAMPLE_PATHS = [("id",), ("group",), ("prompt",), ("response",), ("reward",), ("advantage",), ("finish_reason",), ("judges",),
                ("judges", "helpfulness"), ("judges", "helpfulness", "critiques"), ("judges", "helpfulness", "parsed"),
                ("judges", "helpfulness", "masked"), ("judges", "helpfulness", "score"),
                ("judges", "numeric-answer")]  # fmt: skip
RESULT_PATHS = [("item_id",), ("kind",), ("label",), ("verdict",), ("order_verdicts",), ("margin",), ("masked",), ("lengths",),
                ("parse_failures",), ("results",), ("judge",), ("score",), ("scores",)]  # fmt: skip


@settings(max_examples=budget(150))
@given(data=st.data())
def test_any_sample_row_is_shown_or_is_a_bad_row(data):
    count("view sample rows")
    with tempfile.TemporaryDirectory() as tmp:
        run = write_run(Path(tmp) / "run", steps=1, groups=2, size=2)
        lines = [mutate(data.draw, {**sample_row(1, g, 5, 0.5)}, SAMPLE_PATHS) for g in range(3)]
        with open(run / "samples.jsonl", "ab") as fh:
            fh.write(b"".join(x + b"\n" for x in lines))
        rd = RunDir(run)
        rd.steps()
        in_step = len(rd.samples.by_step.get(1, []))
        page = rd.sample_page(1, filt=data.draw(st.sampled_from(["all", "masked", "positive", "truncated"])))
        json.dumps(page)  # the server's answer can be written
        assert page["rows"] + page["bad_rows_total"] == in_step >= 4
        assert all(re.match(r"samples\.jsonl line \d+: ", e) for e in page["bad_rows"])
        rd.folder.close()


@settings(max_examples=budget(150))
@given(data=st.data())
def test_any_results_line_is_counted_or_is_a_bad_row(data):
    count("view result lines")
    with tempfile.TemporaryDirectory() as tmp:
        ev = write_eval(Path(tmp) / "ev")
        line = eval_line("i1", 2, "1", ["1", "2"], [2, 18])
        with open(ev / "results.jsonl", "ab") as fh:
            fh.write(b"".join(mutate(data.draw, line, RESULT_PATHS) + b"\n" for _ in range(3)))
        d = EvalDir(ev)
        s = d.summary()
        shown = sum(j["lines"] for j in s["judges"].values())
        assert shown + s["bad_rows_total"] == 6 and shown >= 3
        for judge in s["judges"]:
            page = d.pair_page(judge, filt=data.draw(st.sampled_from(["all", "wrong", "disagree", "longer_wins", "masked"])))
            json.dumps(page)
        d.folder.close()
