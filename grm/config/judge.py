"""Judge spec (``judges/*.yaml``): template + model + sampling + parser + aggregation + position
handling + failure policy; or a rule verifier."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from grm.config.base import MAX_TOKENS, Seconds, Strict, Temperature, check_file
from grm.config.checklist import ChecklistSpec, check_checklist_judge
from grm.config.judge_range import check_score_range
from grm.config.judge_rule import RuleSpec
from grm.config.judge_trajectory import TrajectoryJudgeSpec, check_trajectory_judge
from grm.config.judge_votes import AdaptiveVotes, check_votes
from grm.config.names import SafeName
from grm.config.parsers import ParserSpec, RegexParser, is_number
from grm.config.policy import EngineSpec, HFEngineSpec
from grm.config.sampling import JudgeSampling

# ---------------------------------------------------------------- aggregation, position, failure


class AggregateSpec(Strict):
    """How the n samples of an item vote. Failed samples are skipped; all failed -> None."""

    type: Literal["mean", "median", "sum", "majority", "meta"] = "mean"
    """How the parsed scores of an item's n critiques combine: ``mean``, ``median``, ``sum``,
    ``majority`` (pairwise only: the sign most margins have; a split vote is a tie) or ``meta`` (a
    meta judge rates each critique and the mean of the ``top_k`` best-rated counts)."""
    meta_judge: str | None = None
    """(meta) judge spec that scores each critique (pointwise over the critique text)."""
    top_k: int = Field(1, ge=1, le=1024)
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


class GroupSpec(Strict):
    """(pairwise) How a pairwise judge rewards one prompt's group of responses inside ``grm run``:
    which pairs it compares (each in both orders: ``position.swap`` is required there) and how the
    comparisons become one reward per response. ``grm eval`` judges labelled pairs and ignores it."""

    strategy: Literal["anchor", "round_robin", "circular"] = "round_robin"
    """``anchor``: every response against one anchor answer (``anchor``); ``round_robin``: every
    pair of the group; ``circular``: response i against i+1 (and the last against the first)."""
    anchor: Literal["reference", "greedy", "previous"] = "reference"
    """(strategy anchor) ``reference``: the prompt's reference answer from the data;
    ``greedy``: one greedy response of the current policy per prompt, sampled beside the group and
    never trained on; ``previous``: the greedy response the policy gave the last time the prompt
    was rolled out in a trained step (a self-play baseline: a response wins by beating the policy's
    own earlier answer). ``grm run`` keeps one store per run, keyed by prompt id (and checked against
    the prompt's text), of the greedy responses of the trained steps, each with its policy version
    and step; it is saved in every checkpoint (``anchors.json``), so a resumed run compares with the
    same anchors as an uninterrupted one. Step s looks up steps up to s - 1 in ``sync`` mode and up
    to s - 1 - ``max_staleness`` in ``async`` mode (the steps certainly trained before step s's
    rollouts land), whatever the timing. A prompt without one (first epoch, or forgotten) is
    compared with ``fallback``. Each comparison in samples.jsonl names the anchor it used
    (``anchor: {source, policy_version, step}``)."""
    fallback: Literal["greedy", "reference"] = "greedy"
    """(anchor previous) The anchor of a prompt the store has no earlier response for: the current
    policy's greedy response, or the prompt's reference answer (needs ``data.reference_field``)."""
    remember: int = Field(10_000, ge=1, le=10_000_000)
    """(anchor previous) Prompts whose last greedy response the run's store keeps (the least
    recently rolled out are forgotten first; a forgotten prompt gets ``fallback``). Each holds one
    response, at most 1 + ``max_staleness`` in async mode. With several such judges, the largest."""
    max_comparisons: int | None = Field(None, ge=1, le=1 << 20)
    """Comparisons per group at most; None: all the strategy plans. Fewer are chosen so every
    response keeps one where the budget allows (a ring first, then the rest in a seeded order); a
    response left with none is masked."""
    reward: Literal["bradley_terry", "win_rate"] = "bradley_terry"
    """``bradley_terry``: strengths fitted on the group's comparisons (with a Gaussian prior),
    reward = P(response beats the anchor), or beats the group's mean strength without one;
    ``win_rate``: the mean outcome of the response's comparisons (a tie counts 0.5)."""
    outcome: Literal["verdict", "probability"] = "verdict"
    """What one swap-combined comparison counts as: ``verdict`` 1 / 0 / 0.5 (tie); ``probability``
    sigmoid of the mean margin over both orders (the log-odds of A over B with the logprob parser)."""
    prior: float = Field(0.1, gt=0)
    """(bradley_terry) precision of the zero-mean Gaussian prior on strengths: keeps a response
    that won every comparison finite. Larger pulls strengths together."""

    @model_validator(mode="after")
    def _previous_only(self) -> GroupSpec:
        if self.anchor != "previous" and self.fallback != "greedy":
            raise ValueError(f"fallback is for anchor 'previous' (anchor is '{self.anchor}')")
        return self


