"""Parsers turn one judge output into a score, a list of scores, or a verdict — or a failure.

A parser sees only the judge's own generated text (plus its prefill), never the judged response,
so a response that says "Score: 10" cannot move its own score. Failure is data: ``value=None`` with
the reason kept, never a silent 0.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any, Protocol

from grm.config.judge import JudgeSpec
from grm.config.parsers import BoxedParser, JsonParser, LogprobParser, ParserSpec, RegexParser, TargetParser, VerdictParser
from grm.config.targets import loaded_target_problem
from grm.config.user_regex import REGEX_TIMEOUT_S, compile_user_regex
from grm.judges.errors import JudgeError

Value = float | list[float] | str | None


@dataclass(frozen=True)
class ParsedScore:
    """The parse of one judge output. ``value`` is None exactly when the parse failed."""

    value: Value
    error: str | None = None
    timed_out: bool = False
    """The parse ran out of time (a regex past its limit): a failure that says nothing about the text."""

    @property
    def ok(self) -> bool:
        return self.value is not None


def fail(reason: str) -> ParsedScore:
    return ParsedScore(None, reason)


class Parser(Protocol):
    def __call__(self, text: str) -> ParsedScore: ...


def _to_float(s: str) -> float | None:
    try:
        v = float(s)  # float() accepts any Unicode decimal digits ("７" -> 7.0)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _in_range(v: float, rng: tuple[float, float] | None) -> bool:
    return rng is None or rng[0] <= v <= rng[1]


class RegexScore:
    """The user's pattern, matched within ``timeout_s`` (``grm.config.user_regex``): a critique
    that makes it backtrack past the limit is a failed parse, never a hang."""

    def __init__(self, spec: RegexParser, timeout_s: float = REGEX_TIMEOUT_S) -> None:
        self.spec = spec
        self.timeout_s = timeout_s
        try:
            self.rx = compile_user_regex(spec.pattern)
        except ValueError as e:  # the spec refuses these at load; a hand-built spec lands here
            raise JudgeError(f"parser pattern {spec.pattern!r}: {e}") from None

    def __call__(self, text: str) -> ParsedScore:
        if not text or not text.strip():
            return fail("empty output")
        found = []
        try:
            matches = list(self.rx.finditer(text, timeout=self.timeout_s))
        except TimeoutError:
            return ParsedScore(None, f"regex timed out after {self.timeout_s:g} s on {len(text):,} characters", timed_out=True)
        for m in matches:
            try:
                raw = m.group(self.spec.group)
            except IndexError:
                raise JudgeError(f"parser pattern {self.spec.pattern!r} has no group {self.spec.group}") from None
            v = _to_float(raw) if raw is not None else None
            if v is not None:
                found.append(v)
        if not found:
            return fail(f"no match for {self.spec.pattern!r}")
        if self.spec.take == "only" and len(set(found)) > 1:
            return fail(f"several different scores {short_repr(found)}")
        v = found[0] if self.spec.take == "first" else found[-1]
        if not _in_range(v, self.spec.range):
            return fail(f"score {v:g} outside range {list(self.spec.range or ())}")
        return ParsedScore(v)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces.

    One pass with a stack of open braces (a ``}`` closes the innermost), so a critique that opens
    thousands of boxes it never closes costs linear time, not a rescan per box.
    """
    open_braces: list[tuple[int, bool]] = []  # (position after the "{", opened by \\boxed{) not closed yet
    best: tuple[int, int] | None = None
    for m in re.finditer(r"\\boxed\{|[{}]", text):
        if m.group() != "}":
            open_braces.append((m.end(), m.group() != "{"))
        elif open_braces:
            start, is_box = open_braces.pop()
            if is_box and (best is None or start > best[0]):
                best = (start, m.start())
    return None if best is None else text[best[0] : best[1]]


