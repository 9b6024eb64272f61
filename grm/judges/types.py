"""What a judge takes (``Sample``) and what it returns (``JudgeResult``), as plain data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from grm.data.trajectory import Trajectory, TrajectoryError
from grm.judges.errors import JudgeError
from grm.judges.parsers import Value

if TYPE_CHECKING:
    from grm.data.prompts import Prompt

Verdict = Literal["1", "2", "tie"]
"""Pairwise outcome in terms of the item's own responses: response 1 wins, response 2 wins, tie."""


@dataclass(frozen=True)
class AnchorAnswer:
    """An answer a pairwise judge compares a group's responses with (``groups.strategy: anchor``):
    the policy's greedy response this step (``source: greedy``) or in an earlier step (``previous``)."""

    text: str
    source: Literal["greedy", "previous"]
    policy_version: int | None
    """Weights version that produced it."""
    step: int | None = None
    """(previous) The step (1-based) whose rollout produced it."""

    def info(self) -> dict[str, Any]:
        """What a comparison against it records in samples.jsonl (its text is recorded once per group)."""
        return {"source": self.source, "policy_version": self.policy_version, "step": self.step}


@dataclass
class Sample:
    """One item to judge.

    pointwise: ``response``; pairwise: ``responses`` of length 2; listwise: ``responses`` (>= 2);
    checklist: ``response``, and ``metadata["checklist"]`` when the checklist comes from the data.
    ``prompt`` is the user's request (or ``messages`` for a conversation; ``prompt`` is then its
    last user turn). ``critique`` is only set for meta judges, which rate another judge's critique.

    A judge of whole episodes gets ``trajectory`` (pointwise) or ``trajectories`` (pairwise: 2,
    listwise: >= 2) instead; ``response``/``responses`` then default to their final answers (''
    for one without), so the input guard, rule verifiers and meta judges read the answers as ever.
    """

    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    response: str | None = None
    responses: list[str] | None = None
    reference: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    critique: str | None = None
    id: str | None = None
    group: str | None = None
    """(in a run) The key of the prompt's group of responses (``s<step>r<round>g<i>``)."""
    anchor: AnchorAnswer | None = None
    """(in a run with ``rollout.greedy_anchor``) The policy's greedy response to this prompt."""
    previous_anchor: AnchorAnswer | None = None
    """(in a run, ``groups.anchor: previous``) The greedy response of an earlier step, if remembered."""
    trajectory: Trajectory | None = None
    """(judging an episode, pointwise) The whole episode; set by a run, or read from a sample file."""
    trajectories: list[Trajectory] | None = None
    """(judging episodes, pairwise and listwise) The episodes compared, in the item's own order."""

    FILE_FIELDS = (
        "prompt",
        "messages",
        "response",
        "responses",
        "reference",
        "metadata",
        "critique",
        "id",
        "trajectory",
        "trajectories",
    )
    """What a sample file's object may hold; ``group`` and the anchors are set by a run, not read."""

    def __post_init__(self) -> None:
        if self.response is None and self.trajectory is not None:
            self.response = self.trajectory.final_answer or ""
        if self.responses is None and self.trajectories is not None:
            self.responses = [t.final_answer or "" for t in self.trajectories]

    @classmethod
    def of_prompt(cls, prompt: Prompt, **fields: Any) -> Sample:
        """The sample of a data prompt: its text, reference and a copy of its metadata, with
        ``fields`` (the response or responses, the id...)."""
        return cls(prompt=prompt.text, reference=prompt.reference, metadata=dict(prompt.metadata), **fields)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "sample") -> Sample:
        if not isinstance(data, dict):
            raise JudgeError(f"{where}: expected a JSON object with prompt/response(s), found {type(data).__name__}")
        unknown = set(data) - set(cls.FILE_FIELDS)
        if unknown:
            raise JudgeError(f"{where}: unknown field(s) {sorted(unknown)}; expected: {', '.join(cls.FILE_FIELDS)}")
        data = dict(data)
        if isinstance(data.get("id"), int) and not isinstance(data["id"], bool):
            data["id"] = str(data["id"])
        for k in ("prompt", "response", "reference", "critique", "id"):
            if data.get(k) is not None and not isinstance(data[k], str):
                raise JudgeError(f"{where}: '{k}' must be a string, found {type(data[k]).__name__}")
        if data.get("responses") is not None and (
            not isinstance(data["responses"], list) or not all(isinstance(r, str) for r in data["responses"])
        ):
            raise JudgeError(f"{where}: 'responses' must be a list of strings")
        messages = data.get("messages")
        if messages is not None and not (
            isinstance(messages, list)
            and all(isinstance(m, dict) and all(isinstance(m.get(k), str) for k in ("role", "content")) for m in messages)
        ):
            raise JudgeError(f"{where}: 'messages' must be a list of objects with text 'role' and 'content'")
        if data.get("metadata") is None:
            data.pop("metadata", None)
        elif not isinstance(data["metadata"], dict):
            raise JudgeError(f"{where}: 'metadata' must be an object, found {type(data['metadata']).__name__}")
        _read_trajectories(data, where)
        s = cls(**data)
        if s.prompt is None and s.messages:
            users = [m.get("content", "") for m in s.messages if m.get("role") == "user"]
            s.prompt = users[-1] if users else ""
        episode = s.trajectory or (s.trajectories[0] if s.trajectories else None)
        if s.prompt is None and episode is not None:
            users = [str(m.get("content") or "") for m in episode.task.messages if m.get("role") == "user"]
            s.prompt = users[-1] if users else ""
        if s.prompt is None:
            raise JudgeError(f"{where}: missing 'prompt' (or 'messages', or a 'trajectory')")
        return s

    def check_for(self, mode: str, needs_reference: bool, where: str = "sample") -> None:
        if mode in ("pointwise", "checklist", "rule") and self.response is None:
            raise JudgeError(f"{where}: a {mode} judge needs 'response'" + (" or 'trajectory'" if mode == "pointwise" else ""))
        if self.trajectory is not None and self.trajectories is not None:
            raise JudgeError(f"{where}: a sample holds 'trajectory' (pointwise) or 'trajectories', not both")
        if self.trajectories is not None and len(self.trajectories) != len(self.responses or []):
            raise JudgeError(
                f"{where}: 'trajectories' and 'responses' differ in length"
                f" ({len(self.trajectories)} vs {len(self.responses or [])})"
            )
        if mode == "pairwise" and (self.responses is None or len(self.responses) != 2):
            raise JudgeError(f"{where}: a pairwise judge needs 'responses' (or 'trajectories') with exactly 2 entries")
        if mode == "listwise" and (self.responses is None or len(self.responses) < 2):
            raise JudgeError(f"{where}: a listwise judge needs 'responses' (or 'trajectories') with at least 2 entries")
        if needs_reference and self.reference is None:
            raise JudgeError(f"{where}: this judge is reference-guided and needs 'reference'")


