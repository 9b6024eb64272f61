"""Bad evaluation data gets one clear message naming the row."""

import json

import pytest

from grm.data.errors import DataError
from grm.data.items import default_map, parse_map, to_items
from grm.data.sources import load_rows

LLMBAR = [
    {"input": "q1", "output_1": "a", "output_2": "b", "label": 1},
    {"input": "q2", "output_1": "c", "output_2": "d", "label": 2},
]


def write(tmp_path, rows, name="d.json"):
    f = tmp_path / name
    if name.endswith(".jsonl"):
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        f.write_text(json.dumps(rows))
    return str(f)


def items(src, mapping=None, **kw):
    rows = load_rows(src)
    return to_items(rows, mapping or default_map(src, set(rows[0])), src, **kw)


def test_llmbar_format_autodetected(tmp_path):
    its, problems = items(write(tmp_path, LLMBAR))
    assert [(i.prompt, i.responses, i.label, i.kind) for i in its] == [
        ("q1", ["a", "b"], 1, "pair"),
        ("q2", ["c", "d"], 2, "pair"),
    ]
    assert problems == [] and its[0].input_hash != its[1].input_hash


@pytest.mark.parametrize(
    "bad,needle",
    [
        ({"input": "q", "output_1": "a", "label": 1}, ":2: missing column 'output_2'"),
        ({"input": "q", "output_1": "a", "output_2": "b", "label": 3}, ":2: label must be 1/2 or A/B, found 3"),
        (
            {"input": "q", "output_1": 5, "output_2": "b", "label": 1},
            ":2: column 'output_1' (response_a) must be a string, found int",
        ),
    ],
)
def test_bad_rows_named(tmp_path, bad, needle):
    src = write(tmp_path, [LLMBAR[0], bad], "d.jsonl")
    with pytest.raises(DataError, match="--skip-bad-rows") as e:
        items(src, parse_map(["prompt=input", "response_a=output_1", "response_b=output_2", "label=label"]))
    assert needle in str(e.value)
    its, problems = items(
        src, parse_map(["prompt=input", "response_a=output_1", "response_b=output_2", "label=label"]), skip_bad_rows=True
    )
    assert len(its) == 1 and len(problems) == 1 and needle in problems[0]


def test_empty_and_unknown_sources(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(DataError, match="empty file"):
        load_rows(str(tmp_path / "e.jsonl"))
    with pytest.raises(DataError, match="no such file"):
        load_rows(str(tmp_path / "nope.json"))
    with pytest.raises(DataError, match="unknown builtin data set"):
        load_rows("builtin:nope")
    with pytest.raises(DataError, match="unknown field 'answer'"):
        parse_map(["answer=x"])


def test_csv_parquet_and_saved_dataset(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([{"q": "hi", "r": "hello", "h": 4.5}])
    ds.to_csv(str(tmp_path / "d.csv"))
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    m = parse_map(["prompt=q", "response=r", "human_score=h"])
    for src in ("d.csv", "d.parquet", "saved"):
        (it,), _ = items(str(tmp_path / src), m)
        assert (it.kind, it.prompt, it.responses, it.human_score) == ("scored", "hi", ["hello"], 4.5)


def test_builtin_arith_pairs_are_objective():
    its, _ = items("builtin:arith-pairs")
    assert len(its) == 200
    assert {i.label for i in its} == {1, 2}
    for i in its[:20]:
        good = i.responses[i.label - 1]
        assert f"The answer is {i.reference}." in good
        assert f"The answer is {i.reference}." not in i.responses[2 - i.label]
