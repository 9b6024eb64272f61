"""Single-turn generation on the policy's engine: the chat requests of a step's prompts, their
sampled responses as one ``Group`` per prompt (with the greedy anchor pairwise judges compare
with), and the held-out check's greedy answers. ``PolicyActor`` calls these with its engine held;
an ``env:`` pipeline's episodes go through ``grm.orchestrator.episodes`` instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from grm.orchestrator.types import Group, Rollout

if TYPE_CHECKING:
    from grm.config.pipeline import PipelineSpec
    from grm.config.policy import PolicySpec
    from grm.data.prompts import Prompt


def requests(prompts: Sequence[Prompt], policy: PolicySpec) -> list[Any]:
    """Each prompt's chat request under the policy's system prompt (its own messages when it has them)."""
    from grm.engines.base import chat_requests

    return chat_requests(prompts, policy.system_prompt)


def sample_groups(
    engine: Any,
    cfg: PipelineSpec,
    policy: PolicySpec,
    prompts: Sequence[Prompt],
    keys: Sequence[str],
    n: int,
    seed: int,
    abort: Callable[[], bool],
) -> list[Group]:
    """``n`` responses per prompt sampled with ``cfg.rollout``'s settings, one group per prompt keyed
    by ``keys`` (plus a greedy anchor each with ``rollout.greedy_anchor``)."""
    from grm.engines.base import SamplingParams

    r = cfg.rollout
    msgs = requests(prompts, policy)
    sp = SamplingParams(
        n=n,
        temperature=r.temperature,
        top_p=r.top_p,
        max_new_tokens=r.max_new_tokens,
        stop=tuple(policy.generation.stop),
        seed=seed,
        abort=abort,
    )
    gens = engine.generate(msgs, sp)
    groups = [Group(key, []) for key in keys]
    if r.greedy_anchor:  # one more response per prompt for pairwise judges to compare with
        for g, a in zip(groups, engine.generate(msgs, sp.replace(n=1, temperature=0.0)), strict=True):
            g.anchor = a.text
    encoded = [engine.encode(m) for m in msgs]
    for g in gens:
        grp = groups[g.request_index]
        grp.rollouts.append(
            Rollout(
                id=f"{grp.key}/{len(grp.rollouts)}",
                prompt=prompts[g.request_index],
                group=grp.key,
                prompt_ids=encoded[g.request_index],
                token_ids=g.token_ids,
                text=g.text,
                logprobs=g.logprobs,
                finish_reason=g.finish_reason,
                version=g.version,
                token_versions=g.token_versions,
            )
        )
    return groups


def greedy_answers(
    engine: Any, policy: PolicySpec, prompts: Sequence[Prompt], max_new_tokens: int, abort: Callable[[], bool]
) -> list[str]:
    """One greedy answer per prompt, in order: what the held-out check scores (never trained on)."""
    from grm.engines.base import SamplingParams

    stop = tuple(policy.generation.stop)
    sp = SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens, stop=stop, seed=0, abort=abort)
    out = [""] * len(prompts)
    for g in engine.generate(requests(prompts, policy), sp):
        out[g.request_index] = g.text
    return out
