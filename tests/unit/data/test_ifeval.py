"""IFEval-style rows as grm constraint prompts: mapped instructions, strict "less than", rows with
an instruction grm cannot check left out and counted, bad rows named, and a file read as a source."""

import json

import pytest

from grm.data.errors import DataError
from grm.data.ifeval import from_ifeval
from grm.data.sources import load_rows
from grm.judges.instructions import verify

ROWS = [
    {
        "key": 1,
        "prompt": "Write a haiku about rain. Do not use commas.",
        "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
        "kwargs": [{}, {"relation": "less than", "num_words": 30, "keywords": None}],
    },
    {
        "key": 2,
        "prompt": "Describe a cat.",
        "instruction_id_list": ["keywords:existence", "startend:end_checker"],
        "kwargs": [{"keywords": ["whiskers"]}, {"end_phrase": "Any other questions?"}],
    },
    {  # an instruction grm cannot check: the row is left out, not scored on the rest
        "key": 3,
        "prompt": "Write in French.",
        "instruction_id_list": ["language:response_language", "punctuation:no_comma"],
        "kwargs": [{"language": "fr"}, {}],
    },
    {  # two keywords: grm checks one keyword a prompt
        "key": 4,
        "prompt": "Mention two fruits.",
        "instruction_id_list": ["keywords:existence"],
        "kwargs": [{"keywords": ["apple", "pear"]}],
    },
    {
        "key": 5,
        "prompt": "Give tips.",
        "instruction_id_list": ["detectable_format:number_bullet_lists", "length_constraints:number_sentences"],
        "kwargs": [{"num_bullets": 3}, {"relation": "at least", "num_sentences": 2}],
    },
]


def test_mapped_rows_become_constraints_and_the_rest_is_counted():
    kept, skipped = from_ifeval(ROWS, "ifeval.jsonl")
    assert [r["id"] for r in kept] == ["ifeval-1", "ifeval-2"]
    assert kept[0]["constraints"] == [{"type": "no_commas"}, {"type": "max_words", "n": 29}]  # "less than 30"
    assert kept[1]["constraints"] == [
        {"type": "keyword", "word": "whiskers"},
        {"type": "end_phrase", "phrase": "Any other questions?"},
    ]
    assert len(kept[1]["checklist"]) == 2
    assert skipped == {"language:response_language": 1, "keywords:existence": 1, "length_constraints:number_sentences": 1}
    # the rule checkers read them: a response that follows both passes, one with a comma fails
    assert verify(kept[0]["constraints"], "rain falls soft and slow", "t")[0] == 1.0
    assert verify(kept[0]["constraints"], "rain, soft and slow", "t")[0] == 0.0


@pytest.mark.parametrize(
    "row, message",
    [
        ({"prompt": "", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}, "needs 'prompt'"),
        ({"prompt": "x", "instruction_id_list": [], "kwargs": []}, "needs 'prompt'"),
        ({"prompt": "x", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}, "one object per instruction"),
        ({"prompt": "x", "instruction_id_list": [["punctuation:no_comma"]], "kwargs": [{}]}, "instruction ids as text"),
        ({"prompt": "x", "instruction_id_list": [{"a": 1}], "kwargs": [{}]}, "instruction ids as text"),
    ],
)
def test_a_row_that_is_not_ifeval_shaped_is_named(row, message):
    with pytest.raises(DataError, match=rf"f.jsonl row 1: .*{message}"):
        from_ifeval([row], "f.jsonl")


def test_an_ifeval_file_is_read_as_constraint_prompts(tmp_path, capsys):
    f = tmp_path / "ifeval.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    rows = load_rows(str(f))
    assert [r["id"] for r in rows] == ["ifeval-1", "ifeval-2"] and all("constraints" in r for r in rows)
    err = capsys.readouterr().err
    assert "IFEval rows: 2 of 5 kept" in err and "language:response_language 1" in err
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text(json.dumps(ROWS[2]) + "\n")
    with pytest.raises(DataError, match="none has only instructions"):
        load_rows(str(only_bad))


def test_ifeval_rows_keep_their_file_lines_and_other_columns_and_ids_reach_stderr_escaped(tmp_path, capsys):
    f = tmp_path / "ifeval.jsonl"
    rows = [
        {"prompt": "p", "instruction_id_list": ["\x1b]0;PWNED\x07\x1b[2Jevil"], "kwargs": [{}]},
        {"prompt": "q", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], "key": 1, "response": "r"},
        {"prompt": "s", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], "key": 2},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = load_rows(str(f))
    assert [(r.line, r["id"], r.get("response")) for r in kept] == [(2, "ifeval-1", "r"), (3, "ifeval-2", None)]
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b]0;PWNED" in err  # the id shown, never obeyed by the terminal
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[1]) + "\n" + json.dumps({**rows[2], "instruction_id_list": [5]}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: 'instruction_id_list' must list instruction ids as text"):
        load_rows(str(bad))
