"""Under-specified requests made from a seed alone (the ``clarify`` environment's tasks, and the
``builtin:clarify-train`` / ``builtin:clarify-heldout`` prompt sets), with disjoint train and
held-out splits.

Each family has visible parameters (what the first user message says) and one hidden value only
the user knows (a quantity, a height, a distance, a date, a bill, a birth year). The splits are
disjoint by construction: each family's visible space is shuffled by a fixed bijection and cut in
two (the last tenth held out), so no held-out first message is ever a training one; seed ->
(family, index inside the split's part) -> a second bijection over (visible, hidden) pairs. Every
hidden value's answer is more than twice the tolerance from its neighbours', so a policy that
answers without asking is right for at most one hidden value in 30 or more. Two-way ambiguities
(date order, which unit) are left out on purpose: guessing would win half the time.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grm.data.seed_splits import SeedSplits

_ITEMS = (
    ("notebook", "notebooks"),
    ("coffee mug", "coffee mugs"),
    ("candle", "candles"),
    ("T-shirt", "T-shirts"),
    ("water bottle", "water bottles"),
    ("pack of pens", "packs of pens"),
    ("phone case", "phone cases"),
    ("houseplant", "houseplants"),
    ("cookbook", "cookbooks"),
    ("pair of socks", "pairs of socks"),
    ("desk lamp", "desk lamps"),
    ("jar of honey", "jars of honey"),
)
_WHO = (
    ("my", "I am"),
    ("my son's", "My son is"),
    ("my daughter's", "My daughter is"),
    ("my husband's", "My husband is"),
    ("my wife's", "My wife is"),
    ("my dad's", "My dad is"),
    ("my mum's", "My mum is"),
    ("my best friend's", "My best friend is"),
)
_HEIGHT_ASKS = (
    "Can you convert {} height to centimetres?",
    "What is {} height in centimetres?",
    "Please convert {} height into cm.",
    "For a medical form I need {} height in centimetres.",
    "Quick one: how many centimetres is {} height?",
)
_PLACES = (
    "parents' house",
    "office",
    "cabin",
    "friend's place",
    "sister's house",
    "campsite",
    "grandmother's house",
    "favourite beach",
)
_MEALS = ("dinner", "lunch", "brunch", "pizza delivery", "taxi ride", "haircut", "sushi dinner")
_TIPS = (10, 12, 15, 18, 20, 25)
_AGE_ASKS = ("How old will I turn in {}?", "What age will I turn in {}?", "In {}, how old will I turn?")
_YEAR_START = datetime.date(2025, 1, 1)  # not a leap year: a birthday is a day of it


def _day(i: int) -> str:
    d = _YEAR_START + datetime.timedelta(days=i % 365)
    return f"{d:%B} {d.day}"


def _money(x: float) -> str:
    return f"${x:,.2f}"


@dataclass(frozen=True)
class Family:
    """One kind of under-specified request: ``visible`` option counts, ``hidden`` values."""

    name: str
    visible: tuple[int, ...]
    hidden: int
    request: Callable[..., str]
    """Visible option indices -> the first user message."""
    detail: Callable[..., str]
    """Visible indices, hidden index -> the user's reply that gives the hidden detail."""
    answer: Callable[..., float]
    """Visible indices, hidden index -> the exact answer."""
    tolerance: float
    keywords: tuple[str, ...]
    """Words a turn asking for the hidden detail uses (lower case; matched as substrings)."""

    @property
    def size(self) -> int:
        return math.prod(self.visible)

    def options(self, v: int) -> tuple[int, ...]:
        """Visible tuple number ``v`` (mixed radix: a bijection of [0, size))."""
        out = []
        for n in self.visible:
            v, r = divmod(v, n)
            out.append(r)
        return tuple(out)


