"""Parsers on real judge-like strings, malformed ones included: None wherever no valid score exists."""

import pytest
from pydantic import ValidationError

from grm.config.parsers import BoxedParser, JsonParser, LogprobParser, RegexParser, TargetParser, VerdictParser
from grm.judges.errors import JudgeError
from grm.judges.parsers import ParsedScore, build_parser, expected_value, logprob_candidates

SCORE = RegexParser(pattern=r"Score:\s*\**\s*(\d+(?:\.\d+)?)", range=(1, 10))


@pytest.mark.parametrize(
    "text,expect",
    [
        ("The answer is correct and concise.\nScore: 8", 8.0),
        ("Critique: mostly right.\nScore: **7**", 7.0),
        ("Score: 6.5 because it is partly right", 6.5),
        ("It says Score: 3 at first, but on reflection\nScore: 9", 9.0),  # two scores: last wins
        ("Score: ７", 7.0),  # fullwidth digit is a digit
        ("Score: 11", None),  # out of range
        ("Score: 0", None),
        ("The response is fine.", None),  # missing score
        ("", None),  # empty output
        ("   \n ", None),
        ("Score: ²", None),  # superscript is not a digit
        ("Score: ten", None),
    ],
)
def test_regex(text, expect):
    got = build_parser(SCORE)(text)
    assert got.value == expect
    assert (got.error is None) == (expect is not None)


def test_regex_take_only_and_first():
    only = build_parser(RegexParser(range=(1, 10), take="only"))
    assert only("Score: 3 ... Score: 9").value is None
    assert only("Score: 4 ... Score: 4").value == 4.0
    assert build_parser(RegexParser(take="first"))("Score: 3 then Score: 9").value == 3.0


def test_regex_bad_group_is_author_error():
    # refused when the spec loads, not when the first output is parsed
    with pytest.raises(ValidationError, match="group 2: the pattern has 1 group"):
        RegexParser(pattern=r"Score: (\d)", group=2)


@pytest.mark.parametrize(
    "text,expected,expect",
    [
        ("Response 1 is right. \\boxed{9, 2}", 2, [9.0, 2.0]),
        ("\\boxed{3} then final \\boxed{7, 8}", 2, [7.0, 8.0]),
        ("\\boxed{7, 8, 9}", 2, None),  # wrong count
        ("\\boxed{7, eight}", 2, None),
        ("\\boxed{11, 2}", 2, None),  # out of range
        ("no box at all: 9, 2", 2, None),
        ("\\boxed{ 5 ; 6 }", 2, [5.0, 6.0]),
        ("\\boxed{\\frac{1}{2}, 3}", 2, None),
        ("", 2, None),
        ("\\boxed{6}", 1, 6.0),
    ],
)
def test_boxed(text, expected, expect):
    assert build_parser(BoxedParser(range=(1, 10)), expected=expected)(text).value == expect


@pytest.mark.parametrize(
    "text,field,expect",
    [
        ('Reasoning... {"score": 7, "why": "ok"}', "score", 7.0),
        ('{"score": 2} and later {"score": 9}', "score", 9.0),
        ('{"result": {"score": "8"}}', "result.score", 8.0),
        ('{"score": true}', "score", None),
        ('{"score": 42}', "score", None),
        ('{"other": 3}', "score", None),
        ('{"score": 7', "score", None),
        ("", "score", None),
    ],
)
def test_json(text, field, expect):
    assert build_parser(JsonParser(field=field, range=(1, 10)))(text).value == expect


@pytest.mark.parametrize(
    "text,expect",
    [
        ("A is clearer and correct. [[A]]", "A"),
        ("Comparing... [[B]]", "B"),
        ("They are equivalent. [[C]]", "tie"),
        ("I first thought [[A]] but actually [[B]]", "B"),  # the last verdict wins
        ("B is better.", None),
        ("[A]", None),
        ("", None),
    ],
)
def test_verdict(text, expect):
    assert build_parser(VerdictParser())(text).value == expect


def test_target_escape_hatch():
    p = build_parser(TargetParser(target="tests.unit.judges.test_parsers:count_stars", options={"scale": 2}))
    assert p("***").value == 6
    assert p("none").value is None
    with pytest.raises(JudgeError, match="cannot be imported"):
        build_parser(TargetParser(target="no_such_module_xyz:f"))


def count_stars(text: str, scale: int = 1):
    n = text.count("*")
    return ParsedScore(n * scale) if n else None


def test_logprob_candidates_move_the_space_and_expected_value():
    prefix, cands, values = logprob_candidates(LogprobParser(prefix="\nScore: ", range=(1, 3)), "pointwise")
    assert prefix == "\nScore:" and cands == [" 1", " 2", " 3"] and values == [1.0, 2.0, 3.0]
    assert logprob_candidates(LogprobParser(prefix="[[", candidates=["A", "B"]), "pairwise")[1] == ["A", "B"]
    import math

    # p = (0.2, 0.3, 0.5) -> 0.2 + 0.6 + 1.5 = 2.3; renormalised when the mass is partial
    assert expected_value([math.log(0.2), math.log(0.3), math.log(0.5)], [1, 2, 3]) == pytest.approx(2.3)
    assert expected_value([math.log(0.1), math.log(0.1)], [1, 3]) == pytest.approx(2.0)
