"""User regexes (issue #39): a pattern shaped to backtrack exponentially is refused when the spec
loads, naming the field; every match runs with a time limit, and a match past it is a counted parse
failure (masked), never a hang. grm's own patterns on responses stay linear."""

import time

import pytest
from pydantic import ValidationError

from grm.config import JudgeSpec, load_judge
from grm.config.judge import RuleSpec
from grm.config.parsers import RegexParser
from grm.config.user_regex import backtracking_risk, compile_user_regex
from grm.judges import Sample, build_judge
from grm.judges.base import score_one
from grm.judges.checklist import parse_written
from grm.judges.guard import escape
from grm.judges.parsers import build_parser
from grm.judges.verifiers import check, final_number
from tests.unit.judges.fake_engine import ScriptedEngine

CATASTROPHIC = [
    r"(a+)+$",
    r"(a*)*b",
    r"(\w+\s?)*$",
    r"(.*a)*x",
    r"(x+x+)+y",
    r"^(([a-z])+.)+[A-Z]([a-z])+$",
    r"(.*){1,32000}[bc]",
    r"(\d+)*$",
    r"(a+b?)+$",
    r"(?i)(A+a)+$",
    r"((a+)|b)+c",
    r"Score: ((\d+)\s?)+",
]
SAFE = [
    r"Score:\s*\**\s*(\d+(?:\.\d+)?)",  # the shipped judges' patterns
    r"(?m)^Answer:\s*\S+",
    r"(\d+,)*(\d+)",
    r"(a+b+)+",
    r"(?:\s*\d+\s*,)*(\d)",
    r"(a++)+",
    r"(?>a+)+",
    r"(\w+\W+)*",
    r"(\d+\.)+(\d+)",
    r"(a|aa)+$",  # not nested: left to the timeout (below)
]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_pattern_shaped_to_backtrack_exponentially_is_refused_at_load(pattern):
    assert backtracking_risk(pattern) is not None
    with pytest.raises(ValidationError, match="backtrack exponentially"):
        RegexParser(pattern=pattern)
    with pytest.raises(ValidationError, match="(?s)rule.pattern.*backtrack exponentially"):
        JudgeSpec(name="f", mode="rule", rule={"type": "regex-format", "pattern": pattern})


@pytest.mark.parametrize("pattern", SAFE)
def test_unambiguous_patterns_load(pattern):
    assert backtracking_risk(pattern) is None
    compile_user_regex(pattern)
    RuleSpec(type="regex-format", pattern=pattern)


def test_an_invalid_rule_pattern_is_refused_at_load_naming_file_and_field(tmp_path):
    # regex-format patterns were compiled only when the first response was checked
    f = tmp_path / "f.yaml"
    f.write_text("name: f\nmode: rule\nrule:\n  type: regex-format\n  pattern: '(unclosed'\n")
    with pytest.raises(Exception, match=r"f.yaml:5: rule.pattern: not a valid regular expression"):
        load_judge(f)


SLOW = r"(\d)(?:a|aa)+$"
"""Not refused by the shape check, yet exponential in ``regex`` on 'a' * 60 + '!'."""


@pytest.mark.timeout(60)
def test_a_parse_past_the_regex_timeout_is_a_failure_not_a_hang():
    parse = build_parser(RegexParser(pattern=SLOW), regex_timeout_s=0.05)
    assert parse("Score 7aa").value == 7.0
    t0 = time.perf_counter()
    got = parse("1" + "a" * 60 + "!")
    assert time.perf_counter() - t0 < 5
    assert got.value is None and got.error.startswith("regex timed out after 0.05 s on 62 characters")


@pytest.mark.timeout(60)
def test_a_judge_counts_and_masks_a_timed_out_parse(tmp_path):
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}{{ prompt }} {{ response }}")
    spec = JudgeSpec(
        name="j",
        mode="pointwise",
        model="m",
        template="t.j2",
        parser={"type": "regex", "pattern": SLOW, "range": [0, 10**6]},
        on_failure={"retries": 0},
        limits={"regex_timeout_s": 0.05},
    )
    judge = build_judge(spec, tmp_path, ScriptedEngine(lambda p, j, c: "1" + "a" * 60 + "!"))
    res = score_one(judge, Sample(prompt="p", response="r"))
    assert res.masked and res.score is None and res.parse_failures == 1
    assert "regex timed out" in res.samples[0].error


@pytest.mark.timeout(60)
def test_a_rule_check_past_the_regex_timeout_masks_the_sample():
    spec = JudgeSpec(name="f", mode="rule", rule={"type": "regex-format", "pattern": SLOW}, limits={"regex_timeout_s": 0.05})
    judge = build_judge(spec)
    slow, fine = judge.score_batch([Sample(prompt="p", response="1" + "a" * 60 + "!"), Sample(prompt="p", response="1aa")])
    assert slow.masked and slow.score is None and slow.parse_failures == 1 and "regex timed out" in slow.error
    assert fine.score == 1.0 and not fine.masked
    assert check(RuleSpec(type="regex-format", pattern="x"), "no", None) == (0.0, "does not match 'x'")


RESPONSE_TEXT_CHECKS = {
    # grm's own patterns that read judged responses or model-written text, each on the text that
    # made its old form quadratic or worse (seconds at 20,000 characters, hours at 10^6)
    "numeric answer": (lambda t: final_number(t), "answer" + " " * 100_000 + "x"),
    "guard tag escape": (lambda t: escape(t), "<" + " " * 100_000),
    "guard closing tag": (lambda t: escape(t), "< /" + " " * 100_000),
    "checklist item line": (lambda t: parse_written(t, 5), "- " + " " * 100_000),
    "checklist item words": (lambda t: parse_written(t, 5), "1. a" + " " * 100_000 + "b"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(RESPONSE_TEXT_CHECKS))
def test_grms_own_patterns_are_linear_on_untrusted_text(name):
    f, text = RESPONSE_TEXT_CHECKS[name]
    t0 = time.perf_counter()
    f(text)
    assert time.perf_counter() - t0 < 2, name
    assert escape("a <response-x1> b </ Response-x1>") == "a &lt;response-x1> b &lt;/ Response-x1>"
    assert [q["question"] for q in parse_written("1. Is it right?\n-  Is it   short?  \n* x", 5)] == [
        "Is it right?",
        "Is it   short?",
    ]


@pytest.mark.timeout(60)
def test_the_numeric_answer_verifier_is_linear_on_long_whitespace():
    # "answer" then spaces: the old final-answer pattern took 30 s at 1,000 spaces (cubic)
    t0 = time.perf_counter()
    for text in ("answer" + " " * 100_000 + "x", "answer" + " *" * 50_000, "answer is " * 20_000):
        final_number(text)
    assert time.perf_counter() - t0 < 5
    cases = {"The answer is 42": 42, "Final answer: **$7**": 7, "answer = 3/4": 0.75, "ANSWER:  * 12": 12, "answer 5": 5}
    assert {t: final_number(t) for t in cases} == cases
