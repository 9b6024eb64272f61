"""The handles the driver and scheduler call the policy and the reference through, typed where a
call crosses into another process.

A handle's method is called as ``handle.NAME.remote(...)`` and returns a Ray ``ObjectRef``, so every
remote call stays visible where it is made (STYLE 15); the protocols below say what each call takes
and what its ref holds. ``PolicyGroup`` (``grm.orchestrator.policy_group``) is the ``PolicyHandle``:
one ``PolicyActor`` or a worker group of N ranks behind the same handle. A ``ReferenceActor`` or
``JudgeActor`` (``grm.orchestrator.frozen_actors``) handle is a ``ReferenceHandle``. ``RayCalls`` is
the part of Ray the scheduler waits with.

Ray-free: the names in annotations are imported for type checkers only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from torch import Tensor

    from grm.data.prompts import Prompt
    from grm.orchestrator.ckpt_transfer import Shipped
    from grm.orchestrator.health import RoleLost
    from grm.orchestrator.types import AdvantagePlan, Group, Prepared, Rollout, Synced, Trained

T = TypeVar("T")

Placement = dict[str, object]
"""Where a role's actor runs, as it reports it (``where``): node, pid, resources, threads, dtype."""


class RolloutCall(Protocol):
    def remote(
        self, prompts: Sequence[Prompt], keys: Sequence[str], n: int, seed: int, /
    ) -> ObjectRef[tuple[list[Group], float]]:
        """``n`` responses per prompt, one group per prompt keyed by ``keys``: (groups, seconds)."""
        ...


class PrepareCall(Protocol):
    def remote(self, rollouts: Sequence[Rollout], /) -> ObjectRef[Prepared]:
        """The batch pass over ``rollouts``, in their order."""
        ...


class TrainCall(Protocol):
    def remote(
        self,
        prepared: ObjectRef[Prepared],
        reference: ObjectRef[tuple[Tensor, float]] | None,
        plan: AdvantagePlan,
        /,
    ) -> ObjectRef[Trained]:
        """Every optimizer step of the batch a ``prepare`` call made (its ref, and the remote
        reference's), advantages from ``plan``: the metrics and per-row advantages."""
        ...


class SyncCall(Protocol):
    def remote(self) -> ObjectRef[Synced]:
        """Trainer weights into the rollout engine; the policy version they carry."""
        ...


class SaveCall(Protocol):
    def remote(self, path: str, token: str | None = None, /) -> ObjectRef[Shipped]:
        """Every rank's share of a checkpoint under ``path``; the files of the ranks that do not
        see the driver's marker ``token`` (``grm.orchestrator.ckpt_transfer.Shipped``)."""
        ...


class SeesCall(Protocol):
    def remote(self, path: str, token: str, /) -> ObjectRef[bool]:
        """Every rank sees the driver's checkpoint directory (its marker ``token``)."""
        ...


class LoadCall(Protocol):
    def remote(self, path: str, shipped: Shipped | None = None, token: str | None = None, /) -> ObjectRef[int]:
        """Load a checkpoint into trainer and engine (a rank that does not see ``path`` writes the
        ``shipped`` files there first); the policy version it holds."""
        ...


class ProgressCall(Protocol):
    def remote(self) -> ObjectRef[tuple[int, int | None]]:
        """(micro-batches of the training call under way, how many the previous call ran)."""
        ...


class AnswersCall(Protocol):
    def remote(self, prompts: Sequence[Prompt], max_new_tokens: int, /) -> ObjectRef[list[str]]:
        """Greedy answers of the current weights, one per prompt (the held-out check)."""
        ...


class WhereCall(Protocol):
    def remote(self, role: str = ..., /) -> ObjectRef[Placement]: ...


class LogprobsCall(Protocol):
    def remote(self, prepared: ObjectRef[Prepared], /) -> ObjectRef[tuple[Tensor, float]]:
        """Reference log-probs ``[B, L-1]`` of the batch pass's batch, and the seconds they took."""
        ...


class PolicyHandle(Protocol):
    """The policy as the driver, scheduler and recorder call it, however many ranks it has."""

    rollout: RolloutCall
    rollout_beside: RolloutCall
    """``rollout`` over a served engine, run beside the policy's other calls (``schedule.interruptible``)."""
    episodes: RolloutCall
    """``rollout`` of an ``env:`` pipeline, run beside the policy's other calls."""
    prepare: PrepareCall
    train: TrainCall
    sync: SyncCall
    save: SaveCall
    sees: SeesCall
    load: LoadCall
    train_progress: ProgressCall
    answers: AnswersCall

    def diagnose(self, error: BaseException, wait_s: float = 10.0) -> RoleLost | None:
        """The rank a failed call started from, as a ``RoleLost``; None when not known."""
        ...

    def actor_roles(self) -> dict[str, ActorHandle]:
        """Role name (``policy``, or ``policy#R`` per rank) -> its actor."""
        ...


class ReferenceHandle(Protocol):
    """A frozen reference in an actor of its own or in a judge's: log-probs of the policy's batch."""

    logprobs: LogprobsCall
    where: WhereCall


class RayErrors(Protocol):
    RayActorError: type[Exception]
    """What a call to an actor that died raises."""


class RayCalls(Protocol):
    """The part of the ``ray`` module the scheduler uses: the driver passes ``ray`` itself; unit
    tests pass a fake whose refs finish when the test says (``tests/unit/orchestrator/fakes.py``)."""

    exceptions: RayErrors

    def wait(
        self, refs: list[ObjectRef], *, num_returns: int = 1, timeout: float | None = None, fetch_local: bool = True
    ) -> tuple[list[ObjectRef], list[ObjectRef]]: ...

    def get(self, ref: ObjectRef[T]) -> T: ...

    def cancel(self, ref: ObjectRef, *, force: bool = False) -> None: ...
