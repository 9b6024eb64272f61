"""Weight sync from the trainer to generation engines in memory (in process, or another Ray actor
through the object store). Versioned. Engines that reload from disk get ``grm.models.weights.save_weights``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from torch import Tensor

if TYPE_CHECKING:
    from ray.actor import ActorHandle


class TakesWeights(Protocol):
    """An engine that takes weights in memory (``GenerationEngine.update_weights``)."""

    def update_weights(self, state_dict: dict[str, Tensor], version: int) -> None: ...


def push_weights(target: TakesWeights | ActorHandle, state_dict: dict[str, Tensor], version: int) -> float:
    """Send weights to an engine (or a Ray actor handle exposing ``update_weights``); returns seconds.

    For a Ray actor the tensors go into the object store once (``ray.put``) and the actor copies
    them into its model in place.
    """
    t0 = time.perf_counter()
    if _is_actor(target):
        import ray

        ref = ray.put(state_dict)
        ray.get(target.update_weights.remote(ref, version))
    else:
        target.update_weights(state_dict, version)
    return time.perf_counter() - t0


def _is_actor(target: object) -> bool:
    return type(target).__name__ == "ActorHandle"