def _read_trajectories(data: dict[str, Any], where: str) -> None:
    """A sample file's ``trajectory``/``trajectories`` objects read in place (``Trajectory.from_dict``)."""
    try:
        if data.get("trajectory") is not None:
            data["trajectory"] = Trajectory.from_dict(data["trajectory"])
        got = data.get("trajectories")
        if got is not None:
            if not isinstance(got, list):
                raise JudgeError(f"{where}: 'trajectories' must be a list of trajectory objects, found {type(got).__name__}")
            read = []
            for k, t in enumerate(got):
                try:
                    read.append(Trajectory.from_dict(t))
                except TrajectoryError as e:
                    raise JudgeError(f"{where}: trajectories[{k}]: {e}") from None
            data["trajectories"] = read
    except TrajectoryError as e:
        raise JudgeError(f"{where}: trajectory: {e}") from None


@dataclass
class SampleRecord:
    """One judge generation for one item: its raw text and what the parser made of it."""

    view: int
    """0: original order (or the only view); 1: swapped (pairwise); listwise with shuffle: sample index;
    checklist: the question's index, and -1 for the writing of the prompt's checklist."""
    order: list[int]
    """Indices of the item's responses in the order the judge saw them."""
    index: int
    """Sample index within the view (0..n-1)."""
    attempt: int
    text: str
    parsed: Value
    error: str | None
    tokens: int
    finish_reason: str = "stop"
    candidate_logprobs: dict[str, float | None] | None = None
    """(logprob parser) log-probability of each candidate after the score prefix."""
    meta_rating: float | None = None
    """(meta aggregation) the meta judge's rating of this critique."""
    faulty_turn: int | Literal["none"] | None = None
    """(``trajectory.first_faulty_turn``) the turn this critique names as the first faulty one (its
    index in the trajectory's turns, 0-based), ``"none"`` when it says no turn was, None unread."""


