"""``grm judge lint``'s example checks: a parse that timed out is a problem (it says nothing about
the text, whatever ``expect`` says), all examples share one deadline, and a target parser's examples
are said to have run the user's function, with standard input closed."""

import io
import json
import sys
import time

import grm.judges.lint as lint
from grm.judges.cli import no_stdin
from grm.judges.lint import lint_file
from tests.unit.fuzz.support import run_cli

SLOW_OUTPUT = "a" * 60 + "!"
"""``(a|aa)+$`` on it runs past any timeout: the shape check lets the pattern through."""


def _judge(tmp_path, parser: dict, examples: list[dict]) -> object:
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}{{ prompt }} {{ response }} Score:")
    j = tmp_path / "j.yaml"
    spec = {"name": "j", "mode": "pointwise", "model": "m", "template": "t.j2", "parser": parser, "examples": examples}
    spec["limits"] = {"regex_timeout_s": 0.2}
    j.write_text(json.dumps(spec))
    return j


def test_a_timed_out_parse_is_a_problem_even_when_null_is_expected(tmp_path):
    j = _judge(
        tmp_path,
        {"type": "regex", "pattern": "(a|aa)+$", "group": 0, "range": [0, 10]},
        [{"output": SLOW_OUTPUT, "expect": None}],
    )
    [problem] = lint_file(j)
    assert "examples[0]: parse timed out on example 0" in problem


def test_all_examples_share_one_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(lint, "EXAMPLES_TIME_S", 0.5)
    j = _judge(
        tmp_path,
        {"type": "regex", "pattern": "(a|aa)+$", "group": 0, "range": [0, 10]},
        [{"output": SLOW_OUTPUT, "expect": None}] * 15,
    )
    t0 = time.perf_counter()
    problems = lint_file(j)
    assert time.perf_counter() - t0 < 2.0  # 15 x 0.2 s without the shared deadline
    assert "not checked: parsing the examples took more than the 0.5 s" in problems[-1]


def reads_stdin(text: str) -> float:
    """A user's parser that (wrongly) reads standard input."""
    return float(input())


def test_lint_says_it_ran_the_users_function_and_closes_stdin(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("7\n"))  # what an inherited stdin would hand it
    j = _judge(
        tmp_path,
        {"type": "target", "target": f"{__name__}:reads_stdin", "range": [0, 10]},
        [{"output": "Score: 7", "expect": 7}],
    )
    res = run_cli("judge", "lint", str(j))
    assert res.code == 1
    assert "reads_stdin raised EOFError" in res.out
    assert f"note: {j}: the 1 example(s) were parsed by running your function" in res.out


def test_no_stdin_restores_what_it_replaced():
    before = sys.stdin
    with no_stdin():
        assert sys.stdin.read() == ""
    assert sys.stdin is before
