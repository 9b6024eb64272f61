"""What the fuzzers found in judges (templates, sample files, parsers, listwise scores), pinned as
plain examples: each was a traceback or an uncounted failure before its fix, and stays covered even
if a strategy changes. The YAML, override, pipeline and data-file finds live beside their subjects'
tests (tests/unit/config, tests/unit/data)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from grm.config import JudgeSpec
from grm.config.parsers import JsonParser, TargetParser
from grm.judges import Sample, build_judge
from grm.judges.parsers import build_parser, last_boxed
from tests.unit.fuzz.support import assert_clean_failure, run_cli
from tests.unit.judges.fake_engine import ScriptedEngine


def _judge(tmp_path: Path, template: str, sample: dict, **spec: object) -> tuple[Path, Path, Path]:
    (tmp_path / "t.j2").write_text(template)
    judge = tmp_path / "j.yaml"
    judge.write_text(
        json.dumps(
            {"name": "t", "mode": "pointwise", "model": "fuzz-model", "template": "t.j2", "parser": {"range": [1, 10]}, **spec}
        )
    )
    s = tmp_path / "s.json"
    s.write_text(json.dumps(sample))
    return judge, tmp_path / "t.j2", s


@pytest.mark.parametrize(
    "expr,needle",
    [
        ("{{ 1/0 }}", ":2: template error while rendering: ZeroDivisionError"),
        ("{{ range(100001)|list }}", ":2: template stopped: range() of 100,001 items"),
        ("{{ -100|letter }}", ":2: template error while rendering: ValueError"),
        ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "RecursionError"),
        ("{{ prompt|truncate(-1) }}", ":2: template error while rendering: AssertionError"),
        ("{{ metadata.update({'a': 1}) }}", ":2: template refused by the sandbox"),  # rendered, and changed the sample
    ],
)
def test_templates(tmp_path, expr, needle):
    judge, template, sample = _judge(tmp_path, "{# expects: prompt, response #}{{ prompt }} {{ response }}\n" + expr, SAMPLE)
    res = run_cli("judge", "render", str(judge), "--sample", str(sample))
    assert_clean_failure(res, template)
    assert needle in res.err, res.err


SAMPLE = {"prompt": "p", "response": "r", "metadata": {"topic": "m"}}


@pytest.mark.parametrize(
    "sample,needle",
    [
        ({"messages": [1, 2], "response": "r"}, "'messages' must be a list of objects"),  # was AttributeError
        ({"prompt": "p", "response": "r", "metadata": [1]}, "'metadata' must be an object"),
        ({"prompt": "p", "response": "r", "id": [1]}, "'id' must be a string"),
        ({"prompt": "p"}, "a pointwise judge needs 'response'"),  # named 'sample', not the file
    ],
)
def test_sample_files(tmp_path, sample, needle):
    judge, _, s = _judge(tmp_path, "{# expects: prompt, response #}{{ prompt }} {{ response }}", sample)
    res = run_cli("judge", "render", str(judge), "--sample", str(s))
    assert_clean_failure(res, s)
    assert needle in res.err, res.err


def explode(text: str) -> float:
    return float(text)


def not_a_number(text: str) -> object:
    return {"nan": float("nan"), "dict": {"score": 1}, "bool": True}.get(text.strip(), text)


def test_parsers():
    big = build_parser(JsonParser())
    assert big('{"score": ' + "9" * 5000 + "}").value is None  # was ValueError: int past 4300 digits
    assert big('{"score": 1} {"a": ' + "[" * 20_000).value == 1.0  # was RecursionError
    assert big('{"score": 1} {"a": ' + "[" * 100_000).error == "no JSON object"  # only the last 32,000 characters are read
    assert build_parser(JsonParser(field="a.²"))('{"a": [1, 2, 3]}').error  # was ValueError from int('²')
    lists = build_parser(JsonParser(field="s"), expected=3)
    assert lists('{"s": [1, 2]}').error == "expected 3 scores, found 2" and lists('{"s": 5}').value is None
    raising = build_parser(TargetParser(target="tests.unit.fuzz.test_found_judges:explode"))
    assert raising("seven").error.startswith("explode raised ValueError")  # escaped the judge before
    odd = build_parser(TargetParser(target="tests.unit.fuzz.test_found_judges:not_a_number"))
    assert [odd(t).value for t in ("nan", "dict", "bool", "word", "4")] == [None, None, None, None, None]
    t0 = time.perf_counter()
    assert last_boxed("\\boxed{" * 20_000 + "\\boxed{7}") == "7"  # each unclosed box rescanned the rest: minutes
    assert time.perf_counter() - t0 < 1


def test_listwise_json_judge_counts_a_wrong_shape(tmp_path):
    (tmp_path / "l.j2").write_text("{# expects: prompt, responses #}{{ prompt }}{% for r in responses %} {{ r }}{% endfor %}")
    spec = JudgeSpec(
        name="lw",
        mode="listwise",
        model="m",
        template="l.j2",
        parser={"type": "json", "field": "s", "range": [1, 10]},
        on_failure={"retries": 0},
    )
    outputs = iter(['{"s": [7]}', '{"s": 4}', '{"s": [1, 2, 3, 4]}'])  # short (was IndexError), scalar (uncounted), long
    judge = build_judge(spec, tmp_path, ScriptedEngine(lambda *a: next(outputs)))
    for _ in range(3):
        [r] = judge.score_batch([Sample(prompt="p", responses=["a", "b", "c"])])
        assert r.masked and r.parse_failures == 1 and not any(math.isfinite(x) for x in r.scores or [])
