"""Tools an environment offers the policy: the ``Tool`` protocol, a calculator (in process: it
evaluates arithmetic only, with bounded sizes) and a ``python`` tool (each call in the sandbox).

``run_tool_call`` is how an environment runs a parsed call: whatever the tool does, it returns a
``ToolResult`` (an unknown tool, a tool that raises, a sandbox failure), never an exception.
"""

from __future__ import annotations

import ast
import asyncio
import decimal
import math
import time
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

from grm.data.trajectory import ToolCall
from grm.envs.sandbox import run_python
from grm.envs.tool_limits import SandboxLimits, ToolResult


@runtime_checkable
class Tool(Protocol):
    """A tool: its name, its schema in OpenAI function format (what the chat template renders and
    the parser checks arguments against), and the call itself."""

    name: str
    schema: dict[str, Any]

    def __call__(self, arguments: dict[str, Any]) -> ToolResult: ...


def function_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A tool schema in OpenAI function format."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def run_tool_call(tools: Mapping[str, Tool], call: ToolCall) -> ToolResult:
    """Run ``call`` with the tool of its name; a failure of any kind is a ``ToolResult`` with
    ``ok=False`` and a reason (``unknown_tool``, ``exception`` for a tool that raised, or the
    tool's own). "Raised" is anything but ``KeyboardInterrupt`` and ``GeneratorExit``: a tool's
    ``sys.exit()`` (``SystemExit``) is its failure, not the run's end."""
    start = time.monotonic()
    tool = tools.get(call.name)
    if tool is None:
        return ToolResult(False, f"no tool named {call.name!r} (tools: {', '.join(sorted(tools)) or 'none'})", "unknown_tool")
    try:
        result = tool(call.arguments)
    except (KeyboardInterrupt, GeneratorExit):
        raise
    except BaseException as e:  # noqa: BLE001 - a bug in a tool is the episode's observation, not the run's crash
        return ToolResult(False, f"tool {call.name} failed: {type(e).__name__}", "exception", seconds=time.monotonic() - start)
    if not isinstance(result, ToolResult):
        return ToolResult(False, f"tool {call.name} returned no result", "exception", seconds=time.monotonic() - start)
    return result


async def arun_tool_call(tools: Mapping[str, Tool], call: ToolCall) -> ToolResult:
    """``run_tool_call`` in a worker thread, for async environments (the event loop keeps running
    other episodes while a sandboxed tool works)."""
    return await asyncio.to_thread(run_tool_call, tools, call)


# ----------------------------------------------------------------------------- calculator


class CalcError(ValueError):
    """An expression the calculator refuses; the message is meant for the policy."""


MAX_EXPRESSION_CHARS = 300
MAX_BITS = 4096
"""Largest numerator or denominator any step may build (~1,230 digits)."""
MAX_NODES = 200

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
}


def calculate(expression: str) -> Fraction:
    """The exact value of an arithmetic ``expression``: numbers, ``+ - * / // % **``, unary signs and
    parentheses. No names, calls or attributes are evaluated; every intermediate value is bounded
    (``MAX_BITS``), and a power is refused *before* it is computed when its result would pass it."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalcError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("−", "-")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalcError(f"not an arithmetic expression: {expression[:60]!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalcError(f"expression has more than {MAX_NODES} parts")
    try:
        return _eval(tree.body)
    except ZeroDivisionError:
        raise CalcError("division by zero") from None
    except RecursionError:
        raise CalcError("expression nested too deeply") from None


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise CalcError("number out of range")
        return _bounded(Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(a, b)
        if isinstance(node.op, ast.BitXor):
            raise CalcError("^ is not a power here; write ** (2**8)")
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise CalcError(f"operator {type(node.op).__name__} is not supported")
        if isinstance(node.op, ast.Mult) and _bits(a) + _bits(b) > 2 * MAX_BITS:
            raise CalcError("result too large")
        return _bounded(op(a, b))
    raise CalcError(f"only numbers and + - * / // % ** are allowed, not {type(node).__name__}")


def _bits(x: Fraction) -> int:
    return max(x.numerator.bit_length(), x.denominator.bit_length())


def _bounded(x: Fraction) -> Fraction:
    if _bits(x) > MAX_BITS:
        raise CalcError("result too large")
    return x


def _power(base: Fraction, exp: Fraction) -> Fraction:
    if exp.denominator != 1:
        raise CalcError("only whole-number exponents are supported")
    e = exp.numerator
    if base == 0 and e < 0:
        raise ZeroDivisionError
    if base in (0, 1) or e == 0:
        return base**e
    if base == -1:
        return Fraction(-1 if e % 2 else 1)
    if (_bits(base) - 1) * abs(e) > MAX_BITS:  # a lower bound of the result's bits, known before computing it
        raise CalcError("result too large")
    return _bounded(base**e)


_FLOAT_LOW, _FLOAT_HIGH = Fraction(1, 10**300), Fraction(10**300)
"""Magnitudes a float prints to 12 significant digits exactly as a ``Decimal`` would (no overflow,
no subnormal precision loss)."""


def format_number(x: Fraction) -> str:
    """An integer exactly; otherwise a decimal to 12 significant digits, of any size ``MAX_BITS``
    allows (~1e1233): past a float's range (1.8e308) through a ``Decimal``."""
    if x.denominator == 1:
        return str(x.numerator)
    if _FLOAT_LOW < abs(x) < _FLOAT_HIGH:  # well inside a float's range: as the calculator always wrote it
        return f"{float(x):.12g}"
    with decimal.localcontext(decimal.Context(prec=12)) as ctx:
        return f"{ctx.divide(decimal.Decimal(x.numerator), decimal.Decimal(x.denominator)):.12g}"


class CalculatorTool:
    """Evaluates one arithmetic expression (see ``calculate``), in process: nothing is executed."""

    name = "calculator"
    schema = function_schema(
        "calculator",
        "Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. (12 + 7) * 3.",
        {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "the expression to evaluate"}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    )

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        start = time.monotonic()
        expr = arguments.get("expression")
        if not isinstance(expr, str):
            return ToolResult(False, "calculator needs an 'expression' string", "bad_arguments")
        try:
            text, ok, reason = format_number(calculate(expr)), True, None
        except CalcError as e:
            text, ok, reason = f"error: {e}", False, "bad_expression"
        return ToolResult(ok, text, reason, seconds=time.monotonic() - start)


class PythonTool:
    """Runs the given Python code as a script in the sandbox and returns what it printed."""

    name = "python"
    schema = function_schema(
        "python",
        "Run a Python 3 script and return what it prints (stdout and stderr). No network, no files kept.",
        {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the script; print the results you need"}},
            "required": ["code"],
            "additionalProperties": False,
        },
    )

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult(False, "python needs a 'code' string", "bad_arguments")
        return run_python(code, self.limits)
