"""Weight sync from the trainer to generation engines: in memory (another Ray actor, through the
object store) or on disk (safetensors, for engines that reload from disk). Versioned."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import Tensor

from grm.training.core import atomic_dir


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


def save_weights(state_dict: dict[str, Tensor], path: str | Path, version: int) -> float:
    """Write ``model.safetensors`` + ``VERSION`` atomically (tied tensors stored once); returns seconds."""
    t0 = time.perf_counter()
    seen: set[int] = set()
    unique = {}
    for k, v in state_dict.items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        unique[k] = v.contiguous()
    with atomic_dir(path) as tmp:
        save_file(unique, str(tmp / "model.safetensors"), metadata={"version": str(version)})
        (tmp / "VERSION").write_text(f"{version}\n")
    return time.perf_counter() - t0


def _is_actor(target: Any) -> bool:
    return type(target).__name__ == "ActorHandle"
