"""What one request of `grm view` may cost, whatever the directory holds: a page of samples has at
most PAGE_ROWS rows however the step is grouped, a page turn reads only the rows it shows (the step
is parsed once), a step is read up to MAX_STEP_ROWS, and a long metrics.jsonl is thinned for the
plot and read only by its appended tail when the live page polls."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.view import run_metrics, sample_browser
from grm.view.run_dir import RunDir
from grm.view.run_metrics import PlotRows
from grm.view.sample_browser import PAGE_ROWS, page_spans
from grm.view.server import start_in_thread
from tests.unit.view.http_probe import get_json
from tests.unit.view.synthetic import write_run


def plain_row(step: int, i: int, group: str | None = None) -> dict:
    row = {"step": step, "id": f"r{i}", "prompt": "p", "response": f"answer {i}", "reward": (i % 7) / 7, "advantage": 0.1}
    if group is not None:
        row["group"] = group
    return row


def write_step(path, rows):
    path.mkdir(parents=True, exist_ok=True)
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def all_pages(rd: RunDir, step: int, **kw) -> list[dict]:
    first = rd.sample_page(step, **kw)
    return [first] + [rd.sample_page(step, page=p, **kw) for p in range(1, first["pages"])]


def test_a_page_has_at_most_page_rows_rows_whatever_the_grouping_and_every_row_shows_once(tmp_path):
    """1000 rows without a group key (one group of 1000), then 30 groups of 3 and one of 250: the old
    page sent all 1000 rows of the big group at once (a crafted 500,000 took 135 MB)."""
    rows = [plain_row(1, i) for i in range(1000)]
    rows += [plain_row(1, 1000 + i, group=f"g{i // 3}") for i in range(90)]
    rows += [plain_row(1, 2000 + i, group="big") for i in range(250)]
    rd = RunDir(write_step(tmp_path / "run", rows))
    pages = all_pages(rd, 1)
    assert pages[0]["rows"] == len(rows) and pages[0]["pages"] == len(pages) > len(rows) // PAGE_ROWS
    shown = Counter()
    for p in pages:
        assert sum(len(g["rows"]) for g in p["groups"]) <= PAGE_ROWS and len(p["groups"]) <= p["per_page"]
        assert len(json.dumps(p)) < 200_000
        for g in p["groups"]:
            assert g["rows"] and len(g["rows"]) <= g["kept"] and g["size"] == {"": 1000, "big": 250}.get(g["group"], 3)
            assert [r["reward"] for r in g["rows"]] == sorted((r["reward"] for r in g["rows"]), reverse=True)
            shown.update(r["id"] for r in g["rows"])
    assert shown == Counter(r["id"] for r in rows)  # each row once, none lost at a page's edge
    # a group that fits on a page is never split across two
    split = {g["group"] for p in pages for g in p["groups"] if len(g["rows"]) < g["kept"]}
    assert split == {"", "big"}


def test_a_page_turn_reads_only_the_rows_it_shows_and_an_append_only_the_new_ones(tmp_path, monkeypatch):
    rows = [plain_row(1, i) for i in range(600)] + [plain_row(2, i) for i in range(10)]
    run = write_step(tmp_path / "run", rows)
    views = Counter()
    real = sample_browser.sample_view

    def counted(row, where):
        views[where] += 1
        return real(row, where)

    monkeypatch.setattr(sample_browser, "sample_view", counted)
    rd = RunDir(run)
    rd.sample_page(1)
    first = sum(views.values())
    assert 600 <= first <= 600 + PAGE_ROWS + 2  # the step parsed once, then the page's own rows read again
    views.clear()
    page = rd.sample_page(1, page=2, sort="length", desc=False)
    assert sum(views.values()) <= PAGE_ROWS + 2 and sum(len(g["rows"]) for g in page["groups"]) == PAGE_ROWS
    views.clear()
    with open(run / "samples.jsonl", "a") as fh:
        fh.write(json.dumps(plain_row(1, 600)) + "\n")
    assert len(rd.step_rows(1).samples) == 601 and views == {"samples.jsonl line 611": 1}  # only the new row
    views.clear()
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:5]))  # replaced: parsed again
    assert rd.sample_page(1)["rows"] == 5 and sum(views.values()) == 5 + 5


def test_a_step_is_read_up_to_max_step_rows_and_the_page_says_how_many_it_has(tmp_path, monkeypatch):
    monkeypatch.setattr(sample_browser, "MAX_STEP_ROWS", 50)
    rd = RunDir(write_step(tmp_path / "run", [plain_row(1, i) for i in range(80)]))
    page = rd.sample_page(1)
    assert page["rows"] == 50 and "step 1 has 80 rows; the first 50 are shown" in page["note"]


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=40), max_size=12),
    max_groups=st.integers(1, 5),
    max_rows=st.integers(1, 30),
    max_bytes=st.integers(1, 200),
)
def test_pages_hold_every_row_once_in_order_within_their_limits(groups, max_groups, max_rows, max_bytes):
    pages = page_spans(groups, max_groups=max_groups, max_rows=max_rows, max_bytes=max_bytes)
    flat = [(g, i) for page in pages for g, a, b in page for i in range(a, b)]
    assert flat == [(g, i) for g, sizes in enumerate(groups) for i in range(len(sizes))]
    for page in pages:
        rows = sum(b - a for _, a, b in page)
        size = sum(sum(groups[g][a:b]) for g, a, b in page)
        assert page and len(page) <= max_groups and 0 < rows <= max_rows
        assert size <= max_bytes or rows == 1  # a row over the budget shows alone
    for g, sizes in enumerate(groups):
        if len(sizes) <= max_rows and sum(sizes) <= max_bytes:  # fits a page: never split
            assert sum(1 for page in pages for h, _, _ in page if h == g) == 1


@settings(max_examples=200, deadline=None)
@given(widths=st.lists(st.integers(1, 40), max_size=400), max_points=st.integers(2, 30), max_values=st.integers(40, 400))
def test_plotted_rows_stay_few_evenly_spread_and_end_with_the_last(widths, max_points, max_values):
    plot = PlotRows(max_points, max_values)
    for i, w in enumerate(widths):
        plot.add({"step": i, **{f"k{j}": 1.0 for j in range(w - 1)}})
    rows = plot.rows()
    assert plot.total == len(widths) and len(rows) <= max_points + 1
    if widths:
        assert rows[-1]["step"] == len(widths) - 1
        kept = rows[:-1] if rows[-1]["step"] % plot.stride else rows
        assert [r["step"] for r in kept] == list(range(0, len(widths), plot.stride))  # every stride-th row, none missing
        assert len(kept) <= max_points and (sum(len(r) for r in kept) <= max_values or len(kept) == 1)


def test_a_long_metrics_log_is_thinned_for_the_plot_and_a_poll_reads_only_the_appended_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(run_metrics, "MAX_POINTS", 100)
    run = write_run(tmp_path / "run", steps=1)
    with open(run / "metrics.jsonl", "w") as fh:
        fh.writelines(json.dumps({"step": s, "reward_mean": s / 1000, "kl": 0.1}) + "\n" for s in range(1, 1001))
    parsed = []
    real = run_metrics.metric_row
    monkeypatch.setattr(run_metrics, "metric_row", lambda row, n: parsed.append(n) or real(row, n))
    rd = RunDir(run)
    m = rd.metrics()
    assert m["rows_total"] == 1000 and 50 < len(m["rows"]) <= 101 and m["rows"][-1]["step"] == 1000
    assert "metrics.jsonl has 1,000 rows: one row in 16 and the last are plotted" == m["note"]
    assert m["groups"] == {"reward_mean": ["reward_mean"], "kl": ["kl"]} and len(parsed) == 1000
    parsed.clear()
    assert rd.metrics()["rows"] == m["rows"] and parsed == []  # a poll without news parses nothing
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 1001, "reward_mean": 2.0, "seconds_step": 3}) + "\n")
    m = rd.metrics()
    assert parsed == [1000] and m["rows"][-1] == {"step": 1001.0, "reward_mean": 2.0, "seconds_step": 3.0}
    assert m["groups"]["seconds_step"] == ["seconds_step"]


def test_the_page_reads_the_plots_thinning_and_the_group_split_from_the_answer(tmp_path):
    """The page's script follows the answer: pages from ``pages``, a split group's range, the thinning note."""
    from pathlib import Path

    js = (Path(__file__).parents[3] / "grm" / "view" / "static" / "app.js").read_text()
    assert "data.pages" in js and "g.first" in js and "metrics.note" in js and "metrics.rows_total" in js
    run = write_step(tmp_path / "run", [plain_row(1, i) for i in range(250)])
    httpd, url = start_in_thread([str(run)])
    try:
        p = get_json(url, "/api/d/0/samples?step=1&page=1")
    finally:
        httpd.shutdown()
        httpd.server_close()
    (g,) = p["groups"]
    assert p["pages"] == 2 and (g["first"], len(g["rows"]), g["kept"], g["size"]) == (PAGE_ROWS, 50, 250, 250)


@pytest.mark.parametrize("per_page", [1, 20])
def test_pages_past_the_last_are_empty(tmp_path, per_page):
    rd = RunDir(write_step(tmp_path / "run", [plain_row(1, i, group=f"g{i}") for i in range(5)]))
    assert rd.sample_page(1, per_page=per_page)["pages"] == (5 if per_page == 1 else 1)
    assert rd.sample_page(1, page=5, per_page=per_page)["groups"] == []
