"""LoRA adapters on a causal LM (``train.lora``), through ``peft``: wrapping a model, the adapters'
own weights (what a checkpoint keeps), and the merged weights under the base model's names (what
engines and exports get: ``W + B A alpha / r`` for every adapted layer).

Names: a wrapped model's parameters are called ``base_model.model.<name>`` and an adapted layer
``<layer>.base_layer.weight`` with ``<layer>.lora_A.<adapter>.weight`` (``[r, in]``) and
``<layer>.lora_B.<adapter>.weight`` (``[out, r]``); the merged state has the plain ``<layer>.weight``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor, nn

    from grm.config.pipeline import LoraSpec

PREFIX = "base_model.model."
_A = re.compile(r"^(?P<layer>.+)\.lora_A\.(?P<adapter>[^.]+)\.weight$")


def settings_of(module: nn.Module) -> dict[str, Any]:
    """What ``CHECKPOINT/policy/lora.json`` records (enough to merge the adapters without the
    pipeline), read from a wrapped model's own adapter configuration."""
    cfg = next(iter(module.peft_config.values()))
    targets = cfg.target_modules
    targets = sorted(targets) if isinstance(targets, (set, list, tuple)) else targets
    return {
        "r": cfg.r,
        "alpha": cfg.lora_alpha,
        "dropout": cfg.lora_dropout,
        "target_modules": targets,
        "scaling": _scaling(module),
    }


def wrap(module: nn.Module, spec: LoraSpec) -> nn.Module:
    """``module`` with fresh adapters (B = 0: the wrapped model computes what ``module`` did); only
    the adapters require gradients."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=spec.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(module, cfg)
    except ValueError as e:  # e.g. no module of that name in the model
        raise ValueError(f"train.lora: {e}") from None


def is_wrapped(module: Any) -> bool:
    """True for a model with adapters (a ``peft`` model), also inside a DeepSpeed engine's ``.module``."""
    return hasattr(module, "peft_config") and hasattr(module, "get_base_model")


def adapter_state(module: nn.Module) -> dict[str, Tensor]:
    """The adapters' weights (the trainable parameters), detached, under the wrapped model's names."""
    return {k: v.detach() for k, v in module.named_parameters() if v.requires_grad}


def load_adapters(module: nn.Module, saved: dict[str, Tensor], where: str) -> None:
    """Put a checkpoint's adapter weights into a wrapped model; ValueError naming ``where`` when
    they are not exactly its adapters (another rank, other target modules)."""
    from grm.models.weights import mismatch

    if (why := mismatch(adapter_state(module), saved)) is not None:
        raise ValueError(f"{where}: the adapters do not match train.lora: {why}")
    module.load_state_dict(saved, strict=False)


def merged_state_dict(module: nn.Module) -> dict[str, Tensor]:
    """The wrapped model's weights as the base model would hold them after merging (CPU, fp32 math,
    the base weights' dtype), every name of the base model's ``state_dict`` (tied ones too)."""
    full = module.state_dict()
    base = {_plain(k): v for k, v in full.items() if ".lora_" not in k}
    adapters = {k: v for k, v in full.items() if ".lora_" in k}
    scaling = _scaling(module)
    return _merge(base, adapters, scaling)


def merge_adapter_state(base: dict[str, Tensor], adapters: dict[str, Tensor], cfg: dict[str, Any]) -> dict[str, Tensor]:
    """``base`` (a base model's state dict) with the saved ``adapters`` merged in, ``cfg`` the
    checkpoint's ``lora.json``; ValueError when an adapter names a layer the base does not have."""
    return _merge(dict(base), adapters, float(cfg["scaling"]))


def _plain(name: str) -> str:
    name = name.removeprefix(PREFIX)
    return name.replace(".base_layer.", ".")


def _scaling(module: nn.Module) -> float:
    for m in module.modules():
        if hasattr(m, "scaling") and isinstance(m.scaling, dict) and m.scaling:
            return float(next(iter(m.scaling.values())))
    raise ValueError("no adapter layer in the model")


def _merge(base: dict[str, Tensor], adapters: dict[str, Tensor], scaling: float) -> dict[str, Tensor]:
    import torch

    copies: dict[int, Tensor] = {}  # a tied tensor (embeddings = LM head) stays one tensor under both names
    out = {k: copies.setdefault(v.data_ptr(), v.detach().cpu()) for k, v in base.items()}
    for name, a in adapters.items():
        m = _A.match(name)
        if m is None:
            continue
        b_name = f"{m['layer']}.lora_B.{m['adapter']}.weight"
        if b_name not in adapters:
            raise ValueError(f"adapter {name} has no {b_name}")
        target = _plain(m["layer"]) + ".weight"
        if target not in out:
            raise ValueError(f"adapter {name}: the base model has no {target}")
        w = out[target]
        delta = adapters[b_name].detach().cpu().float() @ a.detach().cpu().float()
        if tuple(delta.shape) != tuple(w.shape):
            raise ValueError(f"adapter {name}: update {tuple(delta.shape)} does not fit {target} {tuple(w.shape)}")
        with torch.no_grad():
            out[target] = (w.float() + delta * scaling).to(w.dtype)
    return out
