"""The calculator evaluates arithmetic exactly and refuses everything else (names, calls, huge
powers) before doing the work; run_tool_call turns every tool failure into a ToolResult."""

import decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.data.trajectory import ToolCall
from grm.envs.tool_limits import SandboxLimits, ToolResult
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
    assert format_number(Fraction(10**600, 3)) == "3.33333333333e+599"  # float(x) overflowed past 1.8e308


@pytest.mark.parametrize(
    "expr,says",
    [
        ("(10**300*10**300)/3", "3.33333333333e+599"),
        ("1e308*10/3", "3.33333333333e+308"),
        ("2**4095 - 0.5", "5.22194440707e+1232"),
        ("-(1e308*1e308*1e308)/7", "-1.42857142857e+923"),
        ("1/10**1000", "1e-1000"),
    ],
)
def test_a_value_within_the_limits_is_answered_however_large_or_small(expr, says):
    r = CalculatorTool()({"expression": expr})
    assert (r.ok, r.text, r.reason) == (True, says, None)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(n=st.integers(-(2**4095), 2**4095), d=st.integers(1, 2**4095))
def test_any_fraction_within_the_bits_limit_prints_to_twelve_significant_digits(n, d):
    text = format_number(Fraction(n, d))
    assert Fraction(n, d) == 0 or abs(Fraction(decimal.Decimal(text)) / Fraction(n, d) - 1) < Fraction(1, 10**11)


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


class Exits:
    name = "exits"
    schema: dict = {}

    def __call__(self, arguments):
        raise SystemExit("bye")


class OwnBaseException(BaseException):
    pass


class RaisesOwn(Exits):
    def __call__(self, arguments):
        raise OwnBaseException


class Interrupted(Exits):
    def __call__(self, arguments):
        raise KeyboardInterrupt


def test_a_tool_that_exits_or_raises_a_base_exception_is_a_failed_result_but_an_interrupt_is_not():
    tools = {"exits": Exits(), "own": RaisesOwn(), "interrupted": Interrupted()}
    exits = run_tool_call(tools, ToolCall("exits", {}))
    assert (exits.ok, exits.reason, exits.text) == (False, "exception", "tool exits failed: SystemExit")
    assert run_tool_call(tools, ToolCall("own", {})).text == "tool own failed: OwnBaseException"
    with pytest.raises(KeyboardInterrupt):
        run_tool_call(tools, ToolCall("interrupted", {}))


def test_ordinary_results_print_as_the_calculator_always_wrote_them():
    from fractions import Fraction

    from grm.envs.tools import format_number

    cases = {Fraction(10**20) + Fraction(1, 2): "1e+20", Fraction(33, 10**9): "3.3e-08", Fraction(1, 3): "0.333333333333"}
    assert {x: format_number(x) for x in cases} == cases  # the policy sees what it was trained on
