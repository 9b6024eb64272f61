"""Episodes as rollouts (a pipeline's ``env:``): each prompt row starts ``group_size`` episodes of
the environment, run turn by turn on the policy's engine (``grm.envs.episodes``), and each episode
becomes one ``Rollout`` whose tokens are the whole episode: the first prompt is its prompt, every
later token its completion, with a mask that trains only the tokens the policy sampled.

The rollout's version is the episode's first turn's, so async staleness counts from the episode's
start; its text is the final answer (what a response judge reads); the judges over trajectories
read ``Rollout.trajectory`` (``Sample.trajectory``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from grm.config.pipeline import PipelineSpec
from grm.data.prompts import Prompt
from grm.data.trajectory import Trajectory
from grm.engines.base import Generation, GenerationAborted, GenerationEngine, GenerationRequest, SamplingParams
from grm.envs.agent import Agent, arun_agent_episodes, load_agent
from grm.envs.base import Environment, env_factory
from grm.envs.episodes import EpisodeLimits, EpisodeRunner
from grm.orchestrator.types import Group, Rollout

if TYPE_CHECKING:
    from torch import Tensor

T = TypeVar("T")


class EpisodeRollout:
    """A policy actor's episode runner: the environment factory (loaded once, so a bad class or
    argument fails on the first rollout, naming the spec), the limits and the sampling of a turn,
    and the one event loop every rollout call's episodes run on (``EpisodeService``), so the
    episodes of concurrent calls share the engine's calls (``grm.envs.turn_loop``)."""

    def __init__(
        self,
        cfg: PipelineSpec,
        engine: GenerationEngine,
        tokenizer: Any,
        stop: Sequence[str],
        workers: Sequence[Any] = (),
        hold: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        """``workers``: environment worker actors (``env.pool``) to run the environments on; none:
        in this process. ``hold()``: held around each engine call (the policy actor's model lock:
        no turn is generated while the model trains or syncs)."""
        env = cfg.env
        assert env is not None, "episodes need the pipeline's env: block"
        self.engine = engine if hold is None else LockedEngine(engine, hold)
        self.limits = EpisodeLimits.of(env)
        self.runner = EpisodeRunner(self.engine, tokenizer, self.limits, env.turn_wait_s)
        self.tokenizer = tokenizer
        self.service = EpisodeService()
        self.agent: Agent | None = None
        """(``env: {type: agent}``) the user's agent function, run against the policy endpoint."""
        self.make_env: Callable[[], Environment] | None = None
        """A fresh environment per episode (none for an agent)."""
        if env.is_agent:
            self.agent = load_agent(env.target)
        elif workers:
            from grm.orchestrator.env_workers import remote_envs

            self.make_env = remote_envs(workers)
        else:
            self.make_env = env_factory(env.target, env.kwargs)
        r = cfg.rollout
        self.sampling = SamplingParams(
            n=1, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens, stop=tuple(stop)
        )


class LockedEngine:
    """An engine whose ``generate`` runs inside ``hold()``; everything else is the engine's."""

    def __init__(self, engine: GenerationEngine, hold: Callable[[], AbstractContextManager[Any]]) -> None:
        self.engine, self.hold = engine, hold

    def generate(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[Generation]:
        with self.hold():
            return self.engine.generate(requests, sampling)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class EpisodeService:
    """One event loop in a daemon thread that runs every rollout call's episodes: a call (each in
    a thread of the actor's ``episodes`` concurrency group) hands its coroutine over and waits,
    checking whether it was cancelled (a stopping run), which ends its episodes at their next token."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="grm-episodes", daemon=True).start()

    def run(self, make: Callable[[Callable[[], bool]], Coroutine[Any, Any, T]], cancelled: Callable[[], bool]) -> T:
        """``make(abort)``'s result, run on the loop; ``abort()`` turns True once ``cancelled()``
        does, and the call then raises ``GenerationAborted``."""
        stop = threading.Event()
        future = asyncio.run_coroutine_threadsafe(make(stop.is_set), self.loop)
        while not future.done():
            concurrent.futures.wait([future], timeout=0.2)
            if not future.done() and cancelled():
                stop.set()
                future.cancel()
                raise GenerationAborted()
        return future.result()


def run_groups(
    er: EpisodeRollout, prompts: Sequence[Prompt], keys: Sequence[str], n: int, seed: int, abort: Callable[[], bool]
) -> list[Group]:
    """``n`` episodes per prompt as one group per prompt keyed by ``keys``, on the rollout's event
    loop beside any other call's episodes; ``abort()`` (polled) ends them."""
    rows = [p.row or {"prompt": p.text} for p in prompts for _ in range(n)]
    ids = [f"{key}/{k}" for key in keys for k in range(n)]
    # one seed per episode: the engine seeds a sample by (seed, sample index, prompt), and every
    # episode of a group starts from the same prompt as sample 0
    seeds = [seed + k for _ in keys for k in range(n)]
    version = er.engine.version  # an episode that ended before its first turn has no turn's

    def episodes(stop: Callable[[], bool]) -> Coroutine[Any, Any, list[Trajectory]]:
        sampling = er.sampling.replace(seed=seed, abort=stop)
        if er.agent is not None:
            return arun_agent_episodes(er.engine, er.tokenizer, er.agent, rows, sampling, er.limits, seeds=seeds, ids=ids)
        assert er.make_env is not None
        return er.runner.arun(er.make_env, rows, sampling, seeds=seeds, ids=ids)

    trajectories = er.service.run(episodes, abort)
    groups = [Group(key, []) for key in keys]
    for i, t in enumerate(trajectories):
        g, p = groups[i // n], prompts[i // n]
        g.rollouts.append(as_rollout(t, ids[i], p, g.key, version))
    return groups


def as_rollout(t: Trajectory, rid: str, prompt: Prompt, group: str, version: int) -> Rollout:
    """One episode as a rollout: its first prompt, then every later token as the completion, the
    mask 1 on the policy's own tokens only; an episode that generated nothing has an empty completion."""
    view = t.training_view()
    cut = view.prompt_len
    last = next((turn for turn in reversed(t.turns) if turn.role == "assistant"), None)
    return Rollout(
        id=rid,
        prompt=prompt,
        group=group,
        prompt_ids=view.token_ids[:cut],
        token_ids=view.token_ids[cut:],
        text=t.final_answer if t.final_answer is not None else (last.content if last is not None else ""),
        logprobs=view.old_logprobs[cut:],
        finish_reason=(last.finish_reason or "stop") if last is not None else "stop",
        version=first if (first := t.first_version) is not None else version,
        mask=view.loss_mask[cut:],
        trajectory=t,
        token_versions=view.versions[cut:],
    )


def episode_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """(an ``env:`` run) ``env/<signal>``: the mean of each environment signal over the step's
    episodes (e.g. ``env/success``); ``env/turns``: mean policy turns; ``env/end/<reason>``: the
    share of episodes that ended for each reason; ``env/engine_busy``: the share of the rollout's
    episode calls the policy's engine spent generating (the rest it waited on environments). None of
    these reach a judge."""
    if not trajectories:
        return {}
    n = len(trajectories)
    out: dict[str, float] = {"env/turns": sum(sum(t.role == "assistant" for t in tr.turns) for tr in trajectories) / n}
    for name in sorted({k for tr in trajectories for k in tr.signals}):
        vals = [tr.signals[name] for tr in trajectories if name in tr.signals]
        out[f"env/{name}"] = sum(vals) / len(vals)
    busy = [float(tr.metadata["engine_busy"]) for tr in trajectories if "engine_busy" in tr.metadata]
    if busy:
        out["env/engine_busy"] = sum(busy) / len(busy)
    for reason in sorted({tr.end_reason or "unknown" for tr in trajectories}):
        out[f"env/end/{reason}"] = sum((tr.end_reason or "unknown") == reason for tr in trajectories) / n
    return out


def first_faulty_turns(groups: Sequence[Group]) -> dict[str, int]:
    """Sample id -> the earliest faulty turn (an index in its trajectory's turns) any judge named
    (``trajectory.first_faulty_turn``); episodes with none named are left out."""
    out: dict[str, int] = {}
    for g in groups:
        for k, r in enumerate(g.rollouts):
            named = [res[k].faulty_turn for res in g.judged.values() if res[k] is not None]
            turns = [t for t in named if isinstance(t, int)]
            if r.trajectory is not None and turns:
                out[r.id] = min(turns)
    return out


def process_credit(
    advantages: Tensor, loss_mask: Tensor, ids: Sequence[str], groups: Sequence[Group]
) -> tuple[Tensor, dict[str, list[float]]]:
    """Token-level advantages ``[B, L-1]`` from sequence-level ``advantages`` ``[B]`` (or token-level
    ones) for ``env.credit: process``: in an episode whose judge named a first faulty turn, the policy
    turns before it keep only a positive advantage (a failure is not blamed on them) while the faulty
    turn and the ones after it take the episode's advantage as it is; every other row is unchanged.
    Also each credited episode's per-turn credit (mean advantage over each turn's trained tokens; 0.0
    for turns the policy did not speak), for samples.jsonl (``turn_credit``).

    Target position ``p - 1 + j`` of a row whose prompt has ``p`` tokens predicts its completion
    token ``j`` (``TrainBatch.from_sequences``)."""
    import torch

    adv = advantages[:, None].expand_as(loss_mask).clone() if advantages.dim() == 1 else advantages.clone()
    faulty = first_faulty_turns(groups)
    episode = {r.id: r for g in groups for r in g.rollouts}
    credit: dict[str, list[float]] = {}
    for b, rid in enumerate(ids):
        k = faulty.get(rid)
        t = episode[rid].trajectory if rid in episode else None
        if k is None or t is None:
            continue
        view = t.training_view()
        turn_of = torch.tensor(view.turn_index[view.prompt_len :], dtype=torch.long)
        start = len(episode[rid].prompt_ids) - 1
        cols = slice(start, start + len(turn_of))
        before = (turn_of < k) & (turn_of >= 0)
        row = adv[b, cols]
        adv[b, cols] = torch.where(before, row.clamp(min=0.0), row)
        mask = loss_mask[b, cols]
        credit[rid] = [
            float((adv[b, cols] * mask)[turn_of == i].sum() / mask[turn_of == i].sum().clamp(min=1.0))
            for i in range(len(t.turns))
        ]
    return adv, credit
