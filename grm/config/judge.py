"""Judge spec (``judges/*.yaml``): template + model + sampling + parser + aggregation + position
handling + failure policy; or a rule verifier."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from grm.config.base import Strict, check_file
from grm.config.policy import EngineSpec, HFEngineSpec


class JudgeSampling(Strict):
    """How critiques are sampled."""

    n: int = Field(1, ge=1)
    """Critiques sampled per item (and per presentation order); they vote via ``aggregate``."""
    temperature: float = Field(0.7, ge=0)
    """Sampling temperature; 0 is greedy (then n > 1 repeats the same critique)."""
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    max_new_tokens: int = Field(256, ge=1)
    """Tokens per critique at most."""
    stop: list[str] = []
    """Stop strings; the critique is cut before the first one."""
    seed: int = Field(0, ge=0, lt=2**31)
    """Base seed; sample j of an item uses (seed, j), so results do not depend on batching. Below
    2**31: servers (llama.cpp) read seeds as 32-bit integers, and retries add offsets to it."""


# ---------------------------------------------------------------- parsers


def _ordered(r: tuple[float, float]) -> tuple[float, float]:
    if not r[0] < r[1]:  # [10, 1] would fail every parse; [3, 3] has no width to normalise over
        raise ValueError(f"range [{r[0]:g}, {r[1]:g}]: the low end must be below the high end")
    return r


Range = Annotated[tuple[float, float], AfterValidator(_ordered)]


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


class RegexParser(Strict):
    """A number captured by a regular expression (the last match by default)."""

    type: Literal["regex"] = "regex"
    pattern: str = r"Score:\s*(-?\d+(?:\.\d+)?)"
    """Python regex; ``group`` selects the captured number."""
    group: int = 1
    range: Range | None = None
    """Inclusive [low, high]; a number outside is a parse failure."""
    take: Literal["last", "first", "only"] = "last"
    """Which match counts when there are several; ``only`` fails on two different numbers."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"not a valid regular expression: {e}") from None
        return v

    @model_validator(mode="after")
    def _has_group(self) -> RegexParser:
        groups = re.compile(self.pattern).groups
        if not 0 <= self.group <= groups:
            raise ValueError(f"group {self.group}: the pattern has {groups} group(s)")
        return self


class BoxedParser(Strict):
    r"""Numbers inside the last ``\boxed{...}``, comma separated (listwise: one per response)."""

    type: Literal["boxed"] = "boxed"
    range: Range | None = None


class JsonParser(Strict):
    """A number at ``field`` (dotted path) of the last JSON object in the output."""

    type: Literal["json"] = "json"
    field: str = "score"
    range: Range | None = None


class VerdictParser(Strict):
    """Pairwise verdict tokens; the last one present wins."""

    type: Literal["verdict"] = "verdict"
    a: str = "[[A]]"
    b: str = "[[B]]"
    tie: str | None = "[[C]]"