class BoxedScores:
    def __init__(self, spec: BoxedParser, expected: int | None = None) -> None:
        self.spec = spec
        self.expected = expected

    def __call__(self, text: str) -> ParsedScore:
        if not text or not text.strip():
            return fail("empty output")
        inner = last_boxed(text)
        if inner is None:
            return fail("no \\boxed{...}")
        parts = [p.strip() for p in inner.replace(";", ",").split(",") if p.strip()]
        parsed = [_to_float(p) for p in parts]
        values = [v for v in parsed if v is not None]
        if not values or len(values) != len(parsed):
            return fail(f"\\boxed{{{_short(inner)}}} is not a list of numbers")
        if self.expected is not None and len(values) != self.expected:
            return fail(f"expected {self.expected} scores, found {len(values)}")
        bad = [v for v in values if not _in_range(v, self.spec.range)]
        if bad:
            return fail(f"scores {short_repr(bad)} outside range {list(self.spec.range or ())}")
        return ParsedScore(values if self.expected != 1 else values[0])


class JsonScore:
    def __init__(self, spec: JsonParser, expected: int | None = None) -> None:
        self.spec = spec
        self.expected = expected

    def __call__(self, text: str) -> ParsedScore:
        if not text or not text.strip():
            return fail("empty output")
        obj = _last_json_object(text)
        if obj is None:
            return fail("no JSON object")
        cur: Any = obj
        for part in self.spec.field.split("."):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            elif isinstance(cur, list) and part.isascii() and part.isdigit() and int(part) < len(cur):
                cur = cur[int(part)]
            else:
                return fail(f"JSON has no field {self.spec.field!r}")
        if isinstance(cur, list):
            parsed = [_to_float(str(x)) if not isinstance(x, bool) else None for x in cur]
            vals = [v for v in parsed if v is not None and _in_range(v, self.spec.range)]
            if not vals or len(vals) != len(parsed):
                return fail(f"field {self.spec.field!r} is not a list of in-range numbers: {_short(repr(cur))}")
            if self.expected is not None and len(vals) != self.expected:
                return fail(f"expected {self.expected} scores, found {len(vals)}")
            return ParsedScore(vals if self.expected != 1 else vals[0])
        if self.expected not in (None, 1):
            return fail(f"field {self.spec.field!r} holds one value; expected a list of {self.expected} scores")
        v = None if isinstance(cur, bool) else _to_float(str(cur))
        if v is None:
            return fail(f"field {self.spec.field!r} is not a number: {_short(repr(cur))}")
        if not _in_range(v, self.spec.range):
            return fail(f"score {v:g} outside range {list(self.spec.range or ())}")
        return ParsedScore(v)


JSON_TAIL_CHARS = 32_000
"""Only the critique's last this many characters are searched for its JSON object: a judge writes
its answer object last, and far shorter than this (the shipped ones are under 200 characters)."""
JSON_MAX_STARTS = 128
"""Only the last this many ``{`` of that tail are tried as the start of an object (an answer object
holds far fewer nested objects than this)."""


def _last_json_object(text: str) -> Any:
    """The last JSON object in ``text``: read left to right from the candidate starts, an object
    read whole is skipped over (its own ``{`` are not tried again), the last one read wins.

    Each failed start costs a decode to where it fails, up to the end of the text: tried from every
    ``{`` of a whole critique, a 2 MB critique of unclosed ``{"a":[0,`` took 27 s (10 MB: minutes).
    Bounded to the last ``JSON_MAX_STARTS`` starts within the last ``JSON_TAIL_CHARS`` characters,
    the work is at most about their product in characters decoded, whatever the critique's length:
    measured on the 2-core reference machine, 2 MB and 10 MB hostile critiques parse in under 0.01 s,
    and the worst tail (128 unclosed lists then numbers to its end) in 0.02 s."""
    tail = text[-JSON_TAIL_CHARS:]  # a slice: a failed decode also counts lines up to where it failed
    starts: list[int] = []
    i = tail.rfind("{")
    while i != -1 and len(starts) < JSON_MAX_STARTS:
        starts.append(i)
        i = tail.rfind("{", 0, i)
    dec = json.JSONDecoder()
    best, done = None, -1
    for i in reversed(starts):
        if i < done:  # inside an object already read
            continue
        try:
            obj, end = dec.raw_decode(tail, i)
        except (ValueError, RecursionError):  # not JSON; an int past 4300 digits; nested too deeply
            continue
        if isinstance(obj, dict):
            best = obj
        done = end
    return best


