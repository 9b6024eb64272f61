"""A pointwise or listwise judge declares the span of its scores.

Its rewards are its scores mapped from that span onto [0, 1] (``normalize``, by default the
parser's ``range``; ``grm.judges.base.score_range``). Without one the reward is the raw score, and
a critique that ends ``Score: 99999999999999999999999999999999999999`` is a reward of 1e38: the
judged response, written under optimisation pressure, only has to talk the judge into writing it.
With ``range`` a score outside it is a failed parse (masked and counted), never a reward.

The rule: a text parser (``regex``, ``json``, ``boxed``, ``target``) of such a judge has a
``range``; a ``logprob`` parser reads candidates whose scores are bounded by construction, and has
a ``range`` (its default, [1, 10]) holding its numeric candidates, unless ``values`` give the
candidates' scores. ``normalize`` may
remap the range, but does not replace it: it clips, so an out-of-scale score would earn the
highest reward instead of none. Pairwise, checklist and rule judges' scores are bounded already.
"""

from __future__ import annotations

from typing import Any

from grm.config.parsers import is_number

_TEXT_PARSERS = ("regex", "json", "boxed", "target")


def check_score_range(spec: Any) -> None:
    """Refuse a pointwise or listwise ``JudgeSpec`` whose scores have no declared range
    (ValueError naming the field)."""
    if spec.mode not in ("pointwise", "listwise"):
        return
    p = spec.parser
    if p.type in _TEXT_PARSERS and p.range is None:
        raise ValueError(
            f"parser.range: a {spec.mode} judge declares the range of its scores (e.g. range: [1, 10], the scale its"
            " template asks for): rewards map it onto [0, 1] and a score outside it is masked; without one any"
            " number the judge writes is a reward"
        )
    if p.type != "logprob" or p.values is not None:  # values: the candidates' scores, their span the range
        return
    if p.range is None:
        raise ValueError(
            "parser.range: a pointwise logprob judge reads scores in a declared range (range: [low, high], or"
            " candidates with their scores in values)"
        )
    lo, hi = p.range
    outside = [c for c in p.candidates or () if is_number(c) and not lo <= float(c) <= hi]
    if outside:
        raise ValueError(
            f"parser.candidates {outside} lie outside parser.range [{lo:g}, {hi:g}]: pointwise candidates are the"
            " scores, and range declares their span (rewards map it onto [0, 1])"
        )
