"""Weight sync from the trainer to generation engines in memory (in process, or another Ray actor
through the object store). Versioned. Engines that reload from disk get ``grm.models.weights.save_weights``."""

from __future__ import annotations

import time
from typing import Any

from torch import Tensor


def push_weights(target: Any, state_dict: dict[str, Tensor], version: int) -> float:
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


def _is_actor(target: Any) -> bool:
    return type(target).__name__ == "ActorHandle"
