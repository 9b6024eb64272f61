"""The HTTP surface: directory detection, the JSON API, static files and what it refuses to serve."""

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from grm.view.server import ViewError, dir_kind, start_in_thread, static_files
from tests.unit.view.synthetic import CRITIQUE, write_eval, write_run


def get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read(), r.headers["Content-Type"]
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers["Content-Type"]


@pytest.fixture
def served(tmp_path):
    run, ev = write_run(tmp_path / "run"), write_eval(tmp_path / "ev")
    write_eval(tmp_path / "ev2", judge="other")
    httpd, url = start_in_thread([str(run), str(ev), str(tmp_path / "ev2")])
    yield url, run
    httpd.shutdown()
    httpd.server_close()


def test_api_and_static(served):
    url, run = served
    code, body, ctype = get(url)
    assert code == 200 and ctype.startswith("text/html") and b"/static/app.js" in body
    dirs = json.loads(get(url + "api/dirs")[1])
    assert [(d["kind"], d["name"]) for d in dirs] == [("run", "run"), ("eval", "ev"), ("eval", "ev2")]
    info = json.loads(get(url + "api/d/0/info")[1])
    assert info["steps"] == [1, 2] and "samples.jsonl" in [f["name"] for f in info["files"]]
    page = json.loads(get(url + "api/d/0/samples?step=2&sort=advantage&filter=negative")[1])
    assert page["groups"] and CRITIQUE in json.dumps(page)
    # a step appended while the page is open shows on the next request
    with open(run / "samples.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 3, "id": "new", "group": "g", "prompt": "p", "response": "r", "reward": 1.0}) + "\n")
    assert json.loads(get(url + "api/d/0/info")[1])["steps"] == [1, 2, 3]
    pairs = json.loads(get(url + "api/d/1/pairs?filter=wrong")[1])
    assert pairs["total"] == 2
    cmp = json.loads(get(url + "api/compare?a=1&b=2")[1])
    assert cmp["judge_a"] == "pairwise" and cmp["judge_b"] == "other" and cmp["common"] == 3
    assert get(url + "api/d/0/file?name=config.resolved.yaml")[1].startswith(b"name: quickstart")
    for f in ("app.js", "style.css"):
        assert get(url + "static/" + f)[0] == 200


@pytest.mark.parametrize(
    "path,code,msg",
    [
        ("api/d/0/file?name=../../etc/passwd", 400, "no such file"),
        ("api/d/0/file?name=%2Fetc%2Fpasswd", 400, "no such file"),
        ("static/../server.py", 404, "not found"),
        ("static/..%2Fserver.py", 404, "not found"),
        ("api/d/9/info", 400, "no directory"),
        ("api/d/0/samples?step=x", 400, "'step' must be an integer"),
        ("api/d/0/samples?step=1&sort=evil", 400, "'sort' must be one of"),
        ("api/d/0/pairs", 404, "not found"),
        ("api/d/1/pairs?judge=nobody", 400, "no judge 'nobody'"),
        ("api/compare?a=0&b=1", 400, "not a eval directory"),
    ],
)
def test_refusals(served, path, code, msg):
    url, _ = served
    got, body, _ = get(url + path)
    assert got == code and msg in json.loads(body)["error"]


def test_dir_kind(tmp_path):
    assert dir_kind(write_run(tmp_path / "r")) == "run" and dir_kind(write_eval(tmp_path / "e")) == "eval"
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / "config.resolved.yaml").write_text("name: x\nalgorithm: {type: grpo}\n")
    assert dir_kind(tmp_path / "fresh") == "run"  # a run that has not logged a step yet
    (tmp_path / "other").mkdir()
    with pytest.raises(ViewError, match="neither a run directory"):
        dir_kind(tmp_path / "other")
    with pytest.raises(ViewError, match="not a directory"):
        dir_kind(tmp_path / "missing")
    assert {"index.html", "app.js", "style.css"} <= set(static_files())


def test_cli_refuses_a_non_run_dir_without_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "grm", "view", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "neither a run directory" in r.stderr and "Traceback" not in r.stderr


def test_cli_serves_and_prints_the_url(tmp_path):
    run = write_run(tmp_path / "run")
    p = subprocess.Popen(
        [sys.executable, "-m", "grm", "view", str(run), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = p.stdout.readline()
        assert line.startswith("grm view: http://127.0.0.1:"), line
        url = line.split()[2]
        assert json.loads(get(url + "api/dirs")[1])[0]["kind"] == "run"
    finally:
        p.terminate()
        p.wait(timeout=10)