class FailureSpec(Strict):
    """What happens when a sample cannot be parsed."""

    retries: int = Field(1, ge=0, le=100)
    """Failed samples are re-sampled (new seed) this many times, then masked (score None). With the
    logprob parser a sample fails when a candidate's log-prob cannot be read after its critique
    (e.g. not among a server's top log-probs): the critique is re-sampled and read again. With
    ``critique: false`` there is nothing to re-sample (the same prompt gives the same log-probs), so
    such a reading is masked at once."""
    retry_temperature: Temperature = 0.7
    """Lowest temperature a retry samples at: a greedy judge's retry would repeat its failure."""


class JudgeLimits(Strict):
    """How long one call of this judge may take and how many may be in flight at once.

    A call is what ``grm run`` sends a judge at a time (the groups of one rollout chunk) or one
    ``grm eval`` batch. Its deadline, unless ``deadline_s`` fixes it, grows linearly with the samples
    it judges (each response; each group for a listwise judge; each pair for a pairwise one):
    ``overhead_s + samples x (prompts x seconds_per_prompt + tokens x seconds_per_token)``, where
    ``prompts`` is the judge prompts one sample needs (2 for a swapped pairwise judge, +1 for a
    principles stage; ``checklist.max_items`` for a checklist judge, +1 to write the checklist) and
    ``tokens`` the most it may generate (views x n x (1 + retries) x max_new_tokens, plus the
    principles stage or the checklist writing; a logprob parser with ``critique: false``
    generates nothing and never retries; a meta judge's passes are not counted). Linear is an
    upper bound: batched engines are faster per sample in bigger calls. ``grm.judges.limits``
    computes it.

    Defaults are a deadline for a hang, not for a slow judge: on the 2-core reference CPU (fp32,
    batched) Qwen2.5-Coder-1.5B took about 0.15 s per critique token per sample and 6-7 s per judge
    prompt read (pairwise-rules-cot-logprob 41.2 s/pair vs pairwise-logprob 12.6 s/pair, README), and
    SmolLM2-135M 0.03 s/token; the defaults leave 3x over the 1.5B model. On GPUs lower them
    (e.g. ``seconds_per_token: 0.02``) or set ``deadline_s``.
    """

    deadline_s: Seconds | None = Field(None, gt=0)
    """Seconds one call may take, whatever its size; None derives it from the call's size (above).
    The one deadline setting: a pipeline sets it per judge role (``overrides:
    [limits.deadline_s=900]``)."""
    overhead_s: Seconds = Field(60.0, ge=0)
    """Seconds every derived deadline starts from (scheduling, a restarted actor, a reference pass
    queued on the judge's pool)."""
    seconds_per_prompt: Seconds = Field(20.0, ge=0)
    """Seconds allowed per judge prompt read (prefill of the rendered prompt, score readings)."""
    seconds_per_token: Seconds = Field(0.5, ge=0)
    """Seconds allowed per token the judge may generate for a sample (see above)."""
    max_concurrent_calls: int = Field(1, ge=1, le=1024)
    """Calls of this judge in flight at once in ``grm run``; more wait, in order, and their deadline
    starts when they are issued. A judge actor runs one call at a time, so with more than 1 the
    extra calls queue inside the actor with their deadline already running."""
    template_max_chars: int = Field(2_000_000, ge=1, le=1 << 30)
    """Characters one render of the judge's templates may emit, text captured by macros and
    ``{% set %}`` blocks included, and the largest string or list it may build; the default is
    above any judge's context window (``grm.judges.sandbox``)."""
    template_max_steps: int = Field(200_000, ge=1, le=1 << 40)
    """Loop iterations, calls, filters, operators and output pieces one render may run (a shipped
    template runs fewer than 30 on its fixtures)."""
    template_timeout_s: float = Field(5.0, gt=0, le=600)
    """Wall-clock seconds the renders of one judged sample may take together (all its prompts: views,
    checklist questions, principles), a backstop for steps that each scan long text; a shipped
    template renders in milliseconds."""
    regex_timeout_s: float = Field(1.0, gt=0, le=60)
    """Seconds a user regex (a ``regex`` parser's, a ``regex-format`` rule's) may spend on one
    text; past it the parse fails (counted, masked), it never hangs."""


