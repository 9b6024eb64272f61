"""Malformed files in a run or eval directory show as bad data: one bad row never takes down its
step's page, a FIFO or a link loop never hangs or crashes the server, and a huge file is never read
whole (issue #39)."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.jsonl import json_safe
from grm.view import eval_dir, index, sample_browser
from grm.view import rows as row_checks
from grm.view.eval_dir import EvalDir, disagreements
from grm.view.index import MAX_MESSAGE_CHARS, one_line
from grm.view.run_dir import RunDir
from grm.view.server import start_in_thread
from tests.unit.view.http_probe import crawl, get_json, request
from tests.unit.view.synthetic import episode, episode_row, eval_line, sample_row, write_eval, write_run

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
        # info first, on a fresh server: every file's problem is listed before any other request
        # (metrics.jsonl's and items.jsonl's were missing until /metrics or /pairs had been asked)
        run_problems = get_json(url, "/api/d/0/info")["problems"]
        ev_problems = get_json(url, "/api/d/1/info")["problems"]
        for name in ("samples.jsonl", "metrics.jsonl", "gate.json"):
            assert any(p.startswith(str(run / name)) for p in run_problems), (name, run_problems)
        for name in ("results.jsonl", "items.jsonl", "metrics.json", "config.resolved.yaml"):
            assert any(p.startswith(str(ev / name)) for p in ev_problems), (name, ev_problems)
        t0 = time.perf_counter()
        answers = crawl(url)
        assert time.perf_counter() - t0 < 20
        # every page answers; only the files that are not regular files are refused
        assert [t for t, code, _ in answers if code != 200 and "/file?name=" not in t] == []
        assert [t for t, code, _ in answers if code >= 500] == []
        # and the same list whatever was asked in between
        assert get_json(url, "/api/d/0/info")["problems"] == run_problems
        assert get_json(url, "/api/d/1/info")["problems"] == ev_problems
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


BIG_INT = "1" + "0" * 400
"""A 401-digit integer: valid JSON, and past what a float holds (float() raises OverflowError)."""


def served_json(run, *targets):
    httpd, url = start_in_thread([str(run)])
    try:
        return [get_json(url, t) for t in targets]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_whatever_building_a_rows_view_raises_is_that_rows_bad_row_and_its_step_still_shows(tmp_path, monkeypatch):
    """A 401-digit log-prob in a trajectory raised OverflowError out of Trajectory.from_dict and
    answered the whole step with an error; a bug in any row's view must cost that row alone."""
    run = write_run(tmp_path / "run", groups=2, size=2)
    big = json.dumps(episode_row(1, 7, episode("ep-big"))).replace("[-0.1, -0.2, -0.3]", f"[{BIG_INT}, -0.2, -0.3]")
    assert BIG_INT in big
    append(run / "samples.jsonl", big.encode(), episode_row(1, 8, episode("ep-bug")), episode_row(1, 9, episode("ep-ok")))
    real = sample_browser.with_episode

    def buggy(row, where):
        if row.get("id") == "s1-g0-8":
            raise RuntimeError("a bug in the view\n" + "x" * 10_000)
        return real(row, where)

    monkeypatch.setattr(sample_browser, "with_episode", buggy)
    (page,) = served_json(run, "/api/d/0/samples?step=1")
    assert page["rows"] == 5 and page["bad_rows_total"] == 2  # the four plain rows and ep-ok
    big_msg, bug_msg = page["bad_rows"]
    assert big_msg.startswith("samples.jsonl line 9: ") and len(big_msg) <= MAX_MESSAGE_CHARS
    assert bug_msg.startswith("samples.jsonl line 10: cannot be shown (RuntimeError: a bug in the view x")
    assert len(bug_msg) <= MAX_MESSAGE_CHARS and "\n" not in bug_msg
    assert "ep-ok" in {(r.get("episode") or {}).get("id") for g in page["groups"] for r in g["rows"]}


def test_a_metrics_value_that_is_no_finite_number_is_its_rows_bad_row_not_the_apis(tmp_path):
    """Appending {"step": 3, "reward": <401 digits>} made every /metrics answer 500 (math.isfinite)."""
    run = write_run(tmp_path / "run")
    append(
        run / "metrics.jsonl",
        f'{{"step": 3, "reward": {BIG_INT}}}'.encode(),
        b'{"step": 4, "kl": 1e400}',
        b'{"step": 5, "kl": NaN}',
        b'{"step": 6, "x": {"y": -Infinity}}',
        f'{{"step": {BIG_INT}}}'.encode(),
        {"step": 8, "reward_mean": 0.8},
    )
    first, again = served_json(run, "/api/d/0/metrics", "/api/d/0/metrics")
    assert first == again and [r["step"] for r in first["rows"]] == [1, 2, 8]
    assert first["bad_rows"] == [
        "metrics.jsonl line 3: reward: an integer of about 401 digits, too large to plot",
        "metrics.jsonl line 4: kl: inf is not a finite number",
        "metrics.jsonl line 5: kl: nan is not a finite number",
        "metrics.jsonl line 6: x/y: -inf is not a finite number",
        "metrics.jsonl line 7: step: an integer of about 401 digits, too large to plot",
    ]


