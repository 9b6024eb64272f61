"""`grm view` serves no byte from outside the directories it was given, whatever they contain, and
answers only requests addressed to itself (issue #39). Every probe is a real HTTP request to a
running server; the secret lives only in files outside the served directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grm.http_host import HostCheck
from grm.view.server import start_in_thread
from tests.unit.view.hostile import make_hostile
from tests.unit.view.http_probe import SECRET, crawl, get_json, get_text, request
from tests.unit.view.synthetic import write_run


@pytest.fixture
def hostile(tmp_path):
    dirs, run, out = make_hostile(tmp_path)
    httpd, url = start_in_thread([str(d) for d in dirs])
    yield url, run, out
    httpd.shutdown()
    httpd.server_close()


def test_no_answer_the_page_can_ask_for_holds_a_byte_from_outside(hostile):
    url, _, _ = hostile
    answers = crawl(url)
    assert len(answers) > 30
    assert [t for t, code, _ in answers if code >= 500] == []
    leaks = [t for t, _, body in answers if SECRET.encode() in body]
    assert leaks == []


def test_links_and_special_files_are_listed_as_what_they_are_and_never_read(hostile):
    url, _, _ = hostile
    files = {f["name"]: f for f in get_json(url, "/api/d/0/info")["files"]}
    for name in ("notes.log", "rel.log", "linkdir", "loop.log", "gate.json"):
        assert files[name]["text"] is False and "symbolic link" in files[name]["note"] and files[name]["size"] is None
    assert "FIFO" in files["fifo.log"]["note"]
    assert get_text(url, "/api/d/0/file?name=report.md") == "# inside\n"
    for name in ("notes.log", "rel.log", "loop.log", "fifo.log", "gate.json", "linkdir"):
        code, body = request(url, f"/api/d/0/file?name={name}")
        assert code == 400 and b"no such file to show" in body
    assert get_json(url, "/api/d/0/metrics")["gate"] == []  # gate.json is a link: not followed
    # a run whose samples.jsonl and metrics.jsonl are links: empty, and the page says why
    info = get_json(url, "/api/d/1/info")
    assert info["steps"] == [] and any("samples.jsonl: a symbolic link" in p for p in info["problems"])
    assert get_json(url, "/api/d/1/metrics")["rows"] == []


def test_an_eval_directory_never_opens_the_data_path_its_config_names(hostile):
    url, _, _ = hostile
    page = get_json(url, "/api/d/2/pairs")
    assert page["total"] == 3 and all(p["prompt"] is None and p["responses"] is None for p in page["pairs"])
    assert "no items.jsonl" in page["note"]
    # items.jsonl that is a link to an outside file: refused, named
    page2 = get_json(url, "/api/d/3/pairs")
    assert all(p["prompt"] is None for p in page2["pairs"]) and "items.jsonl: a symbolic link" in page2["note"]
    info = get_json(url, "/api/d/3/info")
    assert any("items.jsonl" in p for p in info["problems"])


@pytest.mark.parametrize(
    "target",
    [
        "/api/d/0/file?name=../outside/secret.txt",
        "/api/d/0/file?name=..%2Foutside%2Fsecret.txt",
        "/api/d/0/file?name=%2E%2E%2Foutside%2Fsecret.txt",
        "/api/d/0/file?name={abs}",
        "/api/d/0/file?name=linkdir/secret.txt",
        "/api/d/0/file?name=linkdir%2Fsecret.txt",
        "/api/d/0/file?name=report.md%00/../../outside/secret.txt",
        "/api/d/0/file?name=report.md%00",
        "/api/d/0/file?name=notes.log&name=report.md",
        "/api/d/0/file?name=.",
        "/api/d/0/file?name=..",
        "/api/d/0/file?name=",
        "/api/d/0/../../outside/secret.txt",
        "/api/d/%2E%2E/info",
        "/api/d/-1/info",
        "/api/d/4/info",
        "/api/d/0%00/info",
        "/api/d/00000000000000000000000001/info",
        "/api/d/%EF%BC%91/info",
        "/static/../../outside/secret.txt",
        "/static/..%2F..%2Foutside%2Fsecret.txt",
        "/static/%2E%2E/server.py",
        "//outside/secret.txt",
        "/{abs}",
        "http://evil.example/api/d/0/file?name=notes.log",
        "/api/d/0/samples?step=1&page=-1",
        "/api/d/0/samples?step=" + "9" * 5000,
    ],
)
def test_traversal_in_any_form_is_refused(hostile, target):
    url, _, out = hostile
    code, body = request(url, target.replace("{abs}", str(out / "secret.txt")))
    assert code in (400, 404), (code, body[:200])
    assert SECRET.encode() not in body
    assert "error" in json.loads(body)


def test_a_file_swapped_for_a_link_after_it_was_listed_is_not_followed(hostile):
    url, run, out = hostile
    assert get_text(url, "/api/d/0/file?name=report.md") == "# inside\n"
    (run / "report.md").unlink()
    os.symlink(out / "secret.txt", run / "report.md")
    code, body = request(url, "/api/d/0/file?name=report.md")
    assert code == 400 and SECRET.encode() not in body
    # samples.jsonl swapped for a link while the page is open: the run shows nothing, says why
    (run / "samples.jsonl").unlink()
    os.symlink(out / "secret.jsonl", run / "samples.jsonl")
    info = get_json(url, "/api/d/0/info")
    assert info["steps"] == [] and any("symbolic link" in p for p in info["problems"])
    assert SECRET not in json.dumps(get_json(url, "/api/d/0/samples?step=1"))


HOSTS = [
    # (Host header, answered when bound to 127.0.0.1, answered when bound to 0.0.0.0)
    ("127.0.0.1", True, True),
    ("127.0.0.1:8000", True, True),
    ("localhost", True, True),
    ("LOCALHOST:80", True, True),
    ("[::1]", True, True),
    ("[::1]:9", True, True),
    ("0.0.0.0:5", False, True),
    ("10.1.2.3:8000", False, True),
    ("[fe80::1]:80", False, True),
    ("evil.example", False, False),
    ("evil.example:8000", False, False),
    ("localhost.evil.example", False, False),
    ("127.0.0.1.evil.example", False, False),
    ("localhost.", False, False),
    ("localhost:80@evil.example", False, False),
    ("evil.example#@127.0.0.1", False, False),
    ("127.0.0.1:80:81", False, False),
    ("127.0.0.1:notaport", False, False),
    ("[::1", False, False),
    ("::1", False, False),
    ("", False, False),
    ("127.0.0.1\x00.evil.example", False, False),
    ("2130706433", False, False),
    ("xn--lcalhost-9za", False, False),
]


@pytest.mark.parametrize("host,local,wildcard", HOSTS)
def test_host_check(host, local, wildcard):
    assert HostCheck("127.0.0.1").allows(host) is local
    assert HostCheck("0.0.0.0").allows(host) is wildcard
    assert HostCheck("myhost.lan").allows("MyHost.lan:81") and not HostCheck("myhost.lan").allows("other.lan")


def test_a_foreign_host_gets_403_on_every_path(hostile):
    """DNS rebinding: a page on evil.example, its name now resolving to 127.0.0.1, asks the server."""
    url, _, _ = hostile
    for target in ("/", "/index.html", "/static/app.js", "/api/dirs", "/api/d/0/info", "/api/d/0/file?name=report.md", "/nope"):
        for host in ("evil.example", f"evil.example:{url.rsplit(':', 1)[1].strip('/')}", "localhost.evil.example"):
            code, body = request(url, target, host=host)
            assert code == 403 and b"inside" not in body and b"run" not in body, (target, host, code)
    assert request(url, "/api/dirs", host=None)[0] == 403  # no Host at all
    assert request(url, "/api/dirs", headers={"Host": "evil.example"})[0] == 403  # a second Host
    assert request(url, "/api/dirs", host="localhost")[0] == 200


def test_the_api_answers_only_its_own_page(hostile):
    url, _, _ = hostile
    for site in ("cross-site", "same-site"):
        assert request(url, "/api/dirs", headers={"Sec-Fetch-Site": site})[0] == 403
    assert request(url, "/api/dirs", headers={"Sec-Fetch-Site": "same-origin"})[0] == 200
    assert request(url, "/", headers={"Sec-Fetch-Site": "cross-site"})[0] == 200  # a link to the page itself


def test_bound_to_every_interface_it_warns_and_still_refuses_names(tmp_path):
    run = write_run(tmp_path / "run")
    p = subprocess.Popen(
        [sys.executable, "-m", "grm", "view", str(run), "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = p.stdout.readline()
        assert line.startswith("grm view: http://127.0.0.1:"), line  # the address to open, not the bind
        warning = p.stderr.readline()
        assert "warning" in warning and "every interface" in warning and "read these directories" in warning
        url = line.split()[2]
        port = url.rsplit(":", 1)[1].strip("/")
        assert request(url, "/api/dirs", host=f"127.0.0.1:{port}")[0] == 200
        assert request(url, "/api/dirs", host=f"evil.example:{port}")[0] == 403
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_bound_to_loopback_it_does_not_warn(tmp_path):
    from grm.view import server

    run = write_run(tmp_path / "run")
    warned: list[str] = []

    class Stop(Exception):
        pass

    def ready(url: str) -> None:
        raise Stop(url)

    with pytest.raises(Stop):
        server.serve([str(run)], host="127.0.0.1", port=0, ready=ready, warn=warned.append)
    assert warned == []
    for host in ("0.0.0.0", ""):  # '' binds every interface too; its URL must still be one to open
        with pytest.raises(Stop) as e:
            server.serve([str(run)], host=host, port=0, ready=ready, warn=warned.append)
        assert str(e.value).startswith("http://127.0.0.1:") and str(e.value).endswith("/"), e.value
    assert len(warned) == 2 and all("every interface" in w for w in warned)


def test_a_link_swapped_in_between_the_check_and_the_open_is_still_not_followed(tmp_path, monkeypatch):
    """The lstat check and the open are two calls; O_NOFOLLOW on the open closes the gap."""
    from grm.view.folder import BadFile, Entry, Folder

    (tmp_path / "secret.txt").write_text(SECRET)
    d = tmp_path / "d"
    d.mkdir()
    os.symlink(tmp_path / "secret.txt", d / "notes.log")
    folder = Folder(d)
    monkeypatch.setattr(Folder, "lstat", lambda self, name: Entry(name, 0o100644, 10))  # "a regular file"
    with pytest.raises(BadFile, match="notes.log"):
        folder.read("notes.log", 100)
    with pytest.raises(BadFile, match="not a file name"):
        folder.read("../secret.txt", 100)
    folder.close()
