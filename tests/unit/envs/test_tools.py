"""The calculator evaluates arithmetic exactly and refuses everything else (names, calls, huge
powers) before doing the work; run_tool_call turns every tool failure into a ToolResult."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.data.trajectory import ToolCall
from grm.envs.sandbox import SandboxLimits, ToolResult
from grm.envs.tools import CalcError, CalculatorTool, PythonTool, Tool, calculate, format_number, run_tool_call


@pytest.mark.parametrize(
    "expr,value",
    [
        ("2 + 3 * 4", 14),
        ("(17 * 15) - 13 + 17", 259),
        ("7 / 2", Fraction(7, 2)),
        ("7 // 2", 3),
        ("-7 % 3", 2),
        ("2 ** 10", 1024),
        ("2 ** -2", Fraction(1, 4)),
        ("0.1 + 0.2", Fraction(3, 10)),  # exact: float literals are read as decimals
        ("12 × 3 ÷ 4", 9),
        ("-(-3)", 3),
    ],
)
def test_arithmetic_is_exact(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize(
    "expr,says",
    [
        ("__import__('os').system('ls')", "only numbers"),
        ("x + 1", "only numbers"),
        ("abs(-3)", "only numbers"),
        ("(1).real", "only numbers"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("1 / 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("9 ** 9 ** 9", "too large"),  # refused from its operands, never computed
        ("10 ** 100000", "too large"),
        ("2 ^ 8", r"write \*\*"),
        ("1e999", "out of range"),
        ("2 ** 0.5", "whole-number exponents"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 301, "longer than 300"),
        ("+".join(["1"] * 120), "more than 200 parts"),
        ("1 << 3", "not supported"),
    ],
)
def test_anything_else_is_refused_with_a_reason(expr, says):
    with pytest.raises(CalcError, match=says):
        calculate(expr)


def test_numbers_print_as_integers_or_short_decimals():
    assert format_number(Fraction(259)) == "259"
    assert format_number(Fraction(1, 3)) == "0.333333333333"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789+-*/%().e ", max_size=60))
def test_the_calculator_tool_never_raises(expr):
    r = CalculatorTool()({"expression": expr})
    assert isinstance(r, ToolResult) and (r.ok or r.reason == "bad_expression")


def test_the_calculator_tool_reports_results_and_errors_as_observations():
    calc = CalculatorTool()
    assert isinstance(calc, Tool)
    r = calc({"expression": "6*7"})
    assert r.ok and r.text == "42" and r.reason is None and r.exit_code is None
    r = calc({"expression": "1/0"})
    assert not r.ok and r.reason == "bad_expression" and r.text == "error: division by zero"
    assert calc({"expression": 5}).reason == "bad_arguments"


class Raising:
    name = "boom"
    schema = {"type": "function", "function": {"name": "boom"}}

    def __call__(self, arguments):
        raise RuntimeError("bug in the tool")


class NoResult(Raising):
    name = "silent"

    def __call__(self, arguments):
        return "text instead of a ToolResult"


def test_run_tool_call_never_raises():
    tools = {"calculator": CalculatorTool(), "boom": Raising(), "silent": NoResult()}
    assert run_tool_call(tools, ToolCall("calculator", {"expression": "1+1"})).text == "2"
    unknown = run_tool_call(tools, ToolCall("rm", {}))
    assert not unknown.ok and unknown.reason == "unknown_tool" and "boom, calculator, silent" in unknown.text
    boom = run_tool_call(tools, ToolCall("boom", {}))
    assert not boom.ok and boom.reason == "exception" and boom.text == "tool boom failed: RuntimeError"
    assert run_tool_call(tools, ToolCall("silent", {})).reason == "exception"


def test_the_python_tool_runs_code_in_the_sandbox():
    tool = PythonTool(SandboxLimits(timeout_s=2))
    r = tool({"code": "print(sum(range(10)))"})
    assert r.ok and r.text == "45\n" and r.network in ("namespace", "audit")
    assert tool({"code": None}).reason == "bad_arguments"