class VerdictChoice:
    """The verdict token that appears last wins ('A', 'B' or 'tie')."""

    def __init__(self, spec: VerdictParser) -> None:
        self.tokens = {"A": spec.a, "B": spec.b}
        if spec.tie:
            self.tokens["tie"] = spec.tie

    def __call__(self, text: str) -> ParsedScore:
        if not text or not text.strip():
            return fail("empty output")
        pos = {k: text.rfind(tok) for k, tok in self.tokens.items()}
        present = {k: p for k, p in pos.items() if p != -1}
        if not present:
            return fail(f"no verdict token ({', '.join(self.tokens.values())})")
        return ParsedScore(max(present, key=lambda k: present[k]))


class TargetCall:
    """A user's ``fn(text, **options)``: what it returns (a number, a list of numbers, a verdict
    word, a ParsedScore or None) is checked like a builtin parser's value, and an exception it raises
    on an output it did not expect is a failed parse with the exception as the reason."""

    def __init__(self, spec: TargetParser) -> None:
        mod, _, attr = spec.target.partition(":")
        try:
            fn: Any = importlib.import_module(mod)
            for a in attr.split("."):
                fn = getattr(fn, a)
        except (Exception, SystemExit) as e:  # the user's module may raise anything while it is imported
            raise JudgeError(f"parser target {spec.target!r} cannot be imported: {type(e).__name__}: {e}") from None
        why = loaded_target_problem(fn)
        if why is not None:
            raise JudgeError(f"parser target {spec.target!r} {why}")
        self.fn: Callable[..., Any] = fn
        self.options = spec.options
        self.range: tuple[float, float] | None = getattr(spec, "range", None)

    def __call__(self, text: str) -> ParsedScore:
        name = getattr(self.fn, "__name__", "parser target")
        try:
            out = self.fn(text, **self.options)
        except (Exception, SystemExit) as e:  # an output the user's function did not expect: a failed parse, with its reason
            return fail(f"{name} raised {type(e).__name__}: {_short(str(e))}")
        parsed = out if isinstance(out, ParsedScore) else ParsedScore(out)
        if parsed.value is None:
            return fail(parsed.error or f"{name} returned None")
        checked = _checked(parsed.value, name)
        v = checked.value
        numbers = v if isinstance(v, list) else [v] if isinstance(v, float) else []
        bad = [x for x in numbers if not _in_range(x, self.range)]
        if bad:  # held to its declared range like a builtin parser's number
            return fail(f"{name} returned {short_repr(bad)}, outside range {list(self.range or ())}")
        return checked


def _short(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to 200 characters: a failure's reason quotes the critique's own values,
    which may be a megabyte of them."""
    return _short(repr(value))


def _checked(value: Any, name: str) -> ParsedScore:
    """A user parser's value as a score: a finite number, a list of them, or a verdict word."""
    if isinstance(value, str) and value in ("A", "B", "tie"):
        return ParsedScore(value)
    values = value if isinstance(value, list) else [value]
    numbers = [float(v) for v in values if isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)]
    if not values or len(numbers) != len(values):
        return fail(f"{name} returned {_short(repr(value))}; expected a finite number, a list of them, or a verdict A/B/tie")
    return ParsedScore(numbers if isinstance(value, list) else numbers[0])


def logprob_candidates(
    spec: LogprobParser, mode: str, tokenize: Callable[[str], list[int]] | None = None
) -> tuple[str, list[str], list[float]]:
    """(prefix, candidate continuations, candidate values).

    A trailing space in the prefix may belong to the prefix or to the candidates depending on the
    tokenizer (GPT-2 style BPE glues it to the digit; SmolLM2 keeps it apart). With ``tokenize``,
    the split giving the fewest candidate tokens is used, so most candidates are one token and are
    read off a single forward pass.
    """
    prefix = spec.prefix
    if spec.candidates is not None:
        cands = list(spec.candidates)
        if mode == "pairwise":
            values = [float(i) for i in range(len(cands))]
        elif mode == "checklist":  # [yes, no]: the expected value is P(yes) renormalised over the two
            values = [1.0, 0.0]
        elif spec.values is not None:  # words standing for scores (pointwise)
            values = [float(v) for v in spec.values]
        else:
            read = [_to_float(c) for c in cands]
            values = [v for v in read if v is not None]
            if len(values) != len(cands):  # the judge spec refuses these at load; a hand-built spec lands here
                raise JudgeError(f"pointwise logprob candidates must be numbers (the scores), got {cands}")
    elif mode == "pairwise":
        cands, values = ["A", "B"], [1.0, -1.0]
    elif mode == "checklist":
        cands, values = ["Yes", "No"], [1.0, 0.0]
    else:
        lo, hi = spec.range or (1, 10)
        nums = list(range(math.ceil(lo), math.floor(hi) + 1))
        cands, values = [str(n) for n in nums], [float(n) for n in nums]
    if prefix.endswith(" "):
        glued = (prefix.rstrip(" "), [" " + c for c in cands])
        if tokenize is None:
            prefix, cands = glued
        else:
            cost = lambda cs: sum(len(tokenize(c)) for c in cs)  # noqa: E731
            if cost(glued[1]) < cost(cands):
                prefix, cands = glued
    return prefix, cands, values


