"""The orchestrator's own data, Ray-free: a rollout, a prompt's group of rollouts with what the judges
made of it, and the work submitted for one step.

Identity, not position: every rollout carries ``id`` = ``<group key>/<k>`` from the moment it is
sampled to its row in the training batch (``TrainBatch.ids``), and judge results and rewards live
on the group that owns the rollouts, so filtering and refilling move whole groups, never indices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from grm.data.prompts import Prompt
from grm.data.trajectory import Trajectory
from grm.judges.cost import JudgeCost
from grm.judges.types import AnchorAnswer, JudgeResult, Sample

if TYPE_CHECKING:
    from ray import ObjectRef
    from torch import Tensor

    from grm.training import TrainBatch


@dataclass
class Rollout:
    """One sampled response and what the rollout engine knew about it."""

    id: str
    """``<group key>/<k>``: stable from rollout to loss row."""
    prompt: Prompt
    group: str
    """Key of the prompt's group within the run (``s<step>r<round>g<i>``)."""
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    logprobs: list[float]
    """Rollout engine's log-prob of each sampled token (behaviour policy)."""
    finish_reason: str
    version: int
    """Policy weights version that sampled it (an episode's: its first turn's, which staleness counts from)."""
    mask: list[int] | None = None
    """(an episode) 1 on each of ``token_ids`` the policy sampled, 0 on the observations and
    template text between its turns, which are context, never trained on; None: all sampled."""
    trajectory: Trajectory | None = None
    """(an episode) The whole episode (``env:``); ``text`` is then its final answer."""
    turn_credit: list[float] | None = None
    """(an episode, ``env.credit: process``) Its mean advantage over each turn's trained tokens."""
    token_versions: list[int] | None = None
    """The policy version that sampled each of ``token_ids`` (-1 on an episode's tokens the policy
    did not sample) when they may differ: an episode's turns, a response a weight sync interrupted
    (``schedule.interruptible``). None: every token is ``version``'s."""

    def sampled_versions(self) -> list[int]:
        """The version of each token the policy sampled (what ``rollout/tokens_lag_K`` counts)."""
        if self.token_versions is not None:
            return [v for v in self.token_versions if v >= 0]
        return [self.version] * (sum(self.mask) if self.mask is not None else len(self.token_ids))

    def sample(self) -> Sample:
        """What a judge scores for this rollout (a whole episode when it is one)."""
        return Sample.of_prompt(self.prompt, response=self.text, id=self.id, group=self.group, trajectory=self.trajectory)


@dataclass
class Group:
    """One prompt's responses and, once judged, each judge's per-response results and the rewards."""

    key: str
    rollouts: list[Rollout]
    judged: dict[str, list[JudgeResult | None]] = field(default_factory=dict)
    """judge name -> one result per rollout, in rollout order (None: masked by a timeout)."""
    rewards: list[float] = field(default_factory=list)
    """Combined reward per rollout; NaN when masked."""
    rewards_before_control: list[float] = field(default_factory=list)
    """The combined rewards before ``algorithm.length_control`` changed them; empty when it is off."""
    anchor: str | None = None
    """A greedy response to the prompt, never trained on, for pairwise judges that compare the
    group with it (``rollout.greedy_anchor``)."""
    previous: dict[str, Any] | None = None
    """The greedy response the policy gave this prompt in an earlier trained step (``text``,
    ``policy_version``, ``step``), for pairwise judges with ``groups.anchor: previous``; None when
    the run's store has none (``grm.orchestrator.anchors``)."""

    @property
    def informative(self) -> bool:
        """Its valid rewards differ, so group-relative advantages are not all zero."""
        return len({r for r in self.rewards if not math.isnan(r)}) > 1

    def samples(self) -> list[Sample]:
        out = [r.sample() for r in self.rollouts]
        greedy = previous = None
        if self.anchor is not None:  # sampled with the group's weights
            greedy = AnchorAnswer(self.anchor, "greedy", self.rollouts[0].version if self.rollouts else None)
        if self.previous is not None:
            p = self.previous
            previous = AnchorAnswer(p["text"], "previous", p.get("policy_version"), p.get("step"))
        for s in out:
            s.anchor, s.previous_anchor = greedy, previous
        return out


def group_rollouts(rollouts: list[Rollout]) -> list[Group]:
    """Rollouts -> groups by key, in first-seen order."""
    out: dict[str, Group] = {}
    for r in rollouts:
        out.setdefault(r.group, Group(r.group, [])).rollouts.append(r)
    return list(out.values())


GroupResults = list[list[JudgeResult | None]]
"""A judge's answer for a list of groups: per group, one result per rollout."""

Judged = tuple[GroupResults, JudgeCost]
"""A judge call's answer and what it cost (``grm.judges.cost.costed``)."""