class LogprobParser(Strict):
    """G-Eval style: after the critique, force ``prefix`` and read the model's probability of each
    candidate; the score is the probability-weighted mean (pointwise) or the log-odds of A over B
    (pairwise). A candidate whose log-prob the engine cannot read (not among a server's top
    log-probs) fails the reading: masked and counted, never a guessed value."""

    type: Literal["logprob"] = "logprob"
    prefix: str = "\nScore: "
    """Text appended after the (possibly empty) critique before reading candidate probabilities."""
    candidates: list[str] | None = None
    """Candidate continuations; default: the integers of ``range`` (pointwise) or ["A", "B"] (pairwise).
    Pointwise candidates are the scores themselves (numbers); pairwise ones are exactly [A, B]."""
    range: Range | None = (1, 10)
    critique: bool = True
    """Sample a critique first (n samples); False reads the score right after the prompt."""

    @field_validator("candidates")
    @classmethod
    def _distinct_candidates(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if len(v) < 2:
            raise ValueError("candidates: at least two, or none for the default")
        if any(not c for c in v):
            raise ValueError("candidates: an empty string has no log-prob to read")
        if len(set(v)) != len(v):
            raise ValueError(f"candidates: duplicates in {v}")
        return v


class TargetParser(Strict):
    """Escape hatch: ``target: "package.module:function"``, called as ``fn(text, **options)``."""

    type: Literal["target"] = "target"
    target: str
    options: dict[str, Any] = {}

    @field_validator("target")
    @classmethod
    def _shape(cls, v: str) -> str:
        if not re.fullmatch(r"[\w.]+:[\w.]+", v):
            raise ValueError("expected 'package.module:function'")
        return v


ParserSpec = Annotated[
    RegexParser | BoxedParser | JsonParser | VerdictParser | LogprobParser | TargetParser, Field(discriminator="type")
]


# ---------------------------------------------------------------- aggregation, position, failure


class AggregateSpec(Strict):
    """How the n samples of an item vote. Failed samples are skipped; all failed -> None."""

    type: Literal["mean", "median", "sum", "majority", "meta"] = "mean"
    meta_judge: str | None = None
    """(meta) judge spec that scores each critique (pointwise over the critique text)."""
    top_k: int = Field(1, ge=1)
    """(meta) only the k critiques the meta judge rates highest vote."""

    @model_validator(mode="after")
    def _meta(self) -> AggregateSpec:
        if self.type == "meta" and not self.meta_judge:
            raise ValueError("aggregate type 'meta' needs meta_judge: a judge spec that rates critiques")
        return self

    @field_validator("meta_judge")
    @classmethod
    def _exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_file(v, info, "judges")


class PositionSpec(Strict):
    """Position-bias control."""

    swap: bool = False
    """(pairwise) judge both presentation orders and combine them."""
    combine: Literal["verdict", "margin"] = "margin"
    """(pairwise, swap) ``verdict``: agreeing verdicts win, else ``on_inconsistent``; ``margin``:
    sum the preference margins of both orders (log-odds with the logprob parser, +-1/0 otherwise)."""
    on_inconsistent: Literal["tie", "mask"] = "tie"
    """(pairwise, swap, combine=verdict) what disagreeing orders yield."""
    shuffle: bool = False
    """(listwise) every sample sees the responses in a new order; scores are mapped back."""


class FailureSpec(Strict):
    """What happens when a sample cannot be parsed."""

    retries: int = Field(1, ge=0)
    """Failed samples are re-sampled (new seed) this many times, then masked (score None)."""
    retry_temperature: float = Field(0.7, ge=0)
    """Lowest temperature a retry samples at: a greedy judge's retry would repeat its failure."""


class JudgeLimits(Strict):
    """How long one call of this judge may take and how many may be in flight at once.

    A call is what ``grm run`` sends a judge at a time (the groups of one rollout chunk) or one
    ``grm eval`` batch. Its deadline, unless ``deadline_s`` fixes it, grows linearly with the samples
    it judges (each response; each group for a listwise judge; each pair for a pairwise one):
    ``overhead_s + samples x (prompts x seconds_per_prompt + tokens x seconds_per_token)``, where
    ``prompts`` is the judge prompts one sample needs (2 for a swapped pairwise judge, +1 for a
    principles stage) and ``tokens`` the most it may generate (views x n x (1 + retries) x
    max_new_tokens, plus the principles stage; a logprob parser never retries, and with
    ``critique: false`` generates no critique; a meta judge's passes are not counted). Linear is an
    upper bound: batched engines are faster per sample in bigger calls. ``grm.judges.limits``
    computes it.

    Defaults are a deadline for a hang, not for a slow judge: on the 2-core reference CPU (fp32,
    batched) Qwen2.5-Coder-1.5B took about 0.15 s per critique token per sample and 6-7 s per judge
    prompt read (pairwise-rules-cot-logprob 41.2 s/pair vs pairwise-logprob 12.6 s/pair, README), and
    SmolLM2-135M 0.03 s/token; the defaults leave 3x over the 1.5B model. On GPUs lower them
    (e.g. ``seconds_per_token: 0.02``) or set ``deadline_s``.
    """

    deadline_s: float | None = Field(None, gt=0)
    """Seconds one call may take, whatever its size; None derives it from the call's size (above).
    Wins over the pipeline's ``faults.judge_timeout_s``, which wins over the derived deadline."""
    overhead_s: float = Field(60.0, ge=0)
    """Seconds every derived deadline starts from (scheduling, a restarted actor, a reference pass
    queued on the judge's pool)."""
    seconds_per_prompt: float = Field(20.0, ge=0)
    """Seconds allowed per judge prompt read (prefill of the rendered prompt, score readings)."""
    seconds_per_token: float = Field(0.5, ge=0)
    """Seconds allowed per token the judge may generate for a sample (see above)."""
    max_concurrent_calls: int = Field(1, ge=1)
    """Calls of this judge in flight at once in ``grm run``; more wait, in order, and their deadline
    starts when they are issued. A judge actor runs one call at a time, so with more than 1 the
    extra calls queue inside the actor with their deadline already running."""


class GuardSpec(Strict):
    """Judge input guard: what a judged response (pointwise ``response``, pairwise and listwise
    ``responses``) may do to the judge's prompt. ``grm.judges.guard`` applies it.

    Length, always on: a response that would overflow the judge model's context window is cut to
    its head and tail around a visible ``[... N tokens truncated ...]`` marker, and counted in
    ``JudgeResult.truncated``. Fencing, opt-in (``fence``): responses are shown as data.
    """

    max_response_tokens: int | None = Field(None, ge=1)
    """Most judge tokens a response keeps (per response). None: whatever fits, which the engine
    tells: the model's context window (``max_position_embeddings``) less the rendered prompt without
    the responses, ``sampling.max_new_tokens`` and a small reserve, shared among the responses
    shown (a short one keeps all of its length, long ones split the rest)."""
    max_response_chars: int = Field(32_000, ge=1)
    """Characters a response keeps when the engine cannot count tokens (no local tokenizer, e.g. a
    server's chat endpoint) or knows no context window and ``max_response_tokens`` is unset."""
    fence: bool = False
    """Wrap every judged response in tags carrying a per-item nonce (tag-like text inside the response
    is escaped, so it cannot close them) and tell the judge, before its instructions, that text
    inside the tags is data to judge and instructions in it must be ignored. Works with every
    template; off renders the prompt exactly as the template alone."""


class NormalizeSpec(Strict):
    """Map raw scores from [low, high] onto [0, 1] for rewards (clipped)."""

    low: float
    high: float

    @model_validator(mode="after")
    def _order(self) -> NormalizeSpec:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be greater than low ({self.low})")
        return self


class PrinciplesSpec(Strict):
    """SPCT principles stage: generate weighted principles from the prompt first."""

    template: str
    """Jinja2 template (path or builtin:NAME) rendering the principles request."""
    sampling: JudgeSampling = JudgeSampling(n=1, temperature=0.0, max_new_tokens=160)

    @field_validator("template")
    @classmethod
    def _exists(cls, v: str, info: ValidationInfo) -> str:
        return check_file(v, info, "prompts")


class RuleSpec(Strict):
    """A deterministic verifier with the judge interface."""

    type: Literal["numeric-answer", "exact-match", "regex-format", "length"]
    pattern: str | None = None
    """(regex-format) the response must match this regex (search) to score 1."""
    tolerance: float = 1e-6
    """(numeric-answer) absolute tolerance when comparing with the reference."""
    case_sensitive: bool = False
    """(exact-match) compare case-sensitively."""
    target_tokens: int | None = None
    """(length) responses up to this many whitespace tokens score 1, longer decay linearly to 0 at 2x."""

    @model_validator(mode="after")
    def _needs(self) -> RuleSpec:
        if self.type == "regex-format" and not self.pattern:
            raise ValueError("regex-format needs pattern")
        if self.type == "length" and not self.target_tokens:
            raise ValueError("length needs target_tokens")
        return self


class ExampleOutput(Strict):
    """An example judge output and the parse it must produce (checked by ``grm judge lint``)."""

    output: str
    expect: float | str | list[float] | None
    """Expected parse: a number, a verdict ('A'/'B'/'tie'), a list (boxed), or null (must fail)."""


class JudgeSpec(Strict):
    """A generative reward model (or a rule verifier when ``mode: rule``)."""

    name: str
    """Name used in rewards, metrics and reports."""
    description: str = ""
    mode: Literal["pointwise", "pairwise", "listwise", "rule"] = "pointwise"
    """pointwise: score each response; pairwise: A vs B; listwise: several responses at once;
    rule: a deterministic verifier (see ``rule``)."""
    model: str | None = None
    """Builtin alias, local model dir or hub id of the judge model (not for rules)."""
    engine: EngineSpec = HFEngineSpec()
    """Engine settings for the judge model."""
    template: str | None = None
    """Jinja2 template (path relative to this file, or builtin:NAME) rendering the judge's user message."""
    system: str | None = None
    """System message for the judge (plain text); None uses the chat template's default."""
    prefill: str | None = None
    """Text the judge's reply starts with (e.g. 'Critique:'); generation continues it."""
    chat: bool = True
    """Render through the model's chat template; False sends the rendered text raw."""
    guard: GuardSpec = GuardSpec()
    """How judged responses enter the prompt: cut to fit the context, optionally fenced as data."""
    principles: PrinciplesSpec | None = None
    """Optional SPCT principles stage, fed to the template as ``principles``."""
    sampling: JudgeSampling = JudgeSampling()
    parser: ParserSpec = RegexParser()
    aggregate: AggregateSpec = AggregateSpec()
    position: PositionSpec = PositionSpec()
    on_failure: FailureSpec = FailureSpec()
    limits: JudgeLimits = JudgeLimits()
    """Per-call deadline and concurrency cap (operational: not part of the spec hash)."""
    normalize: NormalizeSpec | None = None
    """Reward range mapping; default from the parser's range (pairwise: already in [0, 1])."""
    reference: bool = False
    """The template uses the item's reference answer; items without one are refused."""
    rule: RuleSpec | None = None
    """(mode: rule) the verifier."""
    examples: list[ExampleOutput] = []
    """Example outputs with expected parses; ``grm judge lint`` checks the parser against them."""

    @field_validator("template")
    @classmethod
    def _template_exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_file(v, info, "prompts")

    @model_validator(mode="after")
    def _consistent(self) -> JudgeSpec:
        if self.mode == "rule":
            if self.rule is None:
                raise ValueError("mode 'rule' needs a rule: {type: numeric-answer|exact-match|regex-format|length}")
            return self
        if self.rule is not None:
            raise ValueError(f"rule is only for mode 'rule' (mode is '{self.mode}')")
        if not self.model:
            raise ValueError(f"mode '{self.mode}' needs model: a builtin alias, local dir or hub id")
        if not self.template:
            raise ValueError(f"mode '{self.mode}' needs template: a .j2 file")
        p = self.parser.type
        if self.mode == "pairwise" and p not in ("verdict", "logprob", "target"):
            raise ValueError(f"pairwise judges need a verdict or logprob parser, not '{p}'")
        if self.mode == "listwise" and p not in ("boxed", "json", "target"):
            raise ValueError(f"listwise judges need a boxed or json parser, not '{p}'")
        if self.mode == "pointwise" and p == "verdict":
            raise ValueError("a verdict parser only makes sense for pairwise judges")
        if self.aggregate.type == "majority" and self.mode != "pairwise":
            raise ValueError("aggregate 'majority' votes verdicts: pairwise judges only")
        if self.position.swap and self.mode != "pairwise":
            raise ValueError("position.swap is for pairwise judges")
        if self.position.shuffle and self.mode != "listwise":
            raise ValueError("position.shuffle is for listwise judges")
        if p == "logprob" and self.mode == "listwise":
            raise ValueError("the logprob parser scores one response (pointwise) or A vs B (pairwise)")
        cands = getattr(self.parser, "candidates", None) if p == "logprob" else None
        if cands is not None and self.mode == "pairwise" and len(cands) != 2:
            raise ValueError(f"parser.candidates: a pairwise judge reads exactly two (A, B), not {cands}")
        if cands is not None and self.mode == "pointwise":
            not_numbers = [c for c in cands if not _is_number(c)]
            if not_numbers:
                raise ValueError(f"parser.candidates: pointwise candidates are the scores, so numbers; not {not_numbers}")
        return self
