"""Parsers do bounded work on any critique (a served judge may return megabytes) and hold every
number they hand on to the judge's declared range."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.config.parsers import JsonParser, TargetParser
from grm.judges.parsers import JSON_TAIL_CHARS, JsonScore, TargetCall

HOSTILE = {
    # a decode from every "{" ran to the end of the text: 27 s on 2 MB before the bound
    "unclosed nested lists, 2 MB": '{"a":[0,' * 250_000,
    "unclosed objects of long lists, 2 MB": "".join('{"a":[' + "0," * 1100 for _ in range(900)),
    "unclosed nested lists, 10 MB": '{"a":[0,' * 1_250_000,
    "open braces, 10 MB": "{" * 10_000_000,
    "open keys, 2 MB": '{"' * 1_000_000,
    "the worst tail": '{"a":[' * 128 + "0," * (JSON_TAIL_CHARS // 2),
}


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_json_parser_does_bounded_work_on_a_hostile_critique(text):
    parse = JsonScore(JsonParser(field="score", range=(1, 10)))
    t0 = time.perf_counter()
    got = parse(text)
    assert time.perf_counter() - t0 < 1.0
    assert got.value is None


def test_the_json_answer_at_the_end_of_a_long_critique_is_still_read():
    parse = JsonScore(JsonParser(field="score", range=(1, 10)))
    critique = "Reasoning {not json} " * 200_000 + '{"score": 7, "why": {"a": [1, {"b": 2}]}}'
    assert parse(critique).value == 7.0


@pytest.mark.parametrize(
    ("critique", "score"),
    [
        ('{"score": 3} then {"score": 8}', 8.0),  # the last object wins
        ('{"why": "uses {braces} and {}", "score": 4}', 4.0),  # braces inside a string
        ('{"outer": 1, "score": 6, "inner": {"x": 1}}', 6.0),  # the outer object, not the inner one
        ('{"score": {"oops": 1} {"score": 5}', 5.0),  # an unclosed object before the answer
        ('```json\n{"score": 2}\n```', 2.0),
    ],
)
def test_the_json_parser_reads_the_last_object(critique, score):
    assert JsonScore(JsonParser(field="score", range=(1, 10)))(critique).value == score


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet='{}[]":,0a ', max_size=3000))
def test_any_critique_of_json_punctuation_parses_fast(text):
    t0 = time.perf_counter()
    JsonScore(JsonParser(field="score", range=(1, 10)))(text * 50)
    assert time.perf_counter() - t0 < 1.0


def eleven(text: str) -> float:
    return 11.0


def test_a_target_parser_number_outside_its_range_fails_the_parse():
    got = TargetCall(TargetParser(target=f"{__name__}:eleven", range=(1, 10)))("anything")
    assert got.value is None and "outside range [1.0, 10.0]" in got.error


def test_a_failed_parse_quotes_a_bounded_part_of_the_critique(tmp_path):
    from grm.config import JudgeSpec
    from grm.judges import Sample, build_judge
    from grm.judges.base import score_one
    from tests.unit.judges.fake_engine import ScriptedEngine

    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}{{ prompt }} {{ response }} \\boxed")
    for parser, critique in [
        ({"type": "boxed", "range": [1, 10]}, "\\boxed{" + "5, " * 100_000 + "}"),  # a pointwise judge gets 100,000 scores
        ({"type": "boxed", "range": [1, 10]}, "\\boxed{" + "x, " * 100_000 + "}"),
        ({"type": "boxed", "range": [1, 10]}, "\\boxed{" + "11, " * 100_000 + "}"),
        ({"type": "regex", "pattern": r"Score: (\d)", "take": "only", "range": [1, 10]}, "Score: 1 Score: 2 " * 50_000),
    ]:
        spec = JudgeSpec(name="j", mode="pointwise", model="m", template="t.j2", parser=parser, on_failure={"retries": 0})
        r = score_one(
            build_judge(spec, tmp_path, ScriptedEngine(lambda p, j, c, t=critique: t)), Sample(prompt="p", response="r")
        )
        assert r.masked and len(r.samples[0].error) < 400, r.samples[0].error[:100]
