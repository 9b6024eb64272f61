"""Data files are read as they are written, and every error names the file and the 1-based line a
row starts on (issue #39): line separators inside JSON strings, CSV quotes, file types, encodings."""

import json
import os

import pytest

from grm.config.pipeline import DataSpec
from grm.data.errors import DataError
from grm.data.items import default_map, to_items
from grm.data.prompts import load_prompts
from grm.data.sources import load_rows

SEPARATORS = "a\u2028b\u0085c\u2029d\x0be\x0cf\x1cg\rh"  # str.splitlines cuts at every one of these


def test_jsonl_keeps_unicode_line_separators_inside_strings(tmp_path):
    rows = [{"prompt": SEPARATORS, "response": "r"}, {"prompt": "second", "response": SEPARATORS}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")  # raw, as ensure_ascii=False writers leave it
    got = load_rows(str(path))
    assert got == rows and [r.line for r in got] == [1, 2]
    items, _ = to_items(got, default_map(str(path), set(rows[0])), str(path))
    assert items[0].prompt == SEPARATORS


def test_jsonl_errors_name_the_file_line_counting_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a\u2028b", "response": "r"}\n\n{"prompt": "c", "response": 5}\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{path}:3: column 'response' \(response\) must be a string, found int"):
        to_items(load_rows(str(path)), {"prompt": "prompt", "response": "response"}, str(path))
    path.write_text('{"prompt": "a"}\n\n{"prompt": \n{"prompt": "c"}\n')
    with pytest.raises(DataError, match=rf"^{path}:3: invalid JSON"):
        load_rows(str(path))
    path.write_text('{"prompt": "a"}\n[1, 2]\n')
    with pytest.raises(DataError, match=rf"^{path}:2: expected a JSON object"):
        load_rows(str(path))
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "\xc3("}\n')
    with pytest.raises(DataError, match=rf"^{path}:2: not valid UTF-8 \(byte 0xc3"):
        load_rows(str(path))
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "b\x00"}\n')
    with pytest.raises(DataError, match=rf"^{path}:2: invalid JSON: Invalid control character"):
        load_rows(str(path))


