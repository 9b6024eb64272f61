"""Sample files (``grm judge render|try --sample``) are read strictly: JSON's non-numbers, a checklist
or constraints list that data loading would refuse, each refused with one line naming the file and
the real item; untrusted ids and questions never split that line."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grm.judges.errors import JudgeError
from grm.judges.sample_file import read_samples
from tests.unit.fuzz.support import run_cli

LINE_BREAKS = ["\n", "\r", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c"]


def write(tmp_path, text: str, name: str = "s.json"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"], ids=["nan", "inf", "-inf", "1e400", "-1e400"]
)
def test_a_sample_file_holding_a_non_number_is_refused_naming_the_file(tmp_path, number):
    p = write(tmp_path, '{"prompt": "p", "response": "r", "metadata": {"x": NUMBER}}'.replace("NUMBER", number))
    with pytest.raises(JudgeError, match=rf"^{p}: invalid JSON: .*(not a JSON number|too large)"):
        read_samples(str(p))


def test_a_huge_integer_checklist_weight_is_refused_naming_the_file_and_item(tmp_path):
    # float(10**400) raises OverflowError: it reached math.isfinite as a traceback
    p = write(
        tmp_path, '{"prompt":"p","response":"r","metadata":{"checklist":[{"question":"Is it ok?","weight":1%s}]}}' % ("0" * 400)
    )
    with pytest.raises(JudgeError, match=rf"^{p}: metadata.checklist item 0: 'weight' must be a number above 0"):
        read_samples(str(p))


@pytest.mark.parametrize("weight", ["true", "0", "-1", '"2"', "1e400"])
def test_every_bad_checklist_weight_is_refused(tmp_path, weight):
    p = write(
        tmp_path, '{"prompt":"p","response":"r","metadata":{"checklist":[{"question":"q?","weight":W}]}}'.replace("W", weight)
    )
    with pytest.raises(JudgeError, match=rf"^{p}"):
        read_samples(str(p))


def test_a_bad_item_of_a_list_is_named_by_its_own_index(tmp_path):
    rows = [
        {"prompt": "p", "response": "r"},
        {"prompt": "p", "response": "r", "metadata": {"constraints": [{"type": "max_words", "n": 3}, {"type": "x"}]}},
    ]
    p = write(tmp_path, json.dumps(rows))
    with pytest.raises(JudgeError, match=rf"^{p} item 1: metadata.constraints item 1: unknown constraint type 'x'"):
        read_samples(str(p))
    rows[1]["metadata"] = {"checklist": ["fine question", {"question": ""}]}
    p = write(tmp_path, json.dumps(rows))
    with pytest.raises(JudgeError, match=rf"^{p} item 1: metadata.checklist item 1: 'question' must be"):
        read_samples(str(p))


def test_a_constraint_argument_given_as_a_bool_names_file_and_item(tmp_path):
    p = write(
        tmp_path, json.dumps({"prompt": "p", "response": "r", "metadata": {"constraints": [{"type": "max_words", "n": True}]}})
    )
    with pytest.raises(JudgeError, match=rf"^{p}: metadata.constraints item 0: 'max_words' needs 'n'"):
        read_samples(str(p))


@given(st.sampled_from(LINE_BREAKS), st.text(max_size=5))
def test_no_line_break_in_a_path_splits_the_message(tmp_path_factory, brk, tail):
    d = tmp_path_factory.mktemp("p")
    p = d / f"a{brk}b{tail}.json".replace("/", "_").replace("\x00", "_")
    p.write_text("[]")
    with pytest.raises(JudgeError) as e:
        read_samples(str(p))
    assert len(str(e.value).splitlines()) == 1


def test_an_id_with_line_breaks_never_splits_the_cli_error_line(tmp_path):
    sample = {"id": "a\nb\u2028c\x85d\re", "prompt": "p", "response": "r", "metadata": {"constraints": [{"type": "bogus"}]}}
    p = write(tmp_path, json.dumps(sample))
    res = run_cli("judge", "try", "builtin:constraints", "--sample", str(p))
    assert res.code == 2 and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert res.err.startswith(f"error: {p}: metadata.constraints item 0: unknown constraint type 'bogus'")


def test_a_checklist_longer_than_the_judge_asks_names_the_file(tmp_path):
    rows = [
        {"prompt": "p", "response": "r", "metadata": {"checklist": ["q one?"]}},
        {"prompt": "p", "response": "r", "metadata": {"checklist": [f"question {k}?" for k in range(7)]}},
    ]
    p = write(tmp_path, json.dumps(rows))
    res = run_cli("judge", "render", "builtin:checklist-data-logprob", "--sample", str(p), "model=fuzz-model")
    assert res.code == 2 and "Traceback" not in res.err
    assert res.err.startswith(f"error: {p} item 1: metadata.checklist: 7 questions, more than judge"), res.err


def test_a_question_with_a_line_separator_stays_one_title_line(tmp_path):
    p = write(tmp_path, json.dumps({"prompt": "p", "response": "r", "metadata": {"checklist": ["Is it\u2028ok\nnow?"]}}))
    res = run_cli("judge", "render", "builtin:checklist-data-logprob", "--sample", str(p), "model=fuzz-model")
    assert res.code == 0, res.err
    [title] = [line for line in res.out.splitlines() if line.startswith("── judge question 0")]
    assert "Is it\\u2028ok\\nnow?" in title
