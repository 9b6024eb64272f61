"""The GenerationEngine protocol and the plain data it exchanges (no torch here)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from grm.base import GrmError

Message = dict[str, str]


TokenCount = Annotated[int, Field(ge=0, le=1 << 40)]
"""A token count a server reports (usage, prompt length): above 2^40 is no count any server makes,
and summed into a run's cost it would swamp every other; such a reply is refused as malformed."""


class EngineError(GrmError):
    """A request the server refused or kept failing, or an engine that cannot start; the message
    says which and why."""


class EngineRefused(EngineError):
    """The server answered this request with a client error (a 4xx other than 429: a prompt over its
    context, say), not retried. The request's own fault once the server has answered others; before
    that it may be the configuration's (a wrong URL, model or key)."""


class EngineSetupError(EngineError):
    """An engine that cannot be built from its spec (a key variable unset, a tokenizer that does not
    load): no request was sent, so no retry or masking can help; the caller stops with the message."""


class GenerationAborted(Exception):
    """``SamplingParams.abort`` returned True: the caller no longer wants this call's result."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` is greedy decoding."""

    n: int = 1
    """Samples per request."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    """Generation ends when the text contains one of these; the text is cut before it."""
    seed: int | None = None
    """Sample j of a request draws from a generator seeded with (seed, j): the same output
    whatever else is in the batch. None draws from torch's global generator."""
    stop_when: Callable[[str], bool] | None = field(default=None, compare=False)
    """A row ends once this returns True on its text so far (kept whole): a judge's critique once
    its score is read (``sampling.stop_at_score``). The hf engine checks it after every token;
    server engines generate to their own end and leave it unchecked."""
    abort: Callable[[], bool] | None = field(default=None, compare=False)
    """Checked before every generated token by the hf engine: True ends the call with
    ``GenerationAborted``. A stopping run cancels the rollout in flight, whose result nobody will
    read, so its checkpoint need not wait for it. Server engines leave it unchecked."""

    def replace(self, **kw: Any) -> SamplingParams:
        data = {**self.__dict__, **kw}
        if "stop" in kw and kw["stop"] is not None:
            data["stop"] = tuple(kw["stop"])
        return SamplingParams(**data)


@dataclass
class GenerationRequest:
    """One prompt: chat ``messages`` (the engine applies the model's chat template), raw ``text``,
    or exact prompt ``token_ids``.

    ``continue_final`` leaves the last (assistant) message open so generation continues it, e.g.
    a prefilled ``"Critique:"``.
    """

    messages: list[Message] | None = None
    text: str | None = None
    continue_final: bool = False
    seed: int | None = None
    """Overrides ``SamplingParams.seed`` for this request (e.g. a retry of one failed sample)."""
    token_ids: list[int] | None = None
    """The prompt as token ids, used as given (never re-tokenised): a multi-turn episode's context
    is the ids the policy sampled plus the observations' ids, and decoding then re-encoding them
    would drift from what the log-probs were recorded on."""

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.messages, self.text, self.token_ids)) != 1:
            raise ValueError("GenerationRequest needs exactly one of messages=, text= or token_ids=")
        if self.token_ids is not None and self.continue_final:
            raise ValueError("GenerationRequest: continue_final applies to messages, not token_ids")


@dataclass
class Generation:
    """One sampled output."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    """Log-probability of each sampled token under the model (temperature 1, no filtering),
    the quantity importance-sampling corrections need."""
    finish_reason: Literal["stop", "length"]
    version: int
    """Weights version of the engine when this was generated (its first token's, when a weight
    update came while it was generated: ``token_versions``)."""
    prompt_tokens: int = 0
    request_index: int = 0
    sample_index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    completion_tokens: int | None = None
    """Tokens generated when ``token_ids`` is not available (a remote server reports a count)."""
    token_versions: list[int] | None = None
    """The weights version that sampled each of ``token_ids``, when they differ: a generation a
    weight update interrupted went on with the new weights (``schedule.interruptible``). None: every
    token is ``version``'s."""

    @property
    def n_tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else len(self.token_ids)


def chat_request(
    prompt: str,
    system_prompt: str | None = None,
    *,
    seed: int | None = None,
    messages: list[dict[str, str]] | None = None,
) -> GenerationRequest:
    """How a policy is asked a prompt: one user turn, after ``system_prompt`` when the policy spec
    has one (None leaves the chat template's default); or ``messages``, a whole chat given with the
    prompt (a judge's rendered request, ``data.judge_prompts``: a last assistant message, the
    judge's prefill, is continued). The rollout of ``grm run`` and the policy evaluation of
    ``grm eval --policy`` both build requests here, so a policy is evaluated on exactly the text it
    was trained on."""
    if messages:
        chat = [dict(m) for m in messages]
        return GenerationRequest(messages=chat, seed=seed, continue_final=chat[-1]["role"] == "assistant")
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return GenerationRequest(messages=[*system, {"role": "user", "content": prompt}], seed=seed)


class Asked(Protocol):
    """What a policy is asked: a prompt's text, or its whole chat (``grm.data.prompts.Prompt``)."""

    text: str
    messages: list[dict[str, str]] | None


def chat_requests(prompts: Sequence[Asked], system_prompt: str | None) -> list[GenerationRequest]:
    """``chat_request`` of each prompt: what ``grm run``'s rollouts and ``grm eval --policy`` both send."""
    return [chat_request(p.text, system_prompt, messages=p.messages) for p in prompts]


def render_prompt(tokenizer: Any, request: GenerationRequest) -> str:
    """The text a model sees for ``request``: its raw ``text``, its messages through the
    tokenizer's chat template (the last assistant message left open when ``continue_final``), or
    its ``token_ids`` decoded (for display: engines send those ids as they are). The chat template
    comes with the model directory, so it runs bounded (``grm.models.chat_template``)."""
    if request.token_ids is not None:
        return tokenizer.decode(request.token_ids)
    if request.messages is None:
        return request.text or ""
    from grm.models.chat_template import render_chat

    kw = {"continue_final_message": True} if request.continue_final else {"add_generation_prompt": True}
    return render_chat(tokenizer, request.messages, **kw)


@runtime_checkable
class GenerationEngine(Protocol):
    """What the judges and the rollout need from a backend."""

    model_id: str
    version: int

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        """Returns ``len(requests) * sampling.n`` generations; request i, sample j at ``i * n + j``."""
        ...

    def score_continuations(
        self, requests: Sequence[GenerationRequest], continuations: Sequence[Sequence[str]]
    ) -> list[list[float | None]]:
        """Summed log-probability of each candidate continuation of each request's prompt; None
        where the engine cannot read it (not among a server's top log-probs, or a candidate that
        tokenizes to nothing). Never a stand-in number: the judge masks such a reading."""
        ...

    def update_weights(self, state_dict: dict[str, Any], version: int) -> None: ...
