"""Arithmetic word problems made from a seed alone (the ``calc`` environment's tasks, and the
``builtin:calc-train`` / ``builtin:calc-heldout`` prompt sets), with disjoint train and held-out
splits.

A data set is a range of seeds and nothing is stored. The splits are disjoint by construction, not
by chance: each template's parameter space is cut in two (the last tenth held out), seed ->
(template, index inside the split's part) -> a fixed bijection of the template's space (an affine
map modulo its size, so held-out problems are spread over the whole space, not its corner) -> the
parameters, which the text prints literally. Two seeds therefore never give the same problem, and
no held-out problem is a training problem.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grm.data.seed_splits import SeedSplits


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


SEEDS = SeedSplits(SPLITS, "problems")
split_of = SEEDS.split_of


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
    return SEEDS.rows(split, n, start)


def prompt_rows(split: str, n: int) -> list[dict[str, Any]]:
    """The first ``n`` problems of ``split`` as prompt rows: ``id``, ``prompt`` (the problem's text,
    what the run shows and keys groups by), ``seed`` and ``split`` (what the environment starts
    from). No reference: the answer is the environment's rule-checked signal, never a judge's input."""
    return [{"id": f"calc-{r['seed']}", "prompt": problem(r["seed"])[0], **r} for r in task_rows(split, n)]