@dataclass
class JudgeCall:
    """One judge's call over one rollout chunk: waiting for a slot under the judge's concurrency
    cap, in flight (``pending``, a Ray ref), or done (``results``)."""

    judge: str
    chunk: int
    deadline_s: float
    """Seconds the call may take once issued; past it, it is re-issued once, then masked."""
    submitted_at: float | None = None
    """When the call was issued (None while it waits for a slot): its deadline runs from here."""
    pending: ObjectRef | None = None
    results: GroupResults | None = None
    retried: bool = False
    replica: int | None = None
    """Index of the judge replica the call was last issued to (None: a local judge, or not yet issued)."""
    plan: Any = None
    """The critique cache's split of the call (``grm.orchestrator.judge_cache.Plan``): what was
    found, and the samples sent; None when the judge is not cached."""


@dataclass
class Replica:
    """One actor of a judge (``replicas: R``) as the scheduler dispatches to it: ``live`` takes
    calls; ``restarting`` died and is waited for (``probe``, a call that returns once Ray has
    restarted it); ``lost`` died for good (its restarts are spent)."""

    index: int
    state: Literal["live", "restarting", "lost"] = "live"
    items: int = 0
    """Samples it judged over the run: breaks ties between equally busy replicas."""
    probe: ObjectRef | None = None


@dataclass
class StepWork:
    """Everything submitted for one step, filled in as results land."""

    step: int
    prompts: list[Prompt]
    chunks: list[ObjectRef]
    """Rollout refs, one per chunk of prompts."""
    landed: dict[int, list[Group]] = field(default_factory=dict)
    calls: dict[tuple[int, str], JudgeCall] = field(default_factory=dict)
    extra_prompts: int = 0
    """Prompts taken from the stream for refill rounds (dynamic filtering)."""
    rollout_s: float = 0.0
    judge_s: dict[str, float] = field(default_factory=dict)
    judge_errors: dict[str, int] = field(default_factory=dict)
    """judge name -> calls that failed on the judge's model server (``EngineError``: refused, or
    still failing after the engine's retries), each re-issued once, then masked."""
    judge_timeouts: dict[str, int] = field(default_factory=dict)
    """judge name -> calls that ran past their deadline (a re-issued call that times out again counts twice)."""
    replica_items: dict[str, int] = field(default_factory=dict)
    """``<judge>/<replica>`` -> samples that replica judged for this step (actor judges only)."""
    replica_s: dict[str, float] = field(default_factory=dict)
    """``<judge>/<replica>`` -> seconds of that replica's finished calls for this step."""
    replica_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    """``<judge>/<replica>`` -> what that replica's server reported for this step (openai engine:
    requests, retries, tokens, server restarts); absent for engines that report nothing."""
    judge_cost: dict[str, JudgeCost] = field(default_factory=dict)
    cache_hits: dict[str, int] = field(default_factory=dict)
    """Per judge: samples this step answered from the critique cache (``grm.orchestrator.judge_cache``)."""
    cache_misses: dict[str, int] = field(default_factory=dict)
    cache_saved_s: dict[str, float] = field(default_factory=dict)
    """Per judge: the judge seconds the cached results had cost when they were made."""
    """judge name -> what its finished calls for this step cost, measured inside the judge (a call
    abandoned past its deadline is not counted: its answer never arrives)."""
    first_judge_start: float | None = None
    last_judge_end: float = 0.0
    prepared: ObjectRef[Prepared] | None = None
    """The policy's batch pass (old log-probs, colocated reference, critic values), once queued."""
    reference: ObjectRef[tuple[Tensor, float]] | None = None
    """The remote reference's pass over the prepared batch: (log-probs, seconds)."""

    @property
    def complete(self) -> bool:
        return len(self.landed) == len(self.chunks) and all(c.results is not None for c in self.calls.values())

    def groups(self) -> list[Group]:
        """Landed groups in chunk order, each with every judge's results attached."""
        out = []
        for c in sorted(self.landed):
            for name in dict.fromkeys(n for (cc, n) in self.calls if cc == c):  # judges in pipeline order
                results = self.calls[(c, name)].results
                assert results is not None, "groups() before the judges finished"
                for g, res in zip(self.landed[c], results, strict=True):
                    g.judged[name] = res
            out += self.landed[c]
        return out

    @property
    def judge_window_s(self) -> float:
        if self.first_judge_start is None or not self.last_judge_end:
            return 0.0
        # a rule verifier's calls are timed in the driver and can end on the clock tick they began
        return max(0.0, self.last_judge_end - self.first_judge_start)


def rollouts_of(groups: list[Group]) -> list[Rollout]:
    return [r for g in groups for r in g.rollouts]


@dataclass
class Prepared:
    """The policy's batch pass over a step's rollouts (``PolicyActor.prepare``): the token batch with
    old log-probs, colocated reference log-probs and critic values as the algorithm needs them, and
    the seconds it took. A rank of a worker group returns its shard with the rows' ``positions`` in
    the whole batch, so rank 0 can put the shards back in the rollouts' order."""

    batch: TrainBatch
    seconds: float
    positions: list[int] | None = None
    """A shard's rows' places in the whole batch; None for a whole batch."""


