"""Judge output parsers' specs (``parser:`` of a judge spec): how a critique becomes a score."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, Tag, field_validator, model_validator

from grm.config.base import Strict, by_type
from grm.config.targets import target_problem
from grm.config.user_regex import compile_user_regex


def _ordered(r: tuple[float, float]) -> tuple[float, float]:
    if not r[0] < r[1]:  # [10, 1] would fail every parse; [3, 3] has no width to normalise over
        raise ValueError(f"range [{r[0]:g}, {r[1]:g}]: the low end must be below the high end")
    return r


Range = Annotated[tuple[float, float], AfterValidator(_ordered)]

MAX_CANDIDATES = 1000
"""Candidates a logprob parser may read (``candidates``, or the whole numbers of ``range``). Each is
a continuation scored on every reading: the hf engine feeds every multi-token one on top of the
prompt's cache, a server is asked for one round of alternatives per token position and lists at
most 1000 of them per token (``top_logprobs``' bound). Score scales in use have 2 to 101 values."""
MAX_CANDIDATE_CHARS = 64
"""Characters of one candidate: a score or a word (``" Excellent"``). Every reading allocates the
prompt's cache for the longest candidate's tokens."""


def is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


class RegexParser(Strict):
    """A number captured by a regular expression (the last match by default)."""

    type: Literal["regex"] = "regex"
    """Selects this parser (the default when ``parser.type`` is absent)."""
    pattern: str = r"Score:\s*(-?\d+(?:\.\d+)?)"
    """Python regex; ``group`` selects the captured number. A pattern shaped to backtrack
    exponentially (``(a+)+``) is refused; a match past ``limits.regex_timeout_s`` is a failed parse
    (``grm.config.user_regex``)."""
    group: int = Field(1, ge=0, le=1000)
    """Index of the capture group holding the number (0: the whole match); at most the pattern's groups."""
    range: Range | None = None
    """Inclusive [low, high]; a number outside is a parse failure. Pointwise judges need it
    (``grm.config.judge_range``): rewards map it onto [0, 1]."""
    take: Literal["last", "first", "only"] = "last"
    """Which match counts when there are several; ``only`` fails on two different numbers."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        compile_user_regex(v)
        return v

    @model_validator(mode="after")
    def _has_group(self) -> RegexParser:
        groups = compile_user_regex(self.pattern).groups
        if not 0 <= self.group <= groups:
            raise ValueError(f"group {self.group}: the pattern has {groups} group(s)")
        return self


class BoxedParser(Strict):
    r"""Numbers inside the last ``\boxed{...}``, comma separated (listwise: one per response)."""

    type: Literal["boxed"] = "boxed"
    """Selects this parser."""
    range: Range | None = None
    """Inclusive [low, high] of every boxed number; one outside fails the parse. Pointwise and
    listwise judges need it (``grm.config.judge_range``)."""


class JsonParser(Strict):
    """A number at ``field`` (dotted path) of the last JSON object in the output."""

    type: Literal["json"] = "json"
    """Selects this parser."""
    field: str = "score"
    """Dotted path to the score in the last JSON object (``a.b``; a digit indexes a list): a number,
    or a list of numbers (listwise)."""
    range: Range | None = None
    """Inclusive [low, high] of every number read; one outside fails the parse. Pointwise and
    listwise judges need it (``grm.config.judge_range``)."""


class VerdictParser(Strict):
    """Pairwise verdict tokens; the last one present wins."""

    type: Literal["verdict"] = "verdict"
    """Selects this parser (pairwise only)."""
    a: str = "[[A]]"
    """Exact text that means "the first response shown is better"."""
    b: str = "[[B]]"
    """Exact text that means "the second response shown is better"."""
    tie: str | None = "[[C]]"
    """Exact text that means a tie; None: the judge cannot tie."""

    @model_validator(mode="after")
    def _tokens_tell_apart(self) -> VerdictParser:
        # The parser takes the token found last (``str.rfind``). An empty or blank token is found in
        # (nearly) every reply, so a reply with no verdict would get one. A token inside another is
        # found wherever the longer one is written, at or after its start, so the shorter one wins or
        # ties (equal starts then go by field order): the reply's verdict depends on an accident.
        tokens = {"a": self.a, "b": self.b, **({"tie": self.tie} if self.tie is not None else {})}
        for name, tok in tokens.items():
            if not tok.strip():
                raise ValueError(f"{name}: a verdict token cannot be empty or blank ({tok!r}): it is found in every reply")
        for name, tok in tokens.items():
            for other, longer in tokens.items():
                if other == name:
                    continue
                if tok == longer:
                    raise ValueError(f"{name} and {other} are the same token {tok!r}: a verdict could not be told apart")
                if tok in longer:
                    raise ValueError(
                        f"{name} ({tok!r}) is inside {other} ({longer!r}): wherever {other} is written {name} is found"
                        " too, so the verdict read would not be the one written"
                    )
        return self


class LogprobParser(Strict):
    """G-Eval style: after the critique, force ``prefix`` and read the model's probability of each
    candidate; the score is the probability-weighted mean (pointwise) or the log-odds of A over B
    (pairwise). A candidate whose log-prob the engine cannot read (not among a server's top
    log-probs) fails the reading: masked and counted, never a guessed value."""

    type: Literal["logprob"] = "logprob"
    """Selects this parser (pointwise, pairwise, checklist; not listwise)."""
    prefix: str = "\nScore: "
    """Text appended after the (possibly empty) critique before reading candidate probabilities."""
    candidates: list[str] | None = None
    """Candidate continuations; default: the integers of ``range`` (pointwise), ["A", "B"] (pairwise)
    or ["Yes", "No"] (checklist). Pointwise candidates are the scores themselves (numbers), or words
    with their scores in ``values``; pairwise ones are exactly [A, B]; checklist ones exactly [yes, no]."""
    values: list[float] | None = None
    """(pointwise, with ``candidates``) the score each candidate stands for, when the candidates are
    words: ``candidates: [" Yes", " No"], values: [1, 0]`` reads P(yes), renormalised over the two."""
    range: Range | None = (1, 10)
    """(pointwise) the scores read when ``candidates`` is unset (its whole numbers, 2 to
    ``MAX_CANDIDATES`` of them), and the span numeric ``candidates`` must lie in; a checklist judge
    ignores it."""
    critique: bool = True
    """Sample a critique first (n samples); False reads the score right after the prompt."""

    @field_validator("candidates")
    @classmethod
    def _distinct_candidates(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if len(v) < 2:
            raise ValueError("candidates: at least two, or none for the default")
        if len(v) > MAX_CANDIDATES:
            raise ValueError(f"candidates: {len(v)}; at most {MAX_CANDIDATES} (each is scored on every reading)")
        if any(not c for c in v):
            raise ValueError("candidates: an empty string has no log-prob to read")
        long = next((c for c in v if len(c) > MAX_CANDIDATE_CHARS), None)
        if long is not None:
            raise ValueError(
                f"candidates: {long[:20]!r}... is {len(long)} characters; a candidate is a score or a word,"
                f" at most {MAX_CANDIDATE_CHARS}"
            )
        if len(set(v)) != len(v):
            raise ValueError(f"candidates: duplicates in {v}")
        return v

    @model_validator(mode="after")
    def _range_candidates(self) -> LogprobParser:
        """The default candidates are the whole numbers of ``range``: at least two (one would read
        the same score whatever the judge says), at most ``MAX_CANDIDATES`` (``[1, 1e12]`` would
        list a trillion)."""
        if self.range is None or self.candidates is not None:
            return self
        lo, hi = self.range
        count = math.floor(hi) - math.ceil(lo) + 1
        if count < 2:
            raise ValueError(
                f"range [{lo:g}, {hi:g}] holds {max(count, 0)} whole number(s); the candidates read by default are"
                " its whole numbers, so it needs at least two (or give candidates)"
            )
        if count > MAX_CANDIDATES:
            raise ValueError(
                f"range [{lo:g}, {hi:g}] holds {count:,} whole numbers, each a candidate scored on every reading;"
                f" at most {MAX_CANDIDATES}"
            )
        return self

    @model_validator(mode="after")
    def _values(self) -> LogprobParser:
        if self.values is None:
            return self
        if self.candidates is None:
            raise ValueError("values: the scores of the candidates, so candidates too")
        if len(self.values) != len(self.candidates):
            raise ValueError(f"values: one per candidate ({len(self.candidates)}), got {len(self.values)}")
        if max(self.values) == min(self.values):
            raise ValueError(f"values: {self.values} read the same score whatever the judge says")
        return self


class TargetParser(Strict):
    """Escape hatch: ``target: "package.module:function"``, called as ``fn(text, **options)``."""

    type: Literal["target"] = "target"
    """Selects a user's parser function."""
    target: str
    """``package.module:function`` importable where the judge runs; it returns a number, a list of
    numbers, a verdict word, a ``ParsedScore`` or None (a failed parse)."""
    options: dict[str, Any] = {}
    """Keyword arguments passed to the function with each critique's text."""

    range: Range | None = None
    """(pointwise, listwise) Inclusive [low, high] of every number the function returns; one
    outside fails the parse. Pointwise and listwise judges need it: rewards map it onto [0, 1]."""

    @field_validator("target")
    @classmethod
    def _shape(cls, v: str) -> str:
        if not re.fullmatch(r"[\w.]+:[\w.]+", v):
            raise ValueError("expected 'package.module:function'")
        problem = target_problem(v)  # before anything imports it
        if problem is not None:
            raise ValueError(f"{v!r}: {problem}")
        return v


ParserSpec = Annotated[
    Annotated[RegexParser, Tag("regex")]
    | Annotated[BoxedParser, Tag("boxed")]
    | Annotated[JsonParser, Tag("json")]
    | Annotated[VerdictParser, Tag("verdict")]
    | Annotated[LogprobParser, Tag("logprob")]
    | Annotated[TargetParser, Tag("target")],
    by_type(["regex", "boxed", "json", "verdict", "logprob", "target"], default="regex"),
]
