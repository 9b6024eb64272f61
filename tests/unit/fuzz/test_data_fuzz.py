"""Fuzz data files through the data layer (``load_rows``, ``to_items``, ``load_prompts``) and through
``grm eval`` (a rule judge: no model) and ``grm judge render --sample``.

Rows miss columns, carry extra or null ones, hold the wrong types, empty and 1 MB strings, and the
files themselves are JSON lines, JSON, CSV, or broken. The property: the data is accepted as
well-formed items, or refused with a ``DataError`` (exit 2 on the command line) naming the file,
and the row when one row is at fault; never another exception.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.config.pipeline import DataSpec
from grm.data.errors import DataError
from grm.data.items import FIELDS, default_map, parse_map, to_items
from grm.data.prompts import load_prompts
from grm.data.sources import load_rows
from grm.jsonl import JsonlError, append_jsonl, read_jsonl
from tests.unit.fuzz.support import assert_clean_failure, budget, count, fresh, run_cli

MB = "x" * 2**20
COLUMNS = ["prompt", "response", "response_a", "response_b", "label", "human_score", "reference", "id", "input", "output_1",
           "output_2", "question", "answer", "metadata"]  # fmt: skip

cells = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "1",
            "2",
            "A",
            "b",
            "1.0",
            "nan",
            "inf",
            "-inf",
            "NA",
            "null",
            "None",
            "42",
            "1e400",
            "💥",
            "\x00",
            "a,b",
            'q"uote',
            "line\nbreak",
            "\ufeff",
            "é",
        ]
    ),  # fmt: skip
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 10**30]),
    st.floats(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["a", "role", "content"]), st.text(max_size=3), max_size=2),
    st.just(MB),
)
SHAPES = {
    "pair": {"prompt": "Q?", "response_a": "a", "response_b": "b", "label": 1, "id": "p1"},
    "llmbar": {"input": "Q?", "output_1": "a", "output_2": "b", "label": 2},
    "scored": {"prompt": "Q?", "response": "The answer is 4.", "human_score": 3.5, "reference": "4", "id": 7},
    "unlabelled": {"prompt": "Q?", "response": "r"},
}


@st.composite
def plausible_row(draw: st.DrawFn, shape: str) -> dict[str, Any]:
    """A well-formed row of ``shape`` with up to two faults: a column missing, null, of the wrong
    type, empty, 1 MB long, or an extra one."""
    row = dict(SHAPES[shape])
    row["id"] = draw(st.one_of(st.none(), st.integers(0, 3).map(str), st.integers(0, 3)))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        key = draw(st.sampled_from(sorted(row) + ["extra"]))
        fault = draw(st.sampled_from(["drop", "null", "cell", "empty", "mb"]))
        if fault == "drop":
            row.pop(key, None)
        else:
            row[key] = {"null": None, "empty": "", "mb": MB}.get(fault) if fault != "cell" else draw(cells)
    return row


rows_strategy = st.one_of(
    st.sampled_from(sorted(SHAPES)).flatmap(lambda shape: st.lists(plausible_row(shape), min_size=1, max_size=5)),
    st.lists(
        st.dictionaries(st.one_of(st.sampled_from(COLUMNS), st.text(max_size=6)), cells, max_size=7), min_size=1, max_size=5
    ),
)


def _json_default(x: Any) -> Any:
    return str(x)


def encode(rows: list[Any], fmt: str) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(r, default=_json_default) + "\n" for r in rows).encode()
    if fmt == "json":
        return json.dumps(rows, default=_json_default).encode()
    buf = io.StringIO()  # csv: the union of the columns, values as text
    cols = list(dict.fromkeys(str(k) for r in rows if isinstance(r, dict) for k in r))
    w = csv.writer(buf)
    w.writerow(cols)
    for r in rows:
        w.writerow(["" if not isinstance(r, dict) or r.get(c) is None else r.get(c) for c in cols])
    return buf.getvalue().encode("utf-8", errors="replace")


@st.composite
def data_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """(suffix, bytes): rows in a format, sometimes not objects, sometimes damaged."""
    fmt = draw(st.sampled_from(["jsonl", "json", "csv"]))
    rows: list[Any] = draw(rows_strategy)
    if draw(st.sampled_from([False] * 9 + [True])):
        rows.insert(
            draw(st.integers(0, len(rows))), draw(st.one_of(st.integers(), st.text(max_size=4), st.none(), st.lists(st.none())))
        )
    raw = encode(rows, fmt)
    damage = draw(st.sampled_from(["none"] * 12 + ["cut", "bad-byte", "bom", "blank-lines", "garbage-line", "empty"]))
    if damage == "cut":
        raw = raw[: len(raw) - draw(st.integers(1, 40))]
    elif damage == "bad-byte":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\xff\xfe" + raw[at:]
    elif damage == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif damage == "blank-lines":
        raw = raw.replace(b"\n", b"\n\n")
    elif damage == "garbage-line":
        raw += draw(st.sampled_from([b"{not json\n", b"]\n", b"1,2,3,4,5,6,7,8\n", b'{"prompt": "x"\n', b"\x00\n"]))
    elif damage == "empty":
        raw = b""
    return fmt, raw


maps = st.one_of(
    st.none(),  # the default map: the file's own column names, or LLMBar's
    st.none(),
    st.lists(
        st.builds(
            lambda f, c: f"{f}={c}", st.sampled_from(list(FIELDS) + ["promt", ""]), st.sampled_from(COLUMNS + ["", "nope"])
        ),
        max_size=5,
    ),
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data-fuzz")


def names_row(msg: str, path: str) -> bool:
    """The message names the file, and a row when it blames one ('row 3', 'line 4', 'FILE:4:')."""
    numbered = re.search(r"\b(row|line|item) \d+", msg) or re.search(re.escape(path) + r":\d+", msg)
    return path in msg and (not re.search(r"\b(row|line|item)\b", msg) or numbered is not None)


def check_items(items: list[Any]) -> None:
    ids = [it.id for it in items]
    assert len(set(ids)) == len(ids), "duplicate ids accepted"
    for it in items:
        assert isinstance(it.prompt, str) and isinstance(it.id, str)
        assert it.responses and all(isinstance(r, str) for r in it.responses)
        assert it.kind in ("pair", "scored", "unlabelled")
        assert it.label in (None, 1, 2)
        assert it.reference is None or isinstance(it.reference, str)
        if it.kind == "scored":
            assert isinstance(it.human_score, float) and math.isfinite(it.human_score), f"human_score {it.human_score!r}"


@settings(max_examples=budget(200))
@given(file=data_files(), mapping=maps, skip=st.booleans())
def test_rows_to_items(folder, file, mapping, skip):
    fmt, raw = file
    path = fresh(folder, f".{fmt}")
    path.write_bytes(raw)
    src = str(path)
    count("data rows")
    try:
        rows = load_rows(src)
        assert rows and all(isinstance(r, dict) for r in rows)
        m = parse_map(mapping) if mapping is not None else default_map(src, set().union(*rows))
        items, problems = to_items(rows, m, src, skip_bad_rows=skip)
    except DataError as e:
        assert names_row(str(e), src) or str(e).startswith("--map"), str(e)
        return
    check_items(items)
    assert all(names_row(p, src) for p in problems), problems
    assert len(items) + len(problems) == len(rows)


@settings(max_examples=budget(150))
@given(
    file=data_files(),
    field=st.sampled_from(["prompt", "question", "input", "nope"]),
    reference=st.sampled_from(["reference", "answer", None]),
    limit=st.sampled_from([None, 1, 3]),
)
def test_prompts(folder, file, field, reference, limit):
    fmt, raw = file
    path = fresh(folder, f".{fmt}")
    path.write_bytes(raw)
    count("data prompts")
    try:
        prompts = load_prompts(DataSpec(prompts=str(path), prompt_field=field, reference_field=reference, limit=limit))
    except DataError as e:
        assert names_row(str(e), str(path)), str(e)
        return
    assert prompts and (limit is None or len(prompts) <= limit)
    for p in prompts:
        assert isinstance(p.text, str) and p.text.strip() and isinstance(p.id, str)
        assert p.reference is None or isinstance(p.reference, str)


@pytest.fixture(scope="module")
def no_plots() -> Any:
    """``grm eval`` writes its metrics and report, without drawing the PNGs (seconds each)."""
    from grm.evaluation import report

    saved = report._plots
    report._plots = lambda out, results, names: []
    yield
    report._plots = saved


@settings(max_examples=budget(40))
@given(file=data_files(), mapping=maps, skip=st.booleans())
def test_eval_command(folder, no_plots, file, mapping, skip):
    fmt, raw = file
    path = fresh(folder, f".{fmt}")
    path.write_bytes(raw)
    out = fresh(folder, "-out")
    argv = ["eval", "builtin:numeric-answer", "--data", str(path), "--out", str(out), "--batch-size", "3"]
    argv += [f"--map={m}" for m in mapping or []] + (["--skip-bad-rows"] if skip else [])
    count("data eval")
    res = run_cli(*argv)
    if res.code != 0:
        assert_clean_failure(res, path, or_names="--map")


SAMPLE_KEYS = ["prompt", "messages", "response", "responses", "reference", "metadata", "critique", "id", "extra"]
samples = st.one_of(
    st.dictionaries(st.sampled_from(SAMPLE_KEYS), cells, max_size=5),
    st.dictionaries(st.sampled_from(SAMPLE_KEYS), st.one_of(cells, st.lists(cells, max_size=3)), max_size=5),
    st.builds(
        lambda p, m: {"messages": m, **p},
        st.fixed_dictionaries({}, optional={"response": cells, "responses": st.lists(cells, max_size=3)}),
        st.one_of(cells, st.lists(st.one_of(cells, st.dictionaries(st.sampled_from(["role", "content"]), cells)), max_size=3)),
    ),
)


@settings(max_examples=budget(100))
@given(
    judge=st.sampled_from(
        [
            "builtin:helpfulness-pointwise",
            "builtin:pairwise-preference",
            "builtin:listwise-grm",
            "builtin:correctness-reference",
            "builtin:numeric-answer",
        ]
    ),  # fmt: skip
    content=st.one_of(samples, st.lists(samples, max_size=3), cells),
)
def test_judge_sample_files(folder, judge, content):
    path = fresh(folder, ".json")
    path.write_text(json.dumps(content, default=_json_default), encoding="utf-8")
    count("data samples")
    res = run_cli("judge", "render", judge, "--sample", str(path), "model=fuzz-model")  # no tokenizer to load
    if res.code != 0:
        assert_clean_failure(res, path)


# --------------------------------------------------------------------------- JSON lines, byte by byte
# The property of issue #39 for every JSON-lines reader (run and eval files through
# ``grm.jsonl.read_jsonl``, data files through ``load_rows``): a valid file reads back exactly, line
# separators other than "\n" inside strings included; a damaged line raises the reader's GrmError
# naming the file and its 1-based line; only a run file's torn last line is dropped (and cut when
# repairing); nothing else escapes.

LINE_BREAKERS = ["\u2028", "\u2029", "\u0085", "\r", "\n", "\x00", "\ufeff", "\x0b", "\x1c", "\x1e"]
json_text = st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(LINE_BREAKERS)), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | json_text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(json_text, kids, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(json_text, json_values, max_size=4)


def encoded(row: dict[str, Any]) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode()  # what append_jsonl writes: separators stay raw


def not_an_object_line(b: bytes) -> bool:
    """Bytes that cannot be a JSON object line: not blank, no line end, not opening with "{"."""
    core = b.strip().removeprefix(b"\xef\xbb\xbf").strip()
    return b"\n" not in b and bool(core) and not core.startswith(b"{")


@st.composite
def damaged_lines(draw: st.DrawFn) -> bytes:
    """One line that is no JSON object: a cut-short object, a bad byte or NUL put into one, a JSON
    value of another type, or arbitrary bytes."""
    whole = encoded(draw(objects))
    kind = draw(st.sampled_from(["cut", "byte", "value", "binary"]))
    if kind == "cut":
        return whole[: draw(st.integers(1, len(whole) - 1))]
    if kind == "byte":
        at = draw(st.integers(0, len(whole)))
        return whole[:at] + draw(st.sampled_from([b"\xff", b"\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"\x00"])) + whole[at:]
    if kind == "value":
        return json.dumps(draw(json_values.filter(lambda v: not isinstance(v, dict))), ensure_ascii=False).encode()
    return draw(st.binary(min_size=1, max_size=40).filter(not_an_object_line))


@st.composite
def layouts(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(line end, file start): LF or CRLF, with or without a UTF-8 byte order mark."""
    return draw(st.sampled_from([b"\n", b"\r\n"])), draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))


