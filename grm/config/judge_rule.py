"""A rule judge's verifier (``mode: rule``, a judge spec's ``rule:``): which deterministic check
scores a response or an episode, and its settings."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from grm.config.base import MAX_TOKENS, Strict
from grm.config.parsers import VerdictParser
from grm.config.user_regex import compile_user_regex


class RuleSpec(Strict):
    """A deterministic verifier with the judge interface."""

    type: Literal["numeric-answer", "exact-match", "regex-format", "length", "constraints", "signal", "verdict"]
    """``constraints``: the sample's verifiable instruction constraints (``metadata.constraints``:
    ``data.constraints_field`` in a pipeline, the ``constraints`` column in ``grm eval``) all hold
    (1.0) or not (0.0), per type in ``JudgeResult.details``; a sample without them is masked.
    ``signal``: an episode's environment signal named by ``signal`` (e.g. ``success``), as the
    environment reported it; an episode without it (its environment failed first) or a sample that
    is not an episode is masked.
    ``verdict``: a judge in training (``data.judge_prompts``): the response's pairwise verdict
    (``verdict`` tokens, the last one wins) against the sample's reference (``A`` or ``B``): 1 right,
    0 wrong or a tie, masked when no verdict token is there. With ``consistency`` > 0 a right verdict
    keeps ``1 - consistency + consistency * agree`` of its reward, ``agree`` the share of the pair's
    other-order verdicts in the same step that pick the same response (1 when there is none), so a
    judge right in one order only is paid less than one right in both.
    """
    verdict: VerdictParser = VerdictParser()
    """(verdict) the verdict tokens the response is read for."""
    consistency: float = Field(0.5, ge=0, le=1)
    """(verdict) share of a right verdict's reward that depends on the other order agreeing."""
    signal: str | None = Field(None, min_length=1, max_length=64)
    """(signal) the environment signal to read."""
    pattern: str | None = None
    """(regex-format) the response must match this regex (search, ``.`` matches newlines too) to
    score 1. Checked like a regex parser's pattern (``grm.config.user_regex``); a check past
    ``limits.regex_timeout_s`` masks the sample."""
    tolerance: float = Field(1e-6, ge=0)
    """(numeric-answer) absolute tolerance when comparing with the reference."""
    case_sensitive: bool = False
    """(exact-match) compare case-sensitively."""
    target_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    """(length) the length, in whitespace tokens, the score is measured against (see ``prefer``)."""
    prefer: Literal["shorter", "longer"] = "shorter"
    """(length) ``shorter``: up to ``target_tokens`` score 1, longer decays linearly to 0 at 2x (a brevity
    reward); ``longer``: the score is ``min(1, tokens / target_tokens)`` (a length-only reward, the
    control that tells whether a judge's gain is only length)."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            compile_user_regex(v, re.DOTALL)
        return v

    @model_validator(mode="after")
    def _needs(self) -> RuleSpec:
        if self.type == "regex-format" and not self.pattern:
            raise ValueError("regex-format needs pattern")
        if self.type == "length" and not self.target_tokens:
            raise ValueError("length needs target_tokens")
        if (self.type == "signal") != (self.signal is not None):
            raise ValueError("signal: NAME goes with type: signal (and only with it)")
        return self
