"""`grm view` on a real 2-step run and a real eval directory, rendered by headless Chromium: the DOM
shows a critique read from samples.jsonl / results.jsonl and a metric read from the files."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from grm.view.chromium import INSTALL, dump_dom, find_chromium, screenshot
from tests.conftest import ROOT, run_grm

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_chromium() is None, reason=f"needs Chromium for the rendered page: {INSTALL}"),
]

ENV = {"RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}


class Texts(HTMLParser):
    """Text of every element whose class list has ``cls`` (critiques are <pre class="critique">)."""

    def __init__(self, cls: str) -> None:
        super().__init__()
        self.cls, self.depth, self.found, self.buf = cls, 0, [], []

    def handle_starttag(self, tag, attrs):
        if self.depth:
            self.depth += 1
        elif self.cls in (dict(attrs).get("class") or "").split():
            self.depth, self.buf = 1, []

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1
            if not self.depth:
                self.found.append("".join(self.buf))

    def handle_data(self, data):
        if self.depth:
            self.buf.append(data)


def texts(dom: str, cls: str) -> list[str]:
    """Whitespace-normalised (HTML serialisation may add a newline after <pre>, and CRLF becomes LF)."""
    p = Texts(cls)
    p.feed(dom)
    return [norm(t) for t in p.found]


def norm(text: str) -> str:
    return " ".join(text.split())


def js_fmt(x: float) -> str:
    """The page's fmt() for a number in [0, 1]: three decimals, trailing zeros dropped."""
    return f"{x:.3f}".rstrip("0").rstrip(".") or "0"


@pytest.fixture(scope="module")
def served(tmp_path_factory, gated_run):
    """The session's gated quickstart run (2 steps, or 3 once the gate tests resumed it) and a
    3-pair pairwise eval, served by ``grm view``."""
    tmp = tmp_path_factory.mktemp("view")
    run, ev = gated_run[0], tmp / "eval"
    r = run_grm(
        "eval", "builtin:pairwise-rules-cot-logprob", "--data", "builtin:arith-pairs", "--out", str(ev), "--limit", "3",
        "sampling.max_new_tokens=40", env=ENV,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    p = subprocess.Popen(
        [sys.executable, "-m", "grm", "view", str(run), str(ev)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = p.stdout.readline()
        assert line.startswith("grm view: http://127.0.0.1:"), (line, p.stderr.read() if p.poll() is not None else "")
        yield line.split()[2], run, ev, tmp
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_run_page_shows_a_critique_and_the_reward(served):
    url, run, _, tmp = served
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    last = max(r["step"] for r in rows)
    critiques = [c for r in rows if r["step"] == last for j in r["judges"].values() if j for c in j["critiques"]]
    assert critiques, "the run recorded no critique"
    dom = dump_dom(url + "#d=0")
    shown = texts(dom, "critique")
    assert norm(critiques[0]) in shown, (critiques[0], shown[:3])
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == last and 'data-chart="rewards (mean and per judge)"' in dom
    assert f"step {metrics[-1]['step']} of what metrics.jsonl holds" in dom
    assert dom.count('data-sample="') == len([r for r in rows if r["step"] == last])  # the whole last step
    png = screenshot(url + "#d=0", tmp / "run.png", height=1800)
    assert png.stat().st_size > 20_000


def test_eval_page_shows_a_metric_and_both_orders_critiques(served):
    url, _, ev, tmp = served
    lines = [json.loads(x) for x in (ev / "results.jsonl").read_text().splitlines()]
    first = lines[0]
    views = {s["view"]: s["text"] for s in first["results"][0]["samples"]}
    assert set(views) == {0, 1}  # both presentation orders were judged
    metrics = json.loads((ev / "metrics.json").read_text())
    acc = metrics["judges"]["pairwise-rules-cot-logprob"]["pairs"]["accuracy_average"]
    dom = dump_dom(url + "#d=1")
    assert "accuracy (mean of orders)" in dom and f'<div class="v">{js_fmt(acc)}</div>' in dom
    assert "order 2 (swapped)" in dom  # the second order's confusion table
    shown = texts(dom, "critique")
    assert norm(views[0]) in shown and norm(views[1]) in shown
    assert f'data-item="{first["item_id"]}"' in dom
    png = screenshot(url + "#d=1", tmp / "eval.png", height=1800)
    assert png.stat().st_size > 20_000


@pytest.fixture(scope="module")
def episode_page(tmp_path_factory):
    """A synthetic run of multi-turn episodes (no model needed), served in a thread."""
    from grm.view.server import start_in_thread
    from tests.unit.view.synthetic import write_episode_run

    run = write_episode_run(tmp_path_factory.mktemp("episodes") / "run")
    httpd, url = start_in_thread([str(run)])
    yield url
    httpd.shutdown()
    httpd.server_close()


def test_an_episode_renders_turn_by_turn_with_its_mask_and_markers(episode_page):
    dom = dump_dom(episode_page + "#d=0&step=1&only=samples", budget_ms=4000, timeout=60)
    assert dom.count('data-episode="') == 2
    assert dom.count('data-turn="') == 6  # three turns of each episode
    assert dom.count('data-trained="1"') == 4 and dom.count('data-trained="0"') == 2  # the observations are context
    assert "policy tokens, trained on (loss mask 1): 5" in dom and "masked out of the loss" in dom
    assert "error: timeout" in dom and "output cut by the sandbox" in dom and "cut for this page" in dom
    assert "end: max_turns" in dom and "credit 0.25" in dom and "first faulty turn: helpfulness" in dom
    assert "success 1" in dom  # a signal
    assert texts(dom, "args") and "7 * 6 &lt;b&gt;" in dom  # a tool call's arguments, as text
    dom2 = dump_dom(episode_page + "#d=0&step=2&only=samples", budget_ms=4000, timeout=60)
    assert dom2.count('data-episode="') == 1 and "3 bad rows in step 2" in dom2 and "turns[1].role: 'robot'" in dom2
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom2 and "<script>alert(1)" not in dom2  # tool output stays text