FIVE_MB = "x" * 5_000_000


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.update(id=FIVE_MB + "\nsecond line", end_reason="bored"),
        lambda t: t.update(trajectory_version=[FIVE_MB]),
        lambda t: t["turns"][0].update(role=FIVE_MB),
        lambda t: t["signals"].update({FIVE_MB: "yes"}),
    ],
    ids=["id", "version", "role", "signal-name"],
)
def test_a_bad_rows_message_is_one_bounded_line_naming_its_row(tmp_path, damage):
    """A 5 MB trajectory id, version or role was quoted whole: a 5 MB bad-row entry, a 25 MB answer."""
    run = write_run(tmp_path / "run")
    traj = episode("ep-huge")
    damage(traj)
    append(run / "samples.jsonl", episode_row(1, 7, traj))
    append(run / "metrics.jsonl", {"step": 3, FIVE_MB: 1.0}, {"step": 4, "format": FIVE_MB})
    httpd, url = start_in_thread([str(run)])
    try:
        code, body = request(url, "/api/d/0/samples?step=1")
        page = json.loads(body)
        mcode, mbody = request(url, "/api/d/0/metrics")
        metrics = json.loads(mbody)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert code == 200 and mcode == 200 and len(body) < 100_000 and len(mbody) < 20_000
    (msg,) = page["bad_rows"]
    assert msg.startswith("samples.jsonl line 9: trajectory") and len(msg) <= MAX_MESSAGE_CHARS and "\n" not in msg
    assert len(metrics["bad_rows"]) == 2
    for line, m in zip((3, 4), metrics["bad_rows"], strict=True):
        assert m.startswith(f"metrics.jsonl line {line}: ") and len(m) <= MAX_MESSAGE_CHARS


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=600), limit=st.integers(40, 400))
def test_a_message_is_one_line_within_its_limit_and_keeps_its_head(text, limit):
    out = one_line(text, limit)
    assert len(out) <= limit and len(out.splitlines()) <= 1 and not re.search("[\x00-\x1f\x7f-\x9f]", out)
    clean = re.sub("[\x00-\x1f\x7f-\x9f\u2028\u2029]", " ", text)
    assert out == clean if len(text) <= limit else out.startswith(clean[: limit // 2]) and f"[{len(text):,} characters]" in out


HUGE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([10**400, -(10**400), 2**63, float("inf"), float("-inf"), float("nan"), "x" * 100_000, "\n\x1b[2J"]),
    st.floats(),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(
    HUGE_SCALARS,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.one_of(st.text(max_size=5), st.just("k" * 5000)), kids, max_size=3)
    ),
    max_leaves=6,
)


def damage_anywhere(draw, row: dict) -> dict:
    """``row`` with one value at any depth (a trajectory's turn, a judge's critique...) replaced by any
    JSON value, huge numbers and strings included; ``step`` stays so the row stays in its step."""
    row = json.loads(json.dumps(row))
    node, keys = row, [k for k in row if k != "step"]
    while keys:
        k = draw(st.sampled_from(keys))
        child = node[k]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            node, keys = child, list(child) if isinstance(child, dict) else list(range(len(child)))
            continue
        node[k] = draw(JSON_VALUES)
        break
    return row


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_value_anywhere_in_a_row_is_shown_or_is_one_bounded_bad_row(data):
    with tempfile.TemporaryDirectory() as tmp:
        run = write_run(Path(tmp) / "run", steps=1, groups=1, size=2)
        rows = [damage_anywhere(data.draw, episode_row(1, k, episode(f"ep{k}"), credit=[0.5, None, 0.5])) for k in (3, 4)]
        rows.append(damage_anywhere(data.draw, sample_row(1, 1, 5, 0.5)))
        metrics = damage_anywhere(data.draw, {"step": 3, "reward_mean": 0.5, "masked_by_judge": {"j": 1}})
        append(run / "samples.jsonl", *(json.dumps(r, allow_nan=True).encode() for r in rows))
        append(run / "metrics.jsonl", json.dumps(metrics, allow_nan=True).encode())
        rd = RunDir(run)
        try:
            page = rd.sample_page(1, sort=data.draw(st.sampled_from(["reward", "advantage", "length", "masked"])))
            m = rd.metrics()
        finally:
            rd.folder.close()
        json.dumps(json_safe(page), allow_nan=False)  # what the server writes
        json.dumps(json_safe(m), allow_nan=False)
        assert page["rows"] + page["bad_rows_total"] == 5 and page["rows"] >= 2
        assert m["rows_total"] + m["bad_rows_total"] == 2 and m["rows_total"] >= 1
        for msg in page["bad_rows"] + m["bad_rows"]:
            assert re.match(r"(samples|metrics)\.jsonl line \d+: ", msg) and len(msg) <= MAX_MESSAGE_CHARS
            assert len(msg.splitlines()) == 1


def test_whatever_reading_or_drawing_a_results_line_raises_is_that_lines_problem(tmp_path, monkeypatch):
    """The eval pages hold to the same rule: a line the checks trip over (here: a bug planted in the
    format check and in drawing a pair) is a bad row or an errored pair, and the other pairs show."""
    ev = write_eval(tmp_path / "ev")
    real_read, real_draw = row_checks.read_row, eval_dir.presentations

    def read_row(kind, row, *a, **k):
        if row.get("item_id") == "i2":
            raise TypeError("a bug in the check\n" + "y" * 5000)
        return real_read(kind, row, *a, **k)

    def presentations(line):
        if line.get("item_id") == "i1":
            raise ZeroDivisionError("a bug in the drawing")
        return real_draw(line)

    monkeypatch.setattr(row_checks, "read_row", read_row)
    monkeypatch.setattr(eval_dir, "presentations", presentations)
    d = EvalDir(ev)
    s = d.summary()
    (bad,) = s["bad_rows"]
    assert (
        bad.startswith("results.jsonl line 3: cannot be read (TypeError: a bug in the check y") and len(bad) <= MAX_MESSAGE_CHARS
    )
    page = d.pair_page("pairwise")
    assert [p["item_id"] for p in page["pairs"]] == ["i0", None]
    assert page["pairs"][1]["error"] == "results.jsonl line 2: cannot be shown (ZeroDivisionError: a bug in the drawing)"
