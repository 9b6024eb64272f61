"""Rule verifiers: deterministic checks with the judge interface, for mixing with GRMs.

A verifier returns 1.0/0.0 (``length`` returns a value in [0, 1]). A wrong or missing answer in
the *response* scores 0 — that is the verdict, not a failure. A missing *reference* is a failure
(None, masked), because then nothing was verified.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from fractions import Fraction

import regex

from grm.config.judge import RuleSpec
from grm.config.user_regex import REGEX_TIMEOUT_S, compile_user_regex
from grm.judges.errors import JudgeError
from grm.judges.parsers import last_boxed

_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
_FINAL = [
    re.compile(r"####\s*(" + _NUM + ")"),
    # One run of spaces and stars after the optional separator: written as three \s* around
    # optional parts it was cubic, 30 s on "answer" and 1,000 spaces (a response can hold those).
    re.compile(r"answer(?:\s*(?:is|:|=))?[\s*]*\$?(" + _NUM + ")", re.I),
]


_DECIMAL = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,3})?")
"""A number as a reference or answer writes it: no ``nan``/``inf``, an exponent of at most 3 digits."""


def number_value(s: str) -> Fraction | None:
    """The number ``s`` writes (``1,200``, ``$56``, ``3/4``, ``7.``), exactly, None if it is none. Exact,
    so two different 400-digit numbers never compare equal as the same infinite float, and ``nan``
    or ``inf`` is no number to compare with."""
    s = unicodedata.normalize("NFKC", s).strip().replace(",", "").replace("$", "").rstrip(".")
    parts = s.split("/", 1)
    if not all(_DECIMAL.fullmatch(p) for p in parts):
        return None
    try:
        value = Fraction(parts[0])
        return value / Fraction(parts[1]) if len(parts) == 2 else value
    except (ValueError, ZeroDivisionError):  # past Python's 4,300-digit integer limit; a zero denominator
        return None


def shown(x: Fraction) -> str:
    """A number for a message: an integer as written (cut when long), else 6 significant digits."""
    if x.denominator == 1:
        text = str(x.numerator)
        return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"
    try:
        return f"{float(x):g}"
    except OverflowError:
        return "a number too large to show"


def final_number(text: str) -> Fraction | None:
    """The response's final answer: ``\\boxed{}``, then 'answer is X' / '#### X', else the last number."""
    text = unicodedata.normalize("NFKC", text)
    boxed = last_boxed(text)
    if boxed is not None:
        nums = re.findall(_NUM, boxed)
        if nums:
            return number_value(nums[-1])
    for rx in _FINAL:
        hits = rx.findall(text)
        if hits:
            return number_value(hits[-1])
    nums = re.findall(_NUM, text)
    return number_value(nums[-1]) if nums else None


@functools.lru_cache(maxsize=64)
def _format_regex(pattern: str) -> regex.Pattern[str]:
    try:
        return compile_user_regex(pattern, re.DOTALL)
    except ValueError as e:  # RuleSpec refuses these at load; a hand-built spec lands here
        raise JudgeError(f"rule pattern {pattern!r}: {e}") from None


def _norm(s: str, case: bool) -> str:
    s = " ".join(unicodedata.normalize("NFKC", s).split()).strip().rstrip(".")
    return s if case else s.casefold()


def check(
    rule: RuleSpec, response: str, reference: str | None, *, regex_timeout_s: float = REGEX_TIMEOUT_S
) -> tuple[float | None, str]:
    """(score, explanation) for one response; a ``regex-format`` check past ``regex_timeout_s`` is
    a failure (None), not a verdict on the response."""
    if rule.type == "numeric-answer":
        if reference is None:
            return None, "no reference answer to compare with"
        want = number_value(str(reference)) if number_value(str(reference)) is not None else final_number(str(reference))
        if want is None:
            return None, f"reference {reference!r} is not a number"
        got = final_number(response)
        if got is None:
            return 0.0, "no number in the response"
        ok = abs(got - want) <= Fraction(rule.tolerance)
        return float(ok), f"answer {shown(got)} {'==' if ok else '!='} reference {shown(want)}"
    if rule.type == "exact-match":
        if reference is None:
            return None, "no reference answer to compare with"
        ok = _norm(response, rule.case_sensitive) == _norm(str(reference), rule.case_sensitive)
        return float(ok), "exact match" if ok else "differs from reference"
    if rule.type == "regex-format":
        try:
            ok = _format_regex(rule.pattern or "").search(response, timeout=regex_timeout_s) is not None
        except TimeoutError:
            return None, f"regex timed out after {regex_timeout_s:g} s on {len(response):,} characters"
        return float(ok), "format ok" if ok else f"does not match {rule.pattern!r}"
    if rule.type == "length":
        n, t = len(response.split()), rule.target_tokens or 1
        if rule.prefer == "longer":
            return min(1.0, n / t), f"{n} words (reward grows to 1 at {t})"
        score = 1.0 if n <= t else max(0.0, 1.0 - (n - t) / t)
        return score, f"{n} words (target {t})"
    raise ValueError(f"rule {rule.type} is not checked here (constraints: grm.judges.instructions)")  # pragma: no cover
