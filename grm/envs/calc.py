"""``calc``: multi-step arithmetic word problems solved with a calculator tool (and, optionally, a
sandboxed ``python`` tool); success is rule-checked, the exact integer answer.

Problems are made from a seed alone (row ``{"seed": N}``; ``grm.data.calc_tasks``, with disjoint
train and held-out splits).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from grm.config.base import Strict, field_errors
from grm.data.calc_tasks import SEEDS, SPLITS, TEMPLATES, problem, split_of, task_rows
from grm.envs.base import AssistantMessage, Observation, Reset, Step
from grm.envs.tool_limits import SandboxLimits
from grm.envs.tools import CalculatorTool, PythonTool, Tool, run_tool_call

__all__ = ["SPLITS", "TEMPLATES", "CalcArgs", "CalcEnv", "answer_value", "extract_answer", "problem", "split_of", "task_rows"]

_BOXED = re.compile(r"\\boxed\{\s*([^{}]{0,40}?)\s*\}")
_ANSWER = re.compile(r"(?i)\banswer\s*(?:is)?\s*[:=]?\s*\$?\s*([-+]?\d[\d,]{0,30}(?:\.\d+)?)")
_INT = re.compile(r"[-+]?\d{1,30}(?:\.0+)?")


def extract_answer(text: str) -> str | None:
    """The final answer written as ``\\boxed{N}`` (the last one), else ``Answer: N``; None if neither."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1]
    said = _ANSWER.findall(text)
    return said[-1] if said else None


def answer_value(answer: str) -> int | None:
    """The integer an extracted answer states (``1,234``, ``$56``, ``7.0``), None if it is none."""
    s = answer.strip().lstrip("$").replace(",", "").replace(" ", "")
    return int(s.split(".")[0]) if _INT.fullmatch(s) else None


SYSTEM_PROMPT = (
    "Solve the math word problem. Use the calculator tool for arithmetic. "
    "When you know the result, give the final answer as \\boxed{N}, where N is a whole number."
)


class CalcArgs(Strict):
    """``CalcEnv``'s arguments (a ``calc`` env's ``kwargs``), strictly typed: ``python: "yes"``,
    ``max_turns: "3"`` or a limit of the wrong type is an error naming the field, never a truthy value."""

    model_config = ConfigDict(strict=True)

    max_turns: int = Field(6, ge=1)
    """Assistant turns before the episode ends unsolved."""
    python: bool = False
    """Offer the sandboxed ``python`` tool besides the calculator."""
    python_limits: SandboxLimits | None = None
    """The python tool's ``SandboxLimits`` fields (unset: its defaults); only with ``python: true``."""

    @model_validator(mode="after")
    def _limits_need_the_tool(self) -> CalcArgs:
        if self.python_limits is not None and not self.python:
            raise ValueError("python_limits is given without python: true (there is no python tool to apply it to)")
        return self


class CalcEnv:
    """Multi-step arithmetic word problems with a calculator tool; success is the exact integer answer."""

    def __init__(
        self, max_turns: int = 6, python: bool = False, python_limits: dict[str, Any] | SandboxLimits | None = None
    ) -> None:
        try:
            args = CalcArgs(max_turns=max_turns, python=python, python_limits=python_limits)
        except ValidationError as e:
            raise ValueError(field_errors(e)) from None
        self.max_turns = args.max_turns
        self.tools: dict[str, Tool] = {"calculator": CalculatorTool()}
        if args.python:
            self.tools["python"] = PythonTool(args.python_limits or SandboxLimits())
        self.answer: int | None = None
        self.counts = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "bad_tool_calls": 0}

    def reset(self, row: dict[str, Any]) -> Reset:
        seed = SEEDS.seed_of(row)
        text, self.answer = problem(seed)
        self.counts = dict.fromkeys(self.counts, 0)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]
        return Reset(messages, [t.schema for t in self.tools.values()])

    def step(self, message: AssistantMessage) -> Step:
        if self.answer is None:
            raise RuntimeError("step before reset")
        self.counts["turns"] += 1
        observations = []
        if message.tool_call_error is not None:
            self.counts["bad_tool_calls"] += 1
            note = f"Your tool call could not be run: {message.tool_call_error.message}"
            observations.append(Observation("user", note, ok=False, error=message.tool_call_error.kind))
        elif message.tool_calls:
            for call in message.tool_calls:
                result = run_tool_call(self.tools, call)
                self.counts["tool_calls"] += 1
                self.counts["tool_errors"] += not result.ok
                observations.append(Observation.from_tool(call, result))
        else:
            final = extract_answer(message.content)
            value = answer_value(final) if final is not None else None
            return Step([], True, self._signals(float(value == self.answer)), final)
        if self.counts["turns"] >= self.max_turns:
            return Step(observations, True, self._signals(0.0) | {"hit_max_turns": 1.0})
        return Step(observations, False, self._signals(0.0))

    def _signals(self, success: float) -> dict[str, float]:
        return {"success": success, **{k: float(v) for k, v in self.counts.items()}}