def read_candidates(
    from_logprobs: Callable[[list[float], list[float]], float], logprobs: dict[str, float | None], values: list[float]
) -> ParsedScore:
    """The value read off each candidate's log-prob, or a failure. A candidate the engine could not
    read (None: not among a server's top log-probs; or not finite) fails the reading: a guessed value
    would turn "unknown" into a score, so the sample is masked and counted instead. So does a
    log-prob above 0, a probability above 1 that no model gives: a broken engine or server reply."""
    unread = [c for c, lp in logprobs.items() if lp is None or not math.isfinite(lp)]
    if unread:
        return fail(f"no log-prob for candidate(s) {unread} (not among the engine's top log-probs)")
    impossible = {c: lp for c, lp in logprobs.items() if lp is not None and lp > 0.0}
    if impossible:
        return fail(f"log-prob above 0 for candidate(s) {impossible} (a probability above 1: a broken reading)")
    return ParsedScore(from_logprobs([float(lp) for lp in logprobs.values() if lp is not None], values))


def expected_value(logprobs: Sequence[float], values: Sequence[float]) -> float:
    """Probability-weighted mean of ``values`` renormalised over the candidates."""
    m = max(logprobs)
    w = [math.exp(lp - m) for lp in logprobs]
    return sum(wi * v for wi, v in zip(w, values, strict=True)) / sum(w)


PARSERS: dict[str, Callable[[Any, int | None], Parser]] = {
    "regex": lambda spec, expected: RegexScore(spec),
    "boxed": BoxedScores,
    "json": JsonScore,
    "verdict": lambda spec, expected: VerdictChoice(spec),
    "target": lambda spec, expected: TargetCall(spec),
}
"""The registry of text parsers by ``type:``, each built from ``(spec, expected)``; the boxed and
json parsers read a list of known length (listwise). ``logprob`` is absent: it reads token probabilities, not text."""


def build_parser(spec: ParserSpec, *, expected: int | None = None, regex_timeout_s: float = REGEX_TIMEOUT_S) -> Parser:
    """A text parser for ``spec``; ``expected`` is the number of scores a listwise output holds;
    ``regex_timeout_s`` bounds a ``regex`` parser's match (the judge's ``limits.regex_timeout_s``)."""
    if spec.type == "logprob":
        raise JudgeError("the logprob parser reads token probabilities, not text; the judge runtime drives it")
    if spec.type == "regex":
        return RegexScore(spec, regex_timeout_s)
    make = PARSERS.get(spec.type)
    if make is None:
        raise JudgeError(f"unknown parser {spec!r}")  # pragma: no cover
    return make(spec, expected)


class JudgeParsers:
    """A judge's text parsers, built from its spec once per number of scores read (``expected``:
    a listwise output's length; None: any). A judge whose parser reads log-probs builds none, and
    a text parser whose target cannot be imported fails when the judge is built, not mid-batch."""

    def __init__(self, spec: JudgeSpec) -> None:
        self.spec = spec.parser
        self.regex_timeout_s = spec.limits.regex_timeout_s
        self._built: dict[int | None, Parser] = {}
        if spec.parser.type != "logprob":
            self.get()

    def get(self, expected: int | None = None) -> Parser:
        if expected not in self._built:
            self._built[expected] = build_parser(self.spec, expected=expected, regex_timeout_s=self.regex_timeout_s)
        return self._built[expected]
