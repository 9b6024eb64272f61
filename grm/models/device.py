"""Where a role's models and tensors live: the one place that chooses a device, and the helpers
that move data to a module's device and back to the host.

Nothing else in grm names a device. Batches are built on the CPU and move to the module's device
where they enter a forward; results the caller keeps (log-probs, weights, metrics) come back to
the CPU through ``to_cpu`` / ``scalar``. The ``meta`` device stands in for an accelerator in
tests: a ``meta`` tensor has no data, so its host copy is zeros (scalars: NaN), which lets a
placement check run whole code paths and fail only where a tensor sits on the wrong device.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import torch


def role_device(gpus: float = 0, override: str | torch.device | None = None) -> torch.device:
    """The device of a role's models: ``override`` when given (tests: ``"meta"``), else
    ``cuda:LOCAL_RANK`` when the role has GPUs and CUDA is visible, else the CPU.

    LOCAL_RANK is taken modulo the visible GPUs: a Ray actor that was given one GPU sees it as
    ``cuda:0`` whatever its rank, while a launcher that shows every GPU to every rank gets one each.
    """
    if override is not None:
        return torch.device(override)
    if gpus > 0 and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device("cpu")


def module_device(module: Any) -> torch.device:
    """The device a module computes on: its ``device`` attribute (Hugging Face models, DeepSpeed
    engines), else that of its first parameter or buffer, else the CPU."""
    dev = getattr(module, "device", None)
    if isinstance(dev, (torch.device, str)):
        return torch.device(dev)
    first = next(itertools.chain(module.parameters(), module.buffers()), None)
    return first.device if first is not None else torch.device("cpu")


def to_cpu(t: torch.Tensor, copy: bool = False) -> torch.Tensor:
    """``t`` on the host (a copy when ``copy``); a ``meta`` tensor becomes zeros of its shape."""
    if t.is_meta:
        return torch.zeros(t.shape, dtype=t.dtype)
    return t.to("cpu", copy=copy)


def scalar(t: torch.Tensor | float) -> float:
    """A one-element tensor as a Python float (NaN for a ``meta`` tensor, which has no value)."""
    if isinstance(t, torch.Tensor):
        return float("nan") if t.is_meta else float(t)
    return float(t)