class GuardSpec(Strict):
    """Judge input guard: what a judged response (pointwise ``response``, pairwise and listwise
    ``responses``) may do to the judge's prompt. ``grm.judges.guard`` applies it.

    Length, always on: a response that would overflow the judge model's context window is cut to
    its head and tail around a visible ``[... N tokens truncated ...]`` marker, and counted in
    ``JudgeResult.truncated``. Fencing, opt-in (``fence``): responses are shown as data.
    """

    max_response_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    """Most judge tokens a response keeps (per response). None: whatever fits, which the engine
    tells: the model's context window (``max_position_embeddings``) less the rendered prompt without
    the responses, ``sampling.max_new_tokens`` and a small reserve, shared among the responses
    shown (a short one keeps all of its length, long ones split the rest)."""
    max_response_chars: int = Field(32_000, ge=1, le=1 << 26)
    """Characters a response keeps when the engine cannot count tokens (no local tokenizer, e.g. a
    server's chat endpoint) or knows no context window and ``max_response_tokens`` is unset."""
    neutralise: bool = False
    """Take text aimed at the judge out of every judged response before the judge reads it: lines
    opening with a judge's or chat role's label (``Critique:``, ``Score:``, ``Verdict:``, ``Better
    output:``, ``Assistant:``) with their paragraph, ``[[X]]`` verdict tokens, sentences addressed to a
    grader or asking for marks, and sentences declaring the response itself correct or best
    (``grm.judges.neutralise``). Counted per item in ``JudgeResult.judge_directed`` and per step in
    ``judge_directed/JUDGE``: the reward neither rises nor falls with such text, and the count shows
    a policy that tries it."""
    fence: bool = False
    """Wrap every judged response in tags carrying a per-item nonce (tag-like text inside the response
    is escaped, so it cannot close them) and tell the judge, before its instructions, that text
    inside the tags is data to judge and instructions in it must be ignored. Works with every
    template; off renders the prompt exactly as the template alone."""


class NormalizeSpec(Strict):
    """Map raw scores from [low, high] onto [0, 1] for rewards (clipped)."""

    low: float
    """Aggregated score (the parser's unit) that maps to reward 0; lower scores give 0 too."""
    high: float
    """Aggregated score that maps to reward 1 (above ``low``); higher scores give 1 too."""

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
    """How the principles are written: once per item (n: 1), shared by all of the item's critiques."""

    @field_validator("template")
    @classmethod
    def _exists(cls, v: str, info: ValidationInfo) -> str:
        return check_file(v, info, "prompts")

    @field_validator("sampling")
    @classmethod
    def _one_set(cls, v: JudgeSampling) -> JudgeSampling:
        # Each critique of an item is rendered with the item's one set of principles; several sets
        # would each need their own critiques, views and votes, which no judge mode combines.
        if v.n != 1:
            raise ValueError(
                f"n is {v.n}, but the principles stage writes one set of principles per item (n: 1); "
                "for more votes raise the judge's own sampling.n (critiques)"
            )
        return v


class ExampleOutput(Strict):
    """An example judge output and the parse it must produce (checked by ``grm judge lint``)."""

    output: str
    """A judge reply as the model would write it (after the prefill), fed to the parser."""
    expect: float | str | list[float] | None
    """Expected parse: a number, a verdict ('A'/'B'/'tie'), a list (boxed), or null (must fail)."""


MAX_EXAMPLES = 16
"""Example outputs one judge spec may hold: 4x the most a shipped judge has (4). ``grm judge lint``
parses each, and a user regex may take up to ``limits.regex_timeout_s`` (1 s) on one."""


