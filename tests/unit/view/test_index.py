"""The byte-offset index: steps read from line heads, torn tails left for later, growth and rewrites."""

import json
import os

from grm.view.index import LineIndex, RowLog


def test_index_by_step_and_torn_tail(tmp_path):
    f = tmp_path / "samples.jsonl"
    f.write_text('{"step": 1, "x": 1}\n{"step": 1, "x": 2}\n{"x": 3, "step": 2}\n{"step": 2, "x"')
    ix = LineIndex(f)
    assert ix.refresh() == 3
    assert ix.by_step == {1: [0, 1], 2: [2]}  # the third row has "step" second: found by json fallback
    assert [r["x"] for r in ix.read(ix.by_step[1])] == [1, 2]
    # the writer finishes its line and appends another: only the new bytes are scanned
    with open(f, "a") as fh:
        fh.write(': 4}\n{"step": 3, "x": 5}\n')
    assert ix.refresh() == 2
    assert [r["x"] for r in ix.read(ix.by_step[2])] == [3, 4]
    assert ix.refresh() == 0


def test_index_starts_over_when_the_file_is_replaced(tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text("".join(json.dumps({"step": s, "v": s}) + "\n" for s in (1, 2, 3)))
    log = RowLog(f)
    assert [r["v"] for r in log.refresh()] == [1, 2, 3]
    # resume truncates later steps by an atomic rewrite (a new inode), then appends again
    tmp = tmp_path / "new"
    tmp.write_text("".join(json.dumps({"step": s, "v": s * 10}) + "\n" for s in (1, 2, 3, 4)))
    os.replace(tmp, f)
    assert [r["v"] for r in log.refresh()] == [10, 20, 30, 40]


def test_bad_line_is_reported_not_raised(tmp_path):
    f = tmp_path / "samples.jsonl"
    f.write_text('{"step": 1, "x": 1}\n{"step": 1, broken\n')
    ix = LineIndex(f)
    ix.refresh()
    rows = ix.read(ix.by_step[1])
    assert rows[0]["x"] == 1 and "line 2: not JSON" in rows[1]["_error"]


def test_missing_file_is_empty(tmp_path):
    ix = LineIndex(tmp_path / "none.jsonl")
    assert ix.refresh() == 0 and len(ix) == 0