@settings(max_examples=budget(150))
@given(rows=st.lists(objects, max_size=6), layout=layouts(), blank=st.sampled_from([None, 0, 1, 3]), final=st.booleans())
def test_valid_jsonl_reads_back_exactly(folder, rows, layout, blank, final):
    count("jsonl valid")
    path = fresh(folder, ".jsonl")
    append_jsonl(path, rows)  # the writer's own bytes first
    assert read_jsonl(path) == rows
    eol, start = layout
    lines = [encoded(r) for r in rows]
    if blank is not None:
        lines.insert(min(blank, len(lines)), b"  \t")
    path.write_bytes(start + eol.join(lines) + eol)
    assert read_jsonl(path, repair=False) == rows
    if rows:  # a data file: its last line may lack a line end
        path.write_bytes(start + eol.join(lines) + (eol if final else b""))
        got = load_rows(str(path))
        assert got == rows
        assert [r.line for r in got] == [n for n, ln in enumerate(lines, 1) if ln != b"  \t"]


@settings(max_examples=budget(200))
@given(
    rows=st.lists(objects, min_size=1, max_size=6),
    at=st.integers(0, 6),
    bad=damaged_lines(),
    layout=layouts(),
    torn=st.booleans(),
)
def test_a_damaged_jsonl_line_is_named_by_its_file_line(folder, rows, at, bad, layout, torn):
    count("jsonl damaged")
    eol, start = layout
    lines = [encoded(r) for r in rows]
    at = min(at, len(lines))
    lines.insert(at, bad)
    content = start + eol.join(lines) + eol + (encoded(rows[0])[:-1] if torn else b"")
    path = fresh(folder, ".jsonl")
    path.write_bytes(content)
    with pytest.raises(JsonlError) as e:
        read_jsonl(path)
    assert str(e.value).startswith(f"{path}:{at + 1}: ") and "\n" not in str(e.value), str(e.value)
    assert path.read_bytes() == content  # a damaged file is left as found, torn tail included
    with pytest.raises(DataError) as e:
        load_rows(str(path))
    assert str(e.value).startswith(f"{path}:{at + 1}: "), str(e.value)


@settings(max_examples=budget(100))
@given(rows=st.lists(objects, max_size=5), tail=objects, cut=st.integers(1, 10**6), layout=layouts())
def test_only_a_torn_last_line_is_dropped_and_only_a_run_file_forgives_it(folder, rows, tail, cut, layout):
    count("jsonl torn")
    eol, start = layout
    whole = encoded(tail)
    good = start + b"".join(encoded(r) + eol for r in rows)
    path = fresh(folder, ".jsonl")
    path.write_bytes(good + whole[: 1 + cut % (len(whole) - 1)])
    assert read_jsonl(path, repair=False) == rows  # a reader (grm view, grm rescore) cuts nothing
    assert read_jsonl(path) == rows and path.read_bytes() == (good if rows else b"")  # the writer cuts the torn line
    path.write_bytes(good + whole[: 1 + cut % (len(whole) - 1)])
    with pytest.raises(DataError) as e:  # a data file has no writer to have been killed: the line is bad
        load_rows(str(path))
    assert str(e.value).startswith(f"{path}:{len(rows) + 1}: "), str(e.value)
