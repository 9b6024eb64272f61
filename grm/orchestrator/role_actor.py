"""What every role actor shares, whatever its model: where it runs (node, pid, resources, torch
threads, for placement.json), its device, the dtype its engine chose, and the frozen reference's
dtype. The policy actor is in ``grm.orchestrator.actors``, the frozen ones in
``grm.orchestrator.frozen_actors``."""

from __future__ import annotations

import os
from typing import Any

import ray

from grm.orchestrator.handles import Placement


def actor_device() -> Any:
    """The device of a judge's or remote reference's model: the GPU Ray gave this actor (its pool
    has GPUs), else the CPU."""
    from grm.models.device import role_device

    return role_device(len(ray.get_gpu_ids()))


REFERENCE_DTYPE = "fp32"
"""The frozen reference's dtype: its log-probs enter the KL against the fp32 trainer's."""


def engine_dtype(engine: object) -> dict[str, str]:
    """``{"dtype": ...}`` for an hf engine (what ``dtype: auto`` chose, for placement.json), else {}."""
    name = getattr(engine, "dtype_name", None)
    return {"dtype": name} if isinstance(name, str) else {}


def where() -> Placement:
    """Node, resources, torch threads and device of the calling actor (asserted by placement tests),
    read on the thread that runs its calls (the policy actor names its own device)."""
    import torch

    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "pid": os.getpid(),
        "resources": ctx.get_assigned_resources(),
        "threads": torch.get_num_threads(),
        "device": str(actor_device()),
    }