@dataclass
class AdvantagePlan:
    """What the policy needs besides its prepared batch to give each row an advantage, as plain data:
    the driver sends it with the training call and never holds a tensor (``PolicyActor.train``)."""

    rewards: dict[str, float]
    """Sample id -> its reward (NaN: masked)."""
    groups: dict[str, int]
    """Sample id -> its group's index in the step."""
    versions: dict[str, int]
    """Sample id -> the policy version that sampled it."""
    version: int
    """The policy version the step trains from: older samples are stale."""
    credit: Literal["episode", "process"] = "episode"
    """``env.credit``; ``process`` needs the judged groups themselves (their first faulty turns)."""
    episodes: list[Group] | None = None
    """The step's groups, for ``credit: process`` only."""

    @classmethod
    def of(cls, groups: list[Group], version: int, credit: Literal["episode", "process"] = "episode") -> AdvantagePlan:
        return cls(
            rewards={r.id: x for g in groups for r, x in zip(g.rollouts, g.rewards, strict=True)},
            groups={r.id: i for g, i in zip(groups, baseline_groups(groups), strict=True) for r in g.rollouts},
            versions={r.id: r.version for g in groups for r in g.rollouts},
            version=version,
            credit=credit,
            episodes=groups if credit == "process" else None,
        )


def baseline_groups(groups: list[Group]) -> list[int]:
    """Each group's index among the step's advantage groups: groups whose prompts have the same
    ``Prompt.baseline`` share one (a labelled pair's two orders), every other group is its own."""
    seen: dict[str, int] = {}
    out = []
    for i, g in enumerate(groups):
        key = g.rollouts[0].prompt.baseline if g.rollouts else None
        out.append(seen.setdefault(key, len(groups) + len(seen)) if key is not None else i)
    return out


@dataclass
class Trained:
    """What training one batch left (``PolicyActor.train``), tensors kept in the actor."""

    metrics: dict[str, float]
    """The trainer's metrics (``train_seconds`` among them)."""
    advantages: dict[str, float]
    """Sample id -> its advantage (token-level ones: the mean over its response tokens)."""
    advantage_stats: dict[str, float]
    """The algorithm's statistics of the advantages (``Advantages.stats``), for the metrics line."""
    turn_credit: dict[str, list[float]]
    """``credit: process``: sample id -> per-turn credit (``process_credit``); empty otherwise."""
    prepare_seconds: float
    """Seconds of the batch pass and the remote reference's pass."""


@dataclass
class Synced:
    """What a weight sync left (``PolicyActor.sync``): the rollout engine's policy version, and the
    seconds the push took (0 when the engine shares the trainer's module)."""

    version: int
    seconds: float
    by_disk: bool | None = None
    """(served engines) whether the weights went by disk (``weight_sync: disk``, or broadcast's
    fallback); None when the engine is in process."""


@dataclass
class StepOutcome:
    """What one training step made, filled in by the driver as the step runs, in the order of its
    data flow; ``grm.orchestrator.step_rows.step_metrics`` turns it into the step's metrics line."""

    step: int
    """0-based step index (logged 1-based)."""
    work: StepWork
    version: int
    """The policy version the step starts from: it sampled on-policy rollouts and trains the batch."""
    groups: list[Group] = field(default_factory=list)
    """The judged, rewarded groups the step trains on (after dynamic filtering)."""
    reward_stats: dict[str, Any] = field(default_factory=dict)
    """``reward_groups``' statistics of ``groups``: masked counts, length correlations."""
    filtering: dict[str, int] = field(default_factory=dict)
    """Dynamic filtering's statistics (``groups_kept_informative``, ``refill_rounds``); empty when off."""
    reference_s: float = 0.0
    """Seconds of the batch pass (and the remote reference's pass)."""
    advantages: dict[str, float] = field(default_factory=dict)
    """Sample id -> its advantage (``Trained.advantages``)."""
    advantage_stats: dict[str, float] = field(default_factory=dict)
    train: dict[str, float] = field(default_factory=dict)
    """The trainer's metrics (``train_seconds`` among them)."""
    sync_s: float = 0.0
    sync_by_disk: bool | None = None
    """``Synced.by_disk`` of the step's weight sync."""
    canary: dict[str, Any] = field(default_factory=dict)
    """Readings of the canaries due after this step."""
    seconds: float = 0.0
    """Wall time since the previous step was logged."""

    def record_training(self, trained: Trained) -> None:
        """The training call's results into the step (process credit onto its episodes)."""
        self.train, self.advantages, self.advantage_stats = trained.metrics, trained.advantages, trained.advantage_stats
        self.reference_s = trained.prepare_seconds
        for r in rollouts_of(self.groups):
            if r.id in trained.turn_credit:
                r.turn_credit = trained.turn_credit[r.id]
