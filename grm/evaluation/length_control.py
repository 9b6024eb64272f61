"""Length control on labelled pairs (``grm eval --length-control``, ``grm rescore``): the judge's
preference between a pair's two responses with its dependence on their length difference taken
out, so accuracy with and without it can be compared on the same stored judgments.

A pair's *margin* is the judge's preference for response 1: the swap-combined margin (pairwise)
or score 1 - score 2 (pointwise, listwise); ``d`` = length 1 - length 2 in characters (the
``lengths`` results.jsonl stores). The controlled verdict is the sign of the controlled margin.

- ``regress``: margin - b x d, with b fitted by least squares through the origin over the set's
  unmasked pairs (b = sum(m d) / sum(d^2)). Through the origin because which response is "1" is
  arbitrary: swapping a pair negates both m and d and must leave the fit alone. The pipeline's
  ``regress`` fits a slope within each prompt's group; a pair is a group of two, where no slope
  can be fitted, so one slope is fitted across the pairs. It is fitted on the pairs being scored:
  an in-sample figure.
- ``penalty:COEF``: the pipeline's penalty on a group of two. The longer response loses COEF per
  character beyond the pair's median length, which is half the difference: margin - COEF x d / 2.
  COEF is in the judge's margin units (log-odds for the logprob pairwise judges, raw score points
  for pointwise ones), not the pipeline's normalised reward.

Pairs of equal length keep their verdict under both; masked pairs stay masked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class LengthControl:
    method: Literal["regress", "penalty"]
    coef: float | None = None
    """(penalty) margin taken per character of the longer response beyond the pair's median."""

    def __str__(self) -> str:
        return self.method if self.coef is None else f"{self.method}:{self.coef:g}"


def parse_length_control(text: str) -> LengthControl:
    """``regress`` or ``penalty:COEF`` (COEF >= 0, finite)."""
    method, _, coef = text.strip().partition(":")
    if method == "regress" and not coef:
        return LengthControl("regress")
    if method == "penalty":
        try:
            c = float(coef)
        except ValueError:
            c = math.nan
        if not math.isfinite(c) or c < 0:
            raise ValueError(f"'{text}': penalty needs a coefficient >= 0 per character, e.g. penalty:0.01")
        return LengthControl("penalty", c)
    raise ValueError(f"'{text}': expected regress or penalty:COEF (e.g. penalty:0.01)")


def pair_margin(line: dict[str, Any]) -> float | None:
    """The judge's preference for response 1 in a results.jsonl pair line; None when masked."""
    if line.get("masked"):
        return None
    if line.get("margin") is not None:
        return float(line["margin"])
    s = line.get("scores")
    if s and len(s) == 2 and None not in s:
        return float(s[0]) - float(s[1])
    return None


def fit_slope(margins: Sequence[float | None], diffs: Sequence[float]) -> float | None:
    """Least-squares slope through the origin of margin on length difference over the unmasked
    pairs; None when no unmasked pair differs in length."""
    sdd = sum(d * d for m, d in zip(margins, diffs, strict=True) if m is not None)
    if sdd == 0:
        return None
    return sum(m * d for m, d in zip(margins, diffs, strict=True) if m is not None) / sdd


def controlled_margins(
    margins: Sequence[float | None], diffs: Sequence[float], control: LengthControl
) -> tuple[list[float | None], float | None]:
    """(controlled margins, the slope taken off per unit of d): b fitted for regress (None, and the
    margins unchanged, when no slope can be fitted), COEF / 2 for penalty."""
    slope = fit_slope(margins, diffs) if control.method == "regress" else (control.coef or 0.0) / 2
    s = slope or 0.0
    return [None if m is None else m - s * d for m, d in zip(margins, diffs, strict=True)], slope
