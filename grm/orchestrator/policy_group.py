"""The policy as a worker group: ``train.backend.ranks`` PolicyActor ranks, one per bundle of the
policy's pool, joined in one torch.distributed group (gloo on CPU, NCCL on GPUs) that DeepSpeed's
ZeRO data parallelism runs over.

The driver and scheduler see one handle with the actor's methods: ``group.train.remote(...)``
returns one Ray ref, so a 1-rank and an N-rank run take the same code path. Work is split so that
N ranks reproduce one:

- rollout: a chunk's prompts are cut into N contiguous parts, one per rank; the hf engine seeds each
  row from (seed, sample index, prompt tokens), so a row's samples do not depend on which rank or
  batch generates them (an sglang engine lives on rank 0 only and serves the whole pool);
- prepare (old log-probs, reference, critic values): the rollouts are cut into N equal, token-
  balanced shards (ZeRO-3 needs every rank to run the same number of forwards), and the batch is
  put back together in the rollouts' order;
- train: every rank gets the whole batch and trains its token-balanced shard of each mini-batch;
  the loss is normalised over the whole batch and the trainers reduce their metrics;
- sync, save, load: collective (ZeRO-3 gathers weights, every rank writes its shard).

Rank 0 gathers: its call takes the other ranks' refs and returns the combined result, so a caller
waits on one ref (and can hand it to another actor, as the reference pass does).

A rank that fails does not leave the others waiting: every collective waits at most
``train.backend.collective_timeout_s``, and a rank whose trainer call raises tears the process
group down, so the others' collectives fail at once (``grm.training.distributed``). The caller then
sees rank 0's error, often only "connection closed"; ``PolicyGroup.diagnose`` finds the rank the
failure started on and why, which the driver reports as a lost role.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import ray

from grm.orchestrator.health import RoleLost
from grm.orchestrator.types import Prepared, Synced

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

    from grm.data.prompts import Prompt
    from grm.orchestrator.handles import (
        AnswersCall,
        LoadCall,
        PrepareCall,
        ProgressCall,
        RolloutCall,
        SaveCall,
        SeesCall,
        SyncCall,
        TrainCall,
    )
    from grm.orchestrator.types import Group, Rollout
    from grm.training.distributed import RankFailure

T = TypeVar("T")
Args = tuple[object, ...]
"""One rank's arguments of a call: the handle's protocols (``grm.orchestrator.handles``) say which."""


def gather(own: T, others: Sequence[ObjectRef[T]], combine: Callable[[list[T]], T]) -> T:
    """Rank 0 of a policy group: its result combined with the other ranks' (their refs)."""
    return combine([own, *ray.get(list(others))]) if others else own


class RankOf(NamedTuple):
    """Where a rank of a multi-rank policy group stands: its rank, the group's size, and the
    rendezvous (address, port) of rank 0."""

    rank: int
    world: int
    address: str
    port: int


@ray.remote(num_cpus=0)
def rendezvous() -> tuple[str, int]:
    """Address and a free port on this node: where a policy group's ranks meet (run on rank 0's bundle)."""
    from grm.process import free_port

    return ray.util.get_node_ip_address(), free_port()


class GroupMethod:
    """``group.NAME.remote(*args)``: one call per rank, one ref back (rank 0's, which gathers)."""

    def __init__(self, group: PolicyGroup, name: str) -> None:
        self.group, self.name = group, name

    def remote(self, *args: object) -> ObjectRef:
        if self.group.ranks > 1:  # one copy in the object store for every rank (a batch is large)
            import ray

            args = tuple(a if a is None or isinstance(a, ray.ObjectRef) else ray.put(a) for a in args)
        return self.group.call(self.name, [args] * self.group.ranks)