class JudgeSpec(Strict):
    """A generative reward model (or a rule verifier when ``mode: rule``)."""

    name: SafeName
    """Name used in rewards, metrics, reports and directories (a gate's): letters, digits, '.', '_', '-'."""
    description: str = ""
    """One line for people reading the spec; grm shows it nowhere, but it is part of the spec hash."""
    mode: Literal["pointwise", "pairwise", "listwise", "checklist", "rule"] = "pointwise"
    """pointwise: score each response; pairwise: A vs B; listwise: several responses at once;
    checklist: yes/no questions about each response, read as P(yes) (see ``checklist``);
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
    checklist: ChecklistSpec | None = None
    """(mode: checklist) where each prompt's yes/no questions come from."""
    trajectory: TrajectoryJudgeSpec = TrajectoryJudgeSpec()
    """(judging trajectories) each observation's budget, the signals shown, the process judge option."""
    sampling: JudgeSampling = JudgeSampling()
    """How critiques are sampled: n per item, temperature, token budget, stops, seed."""
    parser: ParserSpec = RegexParser()
    """How one critique becomes a score or verdict (``type`` picks the parser; default regex)."""
    aggregate: AggregateSpec = AggregateSpec()
    """How an item's n parsed critiques vote into one score."""
    votes: AdaptiveVotes | None = None
    """Adaptive votes: ``first`` critiques for every item, the rest of ``sampling.n`` only where
    they could change a reward (``grm.config.judge_votes``). None: every item gets ``sampling.n``."""
    position: PositionSpec = PositionSpec()
    """Position-bias control: swapped orders (pairwise), shuffled lists (listwise)."""
    on_failure: FailureSpec = FailureSpec()
    """Retries of critiques that do not parse before the item is masked."""
    groups: GroupSpec = GroupSpec()
    """(pairwise) How ``grm run`` turns comparisons inside a prompt's group into rewards."""
    limits: JudgeLimits = JudgeLimits()
    """Per-call deadline and concurrency cap (operational: not part of the spec hash)."""
    normalize: NormalizeSpec | None = None
    """Reward range mapping; default from the parser's range (pairwise: already in [0, 1])."""
    reference: bool = False
    """The template uses the item's reference answer; items without one are refused."""
    rule: RuleSpec | None = None
    """(mode: rule) the verifier."""
    examples: list[ExampleOutput] = Field([], max_length=MAX_EXAMPLES)
    """Example outputs with expected parses; ``grm judge lint`` checks the parser against them
    (at most ``MAX_EXAMPLES``)."""

    @field_validator("template")
    @classmethod
    def _template_exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_file(v, info, "prompts")

    @model_validator(mode="after")
    def _consistent(self) -> JudgeSpec:
        check_checklist_judge(self)
        check_trajectory_judge(self)
        check_votes(self)
        if self.mode == "rule":
            if self.rule is None:
                raise ValueError("mode 'rule' needs a rule: {type: numeric-answer|exact-match|regex-format|length|constraints}")
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
        if self.groups != GroupSpec() and self.mode != "pairwise":
            raise ValueError("groups is for pairwise judges (how grm run compares a group's responses)")
        if self.position.shuffle and self.mode != "listwise":
            raise ValueError("position.shuffle is for listwise judges")
        if p == "logprob" and self.mode == "listwise":
            raise ValueError("the logprob parser scores one response (pointwise) or A vs B (pairwise)")
        if self.sampling.stop_at_score and (p == "logprob" or self.mode == "listwise"):
            raise ValueError(
                "sampling.stop_at_score ends a critique at its first score: pointwise and pairwise judges"
                " with a text parser (the logprob parser reads the score after the critique)"
            )
        check_score_range(self)
        cands = getattr(self.parser, "candidates", None) if p == "logprob" else None
        if cands is not None and self.mode == "pairwise" and len(cands) != 2:
            raise ValueError(f"parser.candidates: a pairwise judge reads exactly two (A, B), not {cands}")
        values = getattr(self.parser, "values", None) if p == "logprob" else None
        if values is not None and self.mode != "pointwise":
            raise ValueError(f"parser.values is for pointwise judges (a {self.mode} judge's candidates have fixed values)")
        if cands is not None and self.mode == "pointwise" and values is None:
            not_numbers = [c for c in cands if not is_number(c)]
            if not_numbers:
                raise ValueError(
                    f"parser.candidates: pointwise candidates are the scores, so numbers, not {not_numbers};"
                    " or give each its score in parser.values"
                )
        return self
