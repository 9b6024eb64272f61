"""Malformed files in a run or eval directory show as bad data: one bad row never takes down its
step's page, a FIFO or a link loop never hangs or crashes the server, and a huge file is never read
whole (issue #39)."""

from __future__ import annotations

import json
import os
import time
import tracemalloc

import pytest

from grm.view import index
from grm.view.eval_dir import EvalDir, disagreements
from grm.view.run_dir import RunDir
from grm.view.server import start_in_thread
from tests.unit.view.http_probe import crawl, get_json, request
from tests.unit.view.synthetic import eval_line, sample_row, write_eval, write_run

GB = 2**30


def append(path, *lines):
    with open(path, "ab") as fh:
        for x in lines:
            fh.write((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n")


BAD_SAMPLES = [
    ({**sample_row(1, 5, 0, 1.0), "response": 42}, "response"),
    ({**sample_row(1, 5, 1, 1.0), "judges": ["not", "a", "map"]}, "judges"),
    ({**sample_row(1, 5, 2, 1.0), "reward": "high"}, "reward"),
    ({**sample_row(1, 5, 3, 1.0), "judges": {"h": {"critiques": [1, 2]}}}, "judges.h.critiques.0"),
    ({**sample_row(1, 5, 4, 1.0), "judges": {"h": {"masked": "perhaps"}}}, "judges.h.masked"),
    ({**sample_row(1, 5, 5, 1.0), "prompt": {"role": "user"}}, "prompt"),
]


def test_one_malformed_sample_row_is_a_bad_row_and_the_step_still_shows(tmp_path):
    run = write_run(tmp_path / "run", groups=2, size=2)
    append(run / "samples.jsonl", *(row for row, _ in BAD_SAMPLES))
    append(run / "samples.jsonl", b'{"step": 1, "x": [' + b"[" * 200 + b"]" * 200 + b"]}", b'{"step": 1, "id": "\xff\xfe"}')
    page = RunDir(run).sample_page(1)
    assert page["rows"] == 4 and page["groups_total"] == 2  # the four good rows, grouped as before
    assert page["bad_rows_total"] == len(BAD_SAMPLES) + 2
    for (_, field), msg in zip(BAD_SAMPLES, page["bad_rows"], strict=False):
        assert msg.startswith("samples.jsonl line ") and f": {field}:" in msg, msg
    assert "nested deeper than" in page["bad_rows"][-2] and "not JSON" in page["bad_rows"][-1]
    assert all(r["masked_reasons"] is not None for g in page["groups"] for r in g["rows"])


def test_lines_without_a_step_are_counted_not_shown(tmp_path):
    run = write_run(tmp_path / "run")
    append(
        run / "samples.jsonl",
        b"not json",
        b"[1, 2]",
        {"step": "3"},
        {"step": 1.5},
        {"step": 10**30},
        b'{"step": ' + b"9" * 5000 + b"}",
    )
    rd = RunDir(run)
    assert rd.steps() == [1, 2]
    assert any("6 lines have no integer step" in p for p in rd.problems())


def test_bad_metrics_rows_are_listed_and_the_rest_is_plotted(tmp_path):
    run = write_run(tmp_path / "run")
    append(
        run / "metrics.jsonl", b"{torn", {"step": "three", "kl": 1.0}, ["a"], {"step": 3, **{f"k{i}": i for i in range(10_001)}}
    )
    m = RunDir(run).metrics()
    assert [r["step"] for r in m["rows"]] == [1.0, 2.0]
    assert m["bad_rows_total"] == 4 and all(e.startswith("metrics.jsonl line ") for e in m["bad_rows"])
    assert "'step' must be an integer" in m["bad_rows"][1] and "numeric keys" in m["bad_rows"][3]


@pytest.mark.parametrize("what", ["fifo", "dir", "loop", "link"])
def test_special_files_in_place_of_every_data_file_neither_hang_nor_crash_the_server(tmp_path, what):
    run, ev = write_run(tmp_path / "run"), write_eval(tmp_path / "ev")
    (tmp_path / "target").write_text("{}\n")
    for d, names in (
        (run, ["samples.jsonl", "metrics.jsonl", "gate.json"]),
        (ev, ["results.jsonl", "items.jsonl", "metrics.json", "config.resolved.yaml"]),
    ):
        for name in names:
            (d / name).unlink(missing_ok=True)
            if what == "fifo":
                os.mkfifo(d / name)
            elif what == "dir":
                (d / name).mkdir()
            elif what == "loop":
                os.symlink(name, d / name)
            else:
                os.symlink(tmp_path / "target", d / name)
    httpd, url = start_in_thread([str(run), str(ev)])
    try:
        t0 = time.perf_counter()
        answers = crawl(url)
        assert time.perf_counter() - t0 < 20
        # every page answers; only the files that are not regular files are refused
        assert [t for t, code, _ in answers if code != 200 and "/file?name=" not in t] == []
        assert [t for t, code, _ in answers if code >= 500] == []
        run_problems = get_json(url, "/api/d/0/info")["problems"]
        ev_problems = get_json(url, "/api/d/1/info")["problems"]
        for name in ("samples.jsonl", "metrics.jsonl", "gate.json"):
            assert any(p.startswith(str(run / name)) for p in run_problems), (name, run_problems)
        for name in ("results.jsonl", "items.jsonl", "metrics.json", "config.resolved.yaml"):
            assert any(p.startswith(str(ev / name)) for p in ev_problems), (name, ev_problems)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_1_gb_file_is_listed_and_refused_without_being_read(tmp_path):
    run = write_run(tmp_path / "run")
    for name in ("huge.log", "gate.json"):
        with open(run / name, "wb") as fh:  # sparse: 1 GB on paper, nothing on disk
            fh.truncate(GB)
    httpd, url = start_in_thread([str(run)])
    try:
        tracemalloc.start()
        info = get_json(url, "/api/d/0/info")
        code, body = request(url, "/api/d/0/file?name=huge.log")
        metrics = get_json(url, "/api/d/0/metrics")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert {f["name"]: f["size"] for f in info["files"]}["huge.log"] == GB
    assert code == 400 and b"larger than the 2 MiB grm view reads" in body
    assert metrics["gate"] == [] and peak < 32 * 2**20


def test_a_256_mb_samples_line_without_a_newline_is_scanned_in_bounded_memory(tmp_path):
    run = write_run(tmp_path / "run")
    with open(run / "samples.jsonl", "ab") as fh:
        fh.write(b'{"step": 7, "response": "')
        fh.truncate(GB // 4)  # the rest: zero bytes and no newline, as a writer killed mid-line leaves it
    rd = RunDir(run)
    tracemalloc.start()
    assert rd.steps() == [1, 2]  # the unfinished line is not a row yet
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20
    append(run / "samples.jsonl", b'"}')  # now finished: a 256 MiB row, indexed by its head, never parsed
    assert rd.steps() == [1, 2, 7]
    page = rd.sample_page(7)
    assert page["rows"] == 0 and page["bad_rows_total"] == 1 and "longer than the 16 MiB a row may be" in page["bad_rows"][0]


def test_only_max_lines_are_indexed_and_the_page_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "MAX_LINES", 5)
    run = write_run(tmp_path / "run", steps=3, groups=2, size=2)  # 12 lines
    rd = RunDir(run)
    assert rd.steps() == [1, 2] and len(rd.samples) == 5
    assert any("only the first 5 lines of samples.jsonl" in p for p in rd.problems())


def test_word_diffs_are_bounded_per_page(tmp_path):
    run = write_run(tmp_path / "run", steps=1, groups=1, size=1)
    rep = " ".join("abcdefghij"[i % 10] for i in range(1900))
    append(run / "samples.jsonl", *({**sample_row(1, 0, k, 0.5 + k), "response": rep + f" {k}"} for k in range(1, 30)))
    t0 = time.perf_counter()
    page = RunDir(run).sample_page(1)
    assert time.perf_counter() - t0 < 10
    rows = page["groups"][0]["rows"]
    assert any(r.get("diff") for r in rows) and any(r.get("diff_skipped") for r in rows)


def test_malformed_eval_rows_are_bad_rows_and_every_page_still_answers(tmp_path):
    ev = write_eval(tmp_path / "ev")
    good = eval_line("i9", 1, "1", ["1", "1"], [3, 4])
    append(
        ev / "results.jsonl",
        {**good, "lengths": ["long", 1]},
        {**good, "item_id": ["a"]},
        {**good, "results": {"not": "a list"}},
        {**good, "results": [{"samples": [{"view": "first"}]}]},
        {**good, "judge": None},
        b"\xff\xfe not utf-8",
        {**good, "item_id": "i8", "results": [{"samples": [{"view": 0, "order": list(range(30)), "text": "t"}]}]},
    )
    (ev / "items.jsonl").write_bytes((ev / "items.jsonl").read_bytes() + b'{"v": 2, "id": "i8"}\n{oops\n')
    d = EvalDir(ev)
    s = d.summary()
    assert s["judges"]["pairwise"]["lines"] == 4 and s["bad_rows_total"] == 6
    assert "lengths.0" in s["bad_rows"][0] and "results line 8" not in s["bad_rows"][0]
    page = d.pair_page("pairwise")
    assert page["total"] == 4 and "2 bad lines" in page["note"]
    last = page["pairs"][-1]
    assert last["item_id"] == "i8" and last["prompt"] is None and "#27 = response 27" in last["presentations"][0]["title"]
    assert disagreements(d, "pairwise", d, "pairwise")["common"] == 4


@pytest.mark.parametrize(
    "config",
    [
        "a: [unclosed",
        "- just\n- a list\n",
        "judges: 12\ndata: {nested: [1]}\n",
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\ndata: *e\njudges: *e\n",
        "[" * 5000,
        b"\xff\xfe".decode("latin-1"),
    ],
)
def test_a_broken_config_leaves_the_judgments_viewable(tmp_path, config):
    ev = write_eval(tmp_path / "ev")
    (ev / "config.resolved.yaml").write_text(config, encoding="latin-1")
    d = EvalDir(ev)
    s = d.summary()
    assert s["judges"]["pairwise"]["lines"] == 3 and s["data"] is None
    assert len(json.dumps(s)) < 100_000  # an alias bomb is never expanded into the answer