class PolicyGroup:
    """The ``PolicyHandle`` (``grm.orchestrator.handles``): the actor's methods, each one call per
    rank (rank 0 gathering), rank 0 alone, or with its first argument cut across the ranks."""

    rollout: RolloutCall
    rollout_beside: RolloutCall
    episodes: RolloutCall
    prepare: PrepareCall
    train: TrainCall
    sync: SyncCall
    save: SaveCall
    sees: SeesCall
    load: LoadCall
    train_progress: ProgressCall
    answers: AnswersCall

    def __init__(self, actors: Sequence[ActorHandle], hf_rollout: bool) -> None:
        self.actors = list(actors)
        self.hf_rollout = hf_rollout
        """hf engines on every rank (rollouts split across ranks); otherwise rank 0's engine only."""
        self.sync, self.save, self.load, self.train = (GroupMethod(self, m) for m in ("sync", "save", "load", "train"))
        self.sees = GroupMethod(self, "sees")
        self.train_progress = _Rank0(self, "train_progress")  # rank 0's micro-batches (each rank trains a shard)
        self.answers = _Rank0(self, "answers")  # a few greedy answers: rank 0's engine
        self.rollout = _Split(self, "rollout", split_rollout if hf_rollout else None)
        self.episodes = _Split(self, "episodes", split_rollout if hf_rollout else None)  # beside the other calls
        self.rollout_beside = _Split(self, "rollout_beside", None)  # a served engine's: rank 0's, beside training
        self.prepare = _Split(self, "prepare", split_prepare)

    @property
    def ranks(self) -> int:
        return len(self.actors)

    def call(self, method: str, args: Sequence[Args]) -> ObjectRef:
        """``method`` on every rank with its own arguments; rank 0's ref, which gathers the others'."""
        others = [getattr(a, method).remote(*a_args) for a, a_args in zip(self.actors[1:], args[1:], strict=True)]
        return (
            getattr(self.actors[0], method).remote(*args[0], others=others)
            if others
            else getattr(self.actors[0], method).remote(*args[0])
        )

    def diagnose(self, error: BaseException, wait_s: float = 10.0) -> RoleLost | None:
        """The rank a failed call of this group started from, as the ``RoleLost`` naming it and its
        error, for ``error`` (the ``RayTaskError`` or ``RayActorError`` a policy call raised). None
        when the group has one rank, the error is not a policy rank's, or it started in rank 0's own
        code (its traceback, kept, says more). Asks every rank what it saw (``PolicyActor.failure``,
        answered while a call is stuck), waiting at most ``wait_s`` for the answers."""
        import ray

        if self.ranks == 1:
            return None
        ids = {a._actor_id.hex(): r for r, a in enumerate(self.actors)}
        named = [ids[i] for i in actors_named(error) if i in ids]
        if not named:
            return None
        cause = getattr(error, "cause", None)
        gathered = dead_in_error = None
        if isinstance(cause, ray.exceptions.RayActorError):  # rank 0 gathered a rank that died
            rank = ids.get(str(getattr(cause, "actor_id", None)))
            dead_in_error = None if rank is None else (rank, _first_line(cause))
        elif named[-1] != 0:  # the innermost call named is a peer's: rank 0 gathered its error
            gathered = (named[-1], _first_line(cause if isinstance(cause, BaseException) else error))
        refs = [a.failure.remote() for a in self.actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        seen: dict[int, RankFailure | None] = {}
        dead: dict[int, str] = dict([dead_in_error] if dead_in_error else [])
        for r, ref in enumerate(refs):
            if ref in ready:
                try:
                    seen[r] = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    dead.setdefault(r, _first_line(e))
        return blame(self.ranks, seen, dead, gathered)

    def actor_roles(self) -> dict[str, ActorHandle]:
        """Role name -> actor: ``policy`` for one rank, ``policy#R`` for each of several."""
        if self.ranks == 1:
            return {"policy": self.actors[0]}
        return {f"policy#{r}": a for r, a in enumerate(self.actors)}


class _Rank0(GroupMethod):
    def remote(self, *args: object) -> ObjectRef:
        return getattr(self.group.actors[0], self.name).remote(*args)


class _Split(GroupMethod):
    """A method whose first argument is cut across ranks by ``split`` (None: rank 0 does it all)."""

    def __init__(self, group: PolicyGroup, name: str, split: Callable[..., Sequence[Args]] | None) -> None:
        super().__init__(group, name)
        self.split = split

    def remote(self, *args: object) -> ObjectRef:
        if self.group.ranks == 1 or self.split is None:
            return getattr(self.group.actors[0], self.name).remote(*args)
        return self.group.call(self.name, self.split(self.group.ranks, *args))


# --------------------------------------------------------------------------- splitting work


def split_rollout(
    ranks: int, prompts: Sequence[Prompt], keys: Sequence[str], n: int, seed: int
) -> list[tuple[list[Prompt], list[str], int, int]]:
    """A chunk's prompts (and group keys) cut into ``ranks`` contiguous parts, as even as they go."""
    bounds = [len(prompts) * r // ranks for r in range(ranks + 1)]
    return [(list(prompts[a:b]), list(keys[a:b]), n, seed) for a, b in zip(bounds, bounds[1:], strict=False)]


def split_prepare(ranks: int, rollouts: Sequence[Rollout]) -> list[tuple[list[Rollout], list[int]]]:
    """Rollouts cut into ``ranks`` equal shards balanced by tokens; each shard carries the rollouts'
    positions so rank 0 can put the batch back in order."""
    from grm.sharding import balanced_partition

    sizes = [len(r.prompt_ids) + len(r.token_ids or [0]) for r in rollouts]
    shards = balanced_partition(sizes, ranks)
    return [([rollouts[i] for i in shard], shard) for shard in shards]


# --------------------------------------------------------------------------- gathering results


def gather_rollouts(parts: Sequence[tuple[list[Group], float]]) -> tuple[list[Group], float]:
    """Groups of every rank in rank order (the chunk's prompt order); seconds of the slowest rank."""
    return [g for groups, _ in parts for g in groups], max(s for _, s in parts)


def gather_prepared(parts: Sequence[Prepared], pad_id: int = 0) -> Prepared:
    """Shard batches back into one batch in the rollouts' order; seconds of the slowest rank."""
    import torch

    from grm.training.batch import concat_batches

    order = [i for p in parts for i in p.positions or ()]
    batch = concat_batches([p.batch for p in parts], pad_id)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return Prepared(batch.select(torch.tensor(inverse)), max(p.seconds for p in parts))


def gather_first(parts: Sequence[T]) -> T:
    """Rank 0's result (train metrics are reduced across ranks by the trainer already)."""
    return parts[0]


def gather_max(parts: Sequence[float]) -> float:
    return max(parts)


def gather_synced(parts: Sequence[Synced]) -> Synced:
    """Rank 0's version (every rank trained the same steps); seconds of the slowest rank."""
    return Synced(parts[0].version, max(p.seconds for p in parts), parts[0].by_disk)


# --------------------------------------------------------------------------- which rank failed


_ACTOR_ID = re.compile(r"actor_id[=:]\s*([0-9a-f]{16,64})")


def actors_named(error: BaseException) -> list[str]:
    """The actor ids an actor call's error names, outermost call first: Ray's text of a failed call
    names the actor of each call it passed through (rank 0, then the peer whose result it gathered),
    and a dead actor's error carries its id."""
    found = _ACTOR_ID.findall(str(error))
    for e in (error, getattr(error, "cause", None)):
        own = getattr(e, "actor_id", None)
        if isinstance(own, str) and own not in found:
            found.append(own)
    return found


def _first_line(e: BaseException) -> str:
    """``Type: first line`` of an error (a Ray error's first line is its call; its cause's is the error)."""
    lines = [x for x in str(e).strip().splitlines() if x.strip()]
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def blame(
    ranks: int, seen: dict[int, RankFailure | None], dead: dict[int, str], gathered: tuple[int, str] | None
) -> RoleLost | None:
    """The ``RoleLost`` for the rank a group's failure started on, from what each rank answered
    (``seen``: rank -> its first ``RankFailure`` or None), the ranks whose actor died (``dead``), and
    a peer's error rank 0 gathered. In that order of trust: a failure that is not a broken collective
    (the earliest), a gathered error, a dead actor, then ranks that recorded nothing while the others
    broke off waiting for them (hung). None when the failure is rank 0's own or nothing is known."""

    def lost(rank: int, detail: str) -> RoleLost:
        return RoleLost([f"policy#{rank}"], f"rank {rank} of {ranks} {detail}", policy_lost=True)

    failures = [f for f in seen.values() if f is not None]
    own = sorted((f for f in failures if not f.peer_gone), key=lambda f: f.at)
    if own:
        first = own[0]
        return None if first.rank == 0 else lost(first.rank, f"failed in {first.call} ({first.error})")
    if gathered is not None:
        return lost(gathered[0], f"failed ({gathered[1]})")
    if dead:
        rank = min(dead)
        return lost(rank, f"died ({dead[rank]})")
    broken = sorted(failures, key=lambda f: f.at)
    silent = [r for r, f in seen.items() if f is None]
    if broken and silent:
        waited = broken[0]
        more = f" (and {len(silent) - 1} more)" if len(silent) > 1 else ""
        return lost(silent[0], f"never came to the collective{more}: rank {waited.rank}'s {waited.call} gave up ({waited.error})")
    if broken:
        return lost(broken[0].rank, f"failed in {broken[0].call} ({broken[0].error})")
    return None