@dataclass
class JudgeResult:
    """A judge's verdict on one item. ``masked`` when no sample yielded a usable score."""

    judge: str
    score: float | None = None
    """pointwise: aggregated raw score; pairwise: 1.0 if response 1 wins, 0.0 if 2 wins, 0.5 tie."""
    reward: float | None = None
    """Score mapped onto [0, 1] (``normalize``) — what the RL reward uses."""
    scores: list[float] | None = None
    """listwise: aggregated raw score per response (original order)."""
    rewards: list[float] | None = None
    """listwise: normalised scores per response."""
    verdict: Verdict | None = None
    """pairwise: '1', '2' or 'tie'."""
    margin: float | None = None
    """pairwise: preference for response 1 (summed over orders with swap)."""
    view_margins: list[float | None] | None = None
    """pairwise: preference for response 1 in each order (mapped back)."""
    positional_agreement: bool | None = None
    """pairwise with swap: both orders chose the same winner."""
    principles: str | None = None
    checklist: list[dict[str, Any]] | None = None
    """(checklist judge) per question: ``question``, ``weight`` and ``p_yes`` (P(yes) renormalised
    over yes and no; None: unread, so left out of the score). ``[]``: no checklist was written."""
    comparisons: list[dict[str, Any]] | None = None
    """(pairwise judge inside a group) this response's comparisons: against whom (a response index
    or ``"anchor"``), the swap-combined verdict and margin, both orders' margins, the outcome it
    counted as (None: masked) and the critiques of both orders."""
    details: dict[str, float] | None = None
    """(``constraints`` verifier) outcome per constraint type of the prompt, 1.0 held, 0.0 not
    (e.g. ``{"lowercase": 1.0, "max_words": 0.0}``); the score is 1.0 iff all are 1.0."""
    samples: list[SampleRecord] = field(default_factory=list)
    parse_failures: int = 0
    """Samples whose output could not be parsed (retries included)."""
    one_order_failed: int = 0
    """(pairwise with swap) Comparisons masked because one presentation order failed (after its
    retries) while the other parsed: the surviving order alone is a position-biased reading."""
    judge_directed: int = 0
    """Spans of text aimed at the judge (role lines, verdict tokens, sentences to the grader or
    declaring the response correct) taken out of this item's responses before the judge read them
    (``guard.neutralise``)."""
    truncated: int = 0
    """Judged responses of this item cut to fit the judge's context (``guard``); the judge saw a
    marker where their middle was. With trajectories: their final answers cut so (the guard) plus
    the trajectories shortened to fit (oldest turns left out, long texts cut:
    ``grm.judges.trajectory_view``)."""
    observations_cut: int = 0
    """Observations (tool results, user turns) of this item's trajectories cut to the per-observation
    budget (``trajectory.observation_tokens``/``observation_chars``) before the judge read them."""
    faulty_turn: int | Literal["none"] | None = None
    """(``trajectory.first_faulty_turn``) the first faulty turn the critiques name (0-based index in
    the trajectory's turns): the most named among the final attempts, ties to the earlier turn;
    ``"none"`` when most say no turn was; None when no critique said."""
    tokens: int = 0
    """Tokens generated for this item (all stages, retries included)."""
    seconds: float = 0.0
    """This item's share of the batch's wall time."""
    provenance: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def masked(self) -> bool:
        return self.score is None and self.scores is None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["masked"] = self.masked
        return d