def test_prompts_name_the_file_line_and_keep_it(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n\n\n{"prompt": ""}\n')
    with pytest.raises(DataError, match=rf"^{path}:4: column 'prompt' must be a non-empty string"):
        load_prompts(DataSpec(prompts=str(path)))
    path.write_text('{"prompt": "a"}\n\n\n{"prompt": "b"}\n')
    assert [(p.id, p.where) for p in load_prompts(DataSpec(prompts=str(path)))] == [
        ("row-0", f"{path}:1"),  # the default ids count rows from 0, as they always have (resume keys)
        ("row-1", f"{path}:4"),
    ]


def test_a_duplicate_id_names_both_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a", "response": "r", "id": "x"}\n\n{"prompt": "b", "response": "r", "id": "x"}\n')
    with pytest.raises(DataError, match=rf"^{path}:3: duplicate id 'x' \(first at {path}:1\)"):
        to_items(load_rows(str(path)), {"prompt": "prompt", "response": "response", "id": "id"}, str(path))


def test_bom_crlf_and_a_missing_final_newline_are_read(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\r\n\r\n{"prompt": "b"}')
    got = load_rows(str(path))
    assert got == [{"prompt": "a"}, {"prompt": "b"}] and [r.line for r in got] == [1, 3]
    csv = tmp_path / "d.csv"
    csv.write_bytes(b'\xef\xbb\xbfprompt,response\r\n"two\r\nlines",r\r\nq,"s"')
    got = load_rows(str(csv))
    assert got == [{"prompt": "two\r\nlines", "response": "r"}, {"prompt": "q", "response": "s"}]
    assert [r.line for r in got] == [2, 4]


def test_csv_unclosed_quote_is_named_at_its_row_not_blamed_as_a_missing_column(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text('prompt,response\nq1,r1\n"q2,r2\nq3,r3\n')
    with pytest.raises(DataError, match=rf"^{csv}:3: a quoted cell opened in the row starting here is never closed"):
        load_rows(str(csv))
    csv.write_text('prompt,response\nq1,r1\n"He said "hi"",r2\n')
    with pytest.raises(DataError, match=rf"^{csv}:3: invalid CSV: .*a quote inside a quoted cell is written twice"):
        load_rows(str(csv))


def test_csv_rows_after_a_multiline_cell_are_named_by_their_file_line(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text('prompt,response\n"a\nb\nc",r1\n\nq,\n')
    rows = load_rows(str(csv))
    assert [r.line for r in rows] == [2, 6]
    with pytest.raises(DataError, match=rf"^{csv}:6: missing column 'response'"):
        to_items(rows, {"prompt": "prompt", "response": "response"}, str(csv))
    csv.write_text('prompt,response\n"a\nb",r1\nq,r,extra\n')
    with pytest.raises(DataError, match=rf"^{csv}:4: 3 cells, the header names 2 columns"):
        load_rows(str(csv))


def test_json_array_elements_are_named_by_the_line_they_start_on(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('[\n  {"prompt": "a\u2028", "response": "r"},\n\n  {"prompt": "b",\n   "response": 3}\n]\n', encoding="utf-8")
    rows = load_rows(str(path))
    assert [r.line for r in rows] == [2, 4]
    with pytest.raises(DataError, match=rf"^{path}:4: column 'response'"):
        to_items(rows, {"prompt": "prompt", "response": "response"}, str(path))
    path.write_text('[\n {"prompt": "a"},\n 7\n]')
    with pytest.raises(DataError, match=rf"^{path}:3: expected a JSON object"):
        load_rows(str(path))
    path.write_text('{\n "prompt": "a",\n "response": \n}\n')  # one broken object: its own error, not a JSON-lines one
    with pytest.raises(DataError, match=rf"^{path}:4: invalid JSON: Expecting value"):
        load_rows(str(path))
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')  # JSON lines in a .json file
    assert [r.line for r in load_rows(str(path))] == [1, 2]


@pytest.mark.timeout(20)
def test_a_fifo_device_or_directory_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "d.jsonl"
    os.mkfifo(fifo)  # reading it would block forever: no writer ever comes
    with pytest.raises(DataError, match=rf"^{fifo}: not a regular file"):
        load_rows(str(fifo))
    parquet = tmp_path / "d.parquet"
    os.mkfifo(parquet)
    with pytest.raises(DataError, match=rf"^{parquet}: not a regular file"):
        load_rows(str(parquet))
    zero = tmp_path / "z.csv"
    zero.symlink_to("/dev/zero")  # never ends
    with pytest.raises(DataError, match=rf"^{zero}: not a regular file"):
        load_rows(str(zero))
    folder = tmp_path / "e.csv"
    folder.mkdir()
    with pytest.raises(DataError, match=rf"^{folder}: is a directory, not a .csv file"):
        load_rows(str(folder))


def test_encodings_and_empty_files_get_one_clear_message(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a"}\n', encoding="utf-16")
    with pytest.raises(DataError, match=rf"^{path}: the file is UTF-16.*save it as UTF-8"):
        load_rows(str(path))
    for content in (b"", b"  \n\r\n\t"):
        path.write_bytes(content)
        with pytest.raises(DataError, match=rf"^{path}: empty file, no rows"):
            load_rows(str(path))
    path.write_bytes(b"\xef\xbb\xbf\n")
    with pytest.raises(DataError, match=rf"^{path}: no rows"):
        load_rows(str(path))
    csv = tmp_path / "d.csv"
    csv.write_bytes(b"prompt,response\nq,r\nq\xe9,r\n")  # latin-1
    with pytest.raises(DataError, match=rf"^{csv}:3: not valid UTF-8 \(byte 0xe9\)"):
        load_rows(str(csv))


def test_very_long_lines_are_read_whole(tmp_path):
    big = "x\u2028" * 3_000_000  # 6M characters, 12 MB of UTF-8 on one line
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "q", "response": big}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_rows(str(path))[0]["response"] == big
    csv = tmp_path / "d.csv"
    csv.write_text(f'prompt,response\nq,"{big}"\n', encoding="utf-8")
    assert load_rows(str(csv))[0]["response"] == big


def test_parquet_rows_are_named_from_0_and_a_damaged_parquet_names_the_file(tmp_path):
    import datasets

    path = tmp_path / "d.parquet"
    datasets.Dataset.from_list([{"prompt": "a", "response": "r"}, {"prompt": "b", "response": None}]).to_parquet(str(path))
    with pytest.raises(DataError, match=rf"^{path} row 1: missing column 'response'"):
        to_items(load_rows(str(path)), {"prompt": "prompt", "response": "response"}, str(path))
    path.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataError, match=rf"^{path}: cannot read data"):
        load_rows(str(path))
    path.write_bytes(b"")
    with pytest.raises(DataError, match=rf"^{path}: empty file, no rows"):
        load_rows(str(path))


# Found by the fuzzers (tests/unit/fuzz): each was a traceback or a silent default before its fix.
def test_fuzz_found_data_rows_are_named_or_read(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        b'{"prompt": "a", "response": "b"}\n{"prompt": "\xff", "response": "b"}\n'
    )  # was pyarrow's UnicodeDecodeError
    with pytest.raises(DataError, match=f"{bad}:2: not valid UTF-8"):
        load_rows(str(bad))
    mixed = tmp_path / "mixed.jsonl"  # one column, two types: datasets refused the file without naming a row
    mixed.write_text('{"prompt": "q", "response": "r", "label": 1}\n{"prompt": "q2", "response": "r", "label": "x"}\n')
    assert [r["label"] for r in load_rows(str(mixed))] == [1, "x"]
    csv = tmp_path / "d.csv"  # pandas read "12" as 12.0 (then refused: not a string) and "NA" as missing
    csv.write_text("prompt,response,reference,human_score\n12,NA,42,3\n,x,,4\n" + "q,r,," + "y" * 2**20 + "\n")
    rows = load_rows(str(csv))
    assert rows[0] == {"prompt": "12", "response": "NA", "reference": "42", "human_score": "3"}
    assert rows[1]["prompt"] is None and rows[1]["reference"] is None
    with pytest.raises(DataError, match=f"{csv}:3: missing column 'prompt'"):
        to_items(rows, default_map(str(csv), set(rows[0])), str(csv))
    nan = [{"prompt": "q", "response": "r", "human_score": float("nan")}]
    with pytest.raises(DataError, match="row 0: human_score must be a finite number"):
        to_items(nan, default_map("x", set(nan[0])), "x")