FAMILIES = (
    Family(
        "order_total",
        (len(_ITEMS), 95),
        39,
        lambda i, p: (
            f"Hi! I want to order some {_ITEMS[i][1]} from your shop. They are {_money(1.25 + 0.25 * p)} each. "
            "What is the total price for my order?"
        ),
        lambda i, p, h: f"I need {h + 2} {_ITEMS[i][1]}.",
        lambda i, p, h: (h + 2) * (1.25 + 0.25 * p),
        0.01,
        ("how many", "quantity", "number of", "units", "items"),
    ),
    Family(
        "height_cm",
        (len(_WHO), len(_HEIGHT_ASKS)),
        36,
        lambda w, a: _HEIGHT_ASKS[a].format(_WHO[w][0]),
        lambda w, a, h: f"{_WHO[w][1]} {(48 + h) // 12} feet {(48 + h) % 12} inches tall.",
        lambda w, a, h: (48 + h) * 2.54,
        0.5,
        ("height", "tall", "feet", "foot", "inches", "ft"),
    ),
    Family(
        "drive_minutes",
        (len(_PLACES), 6),
        141,
        lambda d, s: (
            f"I'm driving to my {_PLACES[d]} and I'll average {30 + 5 * s} km/h. "
            "How many minutes will the drive take (to the nearest minute)?"
        ),
        lambda d, s, h: f"It's {10 + h} km away.",
        lambda d, s, h: (10 + h) * 60 / (30 + 5 * s),
        0.5,
        ("how far", "distance", "km", "kilomet", "far away", "miles"),
    ),
    Family(
        "birthday_days",
        (365,),
        364,
        lambda t: f"Today is {_day(t)}. How many days are left until my next birthday?",
        lambda t, h: f"My birthday is on {_day(t + h + 1)}.",
        lambda t, h: h + 1,
        0.01,
        ("birthday", "born", "date", "when"),
    ),
    Family(
        "tip_dollars",
        (len(_TIPS), len(_MEALS)),
        280,
        lambda p, m: f"I want to leave a {_TIPS[p]}% tip on my {_MEALS[m]} bill. How much should the tip be in dollars?",
        lambda p, m, h: f"The bill was {_money(10 + 0.5 * h)}.",
        lambda p, m, h: (10 + 0.5 * h) * _TIPS[p] / 100,
        0.01,
        ("bill", "total", "amount", "how much", "cost", "price", "spen"),
    ),
    Family(
        "age_turning",
        (20, len(_AGE_ASKS)),
        66,
        lambda y, a: _AGE_ASKS[a].format(2026 + y),
        lambda y, a, h: f"I was born in {1950 + h}.",
        lambda y, a, h: 2026 + y - 1950 - h,
        0.01,
        ("born", "birth", "age", "old", "year"),
    ),
)
"""Every family's hidden answers are more than ``2 * tolerance`` apart (a test checks it)."""


def _multiplier(size: int) -> int:
    """A multiplier coprime with ``size`` near its golden-ratio point: ``k -> k * m mod size`` is a
    bijection that scatters neighbouring indices over the space."""
    m = max(1, int(size * 0.6180339887))
    while math.gcd(m, size) != 1:
        m += 1
    return m


def _scatter(k: int, size: int) -> int:
    return (k * _multiplier(size) + size // 3) % size


_HELD_OUT = [f.size // 10 for f in FAMILIES]
_TRAIN = [f.size - h for f, h in zip(FAMILIES, _HELD_OUT, strict=True)]
_PART = {"train": _TRAIN, "held_out": _HELD_OUT}
"""Visible tuples in each split's part of each family."""


def _seeds(start: int, part: list[int]) -> range:
    """As many tasks of each family as the smallest family's part has, interleaved by seed."""
    return range(start, start + len(FAMILIES) * min(v * f.hidden for v, f in zip(part, FAMILIES, strict=True)))


SPLITS: dict[str, range] = {"train": _seeds(0, _TRAIN), "held_out": _seeds(20_000_000, _HELD_OUT)}
"""The seeds of each split (disjoint ranges, and apart from ``calc``'s; other seeds are refused)."""


SEEDS = SeedSplits(SPLITS, "tasks")
split_of = SEEDS.split_of


@dataclass(frozen=True)
class ClarifyTask:
    """One task: what the user asks, what they answer when asked, and the rule check."""

    family: str
    request: str
    detail: str
    answer: float
    tolerance: float
    keywords: tuple[str, ...]

    def correct(self, value: float | None) -> bool:
        return value is not None and abs(value - self.answer) <= self.tolerance + 1e-9


def task(seed: int) -> ClarifyTask:
    """The task of ``seed``; ValueError when the seed is in no split."""
    split = split_of(seed)
    if split is None:
        ranges = ", ".join(f"{k}: {r.start}..{r.stop - 1}" for k, r in SPLITS.items())
        raise ValueError(f"seed {seed} is in no split ({ranges})")
    i = seed - SPLITS[split].start
    f, k = i % len(FAMILIES), i // len(FAMILIES)
    family = FAMILIES[f]
    part = _PART[split][f]
    rank, hidden = divmod(_scatter(k, part * family.hidden), family.hidden)
    rank += 0 if split == "train" else _TRAIN[f]
    visible = family.options(_scatter(rank, family.size))
    return ClarifyTask(
        family.name,
        family.request(*visible),
        family.detail(*visible, hidden),
        float(family.answer(*visible, hidden)),
        family.tolerance,
        family.keywords,
    )


def task_rows(split: str = "train", n: int = 100, start: int = 0) -> list[dict[str, Any]]:
    """``n`` rows of ``split`` from its ``start``-th seed on: ``{"seed": N, "split": NAME}``."""
    return SEEDS.rows(split, n, start)


def prompt_rows(split: str, n: int) -> list[dict[str, Any]]:
    """The first ``n`` tasks of ``split`` as prompt rows: ``id``, ``prompt`` (the user's first
    message, what the run shows and keys groups by), ``seed`` and ``split`` (what the environment
    starts from). No reference and no hidden detail: those are the environment's, never a judge's input."""
    return [{"id": f"clarify-{r['seed']}", "prompt": task(r["seed"]).request, **r} for r in task_rows(split, n)]
