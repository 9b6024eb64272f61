"""``calc``: multi-step arithmetic word problems solved with a calculator tool (and, optionally, a
sandboxed ``python`` tool); success is rule-checked, the exact integer answer.

Problems are made from a seed alone (row ``{"seed": N}``), so a data set is a range of seeds and
nothing is stored. The training and held-out splits are disjoint by construction, not by chance:
each template's parameter space is cut in two (the last tenth held out), seed -> (template, index
inside the split's part) -> a fixed bijection of the template's space (an affine map modulo its
size, so held-out problems are spread over the whole space, not its corner) -> the parameters,
which the text prints literally. Two seeds therefore never give the same problem, and no held-out
problem is a training problem.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grm.envs.base import AssistantMessage, Observation, Reset, Step
from grm.envs.sandbox import SandboxLimits
from grm.envs.tools import CalculatorTool, PythonTool, Tool, run_tool_call


@dataclass(frozen=True)
class _Template:
    ranges: tuple[tuple[int, int], ...]
    """Inclusive range of each parameter."""
    render: Callable[..., str]
    answer: Callable[..., int]

    @property
    def size(self) -> int:
        return math.prod(hi - lo + 1 for lo, hi in self.ranges)

    def params(self, p: int) -> tuple[int, ...]:
        """Parameter tuple number ``p`` of the space (mixed radix: a bijection of [0, size))."""
        out = []
        for lo, hi in self.ranges:
            p, r = divmod(p, hi - lo + 1)
            out.append(lo + r)
        return tuple(out)


# Every answer is a positive integer over each template's whole space (the ranges see to it).
TEMPLATES = (
    _Template(
        ((10, 49), (10, 49), (1, 49), (1, 49)),
        lambda a, b, c, d: (
            f"A bakery bakes {a} trays of {b} cookies each. It sells {c} cookies in the morning and {d} "
            "cookies in the afternoon. How many cookies are left?"
        ),
        lambda a, b, c, d: a * b - c - d,
    ),
    _Template(
        ((2, 60), (10, 99), (2, 20), (5, 50)),
        lambda a, b, c, d: (
            f"A library has {a} shelves with {b} books on each shelf. It buys {c} boxes with {d} books in "
            "each box. How many books does the library have now?"
        ),
        lambda a, b, c, d: a * b + c * d,
    ),
    _Template(
        ((2, 15), (2, 40), (1, 30)),
        lambda a, q, c: (
            f"A teacher shares {a * q} pencils equally among {a} students. Then each student buys {c} more "
            "pencils. How many pencils do the students have altogether?"
        ),
        lambda a, q, c: a * (q + c),
    ),
    _Template(
        ((5, 40), (4, 20), (1, 19), (1, 50)),
        lambda a, b, c, d: (
            f"Maya saves {a} dollars every week for {b} weeks. She spends {c} dollars on a bike, then her "
            f"aunt gives her {d} dollars. How many dollars does Maya have now?"
        ),
        lambda a, b, c, d: a * b - c + d,
    ),
    _Template(
        ((3, 30), (4, 25), (1, 11), (1, 10)),
        lambda a, b, c, d: (
            f"A garden has {a} rows of {b} plants. A storm destroys {c} plants, then the gardener plants {d} "
            f"more rows of {b} plants. How many plants are in the garden now?"
        ),
        lambda a, b, c, d: (a + d) * b - c,
    ),
)


def _multiplier(size: int) -> int:
    """A multiplier coprime with ``size`` near its golden-ratio point: index -> parameters is then
    a bijection that scatters neighbouring indices over the space."""
    m = max(1, int(size * 0.6180339887))
    while math.gcd(m, size) != 1:
        m += 1
    return m


_HELD_OUT = [t.size // 10 for t in TEMPLATES]
_TRAIN = [t.size - h for t, h in zip(TEMPLATES, _HELD_OUT, strict=True)]
_MULT = [_multiplier(t.size) for t in TEMPLATES]

SPLITS: dict[str, range] = {
    "train": range(0, len(TEMPLATES) * min(_TRAIN)),
    "held_out": range(10_000_000, 10_000_000 + len(TEMPLATES) * min(_HELD_OUT)),
}
"""The seeds of each split (disjoint ranges; seeds outside both are refused)."""


def split_of(seed: int) -> str | None:
    return next((name for name, seeds in SPLITS.items() if seed in seeds), None)


def problem(seed: int) -> tuple[str, int]:
    """(problem text, integer answer) for ``seed``; ValueError when the seed is in no split."""
    split = split_of(seed)
    if split is None:
        ranges = ", ".join(f"{k}: {r.start}..{r.stop - 1}" for k, r in SPLITS.items())
        raise ValueError(f"seed {seed} is in no split ({ranges})")
    i = seed - SPLITS[split].start
    t, k = i % len(TEMPLATES), i // len(TEMPLATES)
    template = TEMPLATES[t]
    index = k if split == "train" else _TRAIN[t] + k
    params = template.params((index * _MULT[t] + template.size // 3) % template.size)
    return template.render(*params), template.answer(*params)


def task_rows(split: str = "train", n: int = 100, start: int = 0) -> list[dict[str, Any]]:
    """``n`` rows of ``split`` from its ``start``-th seed on: ``{"seed": N, "split": NAME}``."""
    seeds = SPLITS[split]
    if not 0 <= start <= start + n <= len(seeds):
        raise ValueError(f"split {split} has {len(seeds)} problems; asked for {start}..{start + n - 1}")
    return [{"seed": s, "split": split} for s in seeds[start : start + n]]


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


class CalcEnv:
    """Multi-step arithmetic word problems with a calculator tool; success is the exact integer answer."""

    def __init__(self, max_turns: int = 6, python: bool = False, python_limits: dict[str, Any] | None = None) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        self.max_turns = max_turns
        self.tools: dict[str, Tool] = {"calculator": CalculatorTool()}
        if python:
            self.tools["python"] = PythonTool(SandboxLimits(**(python_limits or {})))
        self.answer: int | None = None
        self.counts = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "bad_tool_calls": 0}

    def reset(self, row: dict[str, Any]) -> Reset:
        seed = row.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"row needs an integer 'seed', got {seed!r}")
        split = row.get("split")
        if split is not None and split_of(seed) != split:
            raise ValueError(f"seed {seed} is not in split {split!r} (seeds {SPLITS.get(split, 'unknown split')})")
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
