"""Model weights on disk: safetensors with tied tensors stored once, and per-target log-probs of a
causal LM (the one piece of model math engines and trainers share)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from grm.base import atomic_dir


def unique_tensors(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` without the second name of a tied tensor (embeddings = LM head share storage);
    safetensors refuses shared storage, and the loader re-ties them."""
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        out[k] = v.contiguous()
    return out


def tied_aliases(state: dict[str, Any]) -> set[str]:
    """Names ``unique_tensors`` leaves out: the second name of each tied tensor."""
    return set(state) - set(unique_tensors(state))


def save_weights(state_dict: dict[str, Any], path: str | Path, version: int) -> float:
    """Write ``model.safetensors`` + ``VERSION`` atomically (tied tensors stored once); returns seconds."""
    from safetensors.torch import save_file

    t0 = time.perf_counter()
    with atomic_dir(path) as tmp:
        save_file(unique_tensors(state_dict), str(tmp / "model.safetensors"), metadata={"version": str(version)})
        (tmp / "VERSION").write_text(f"{version}\n")
    return time.perf_counter() - t0


def token_logprobs(
    model: Any, input_ids: Any, attention_mask: Any, *, with_entropy: bool = False, start: int = 0
) -> tuple[Any, Any]:
    """Log-prob of every target token ``[B, L-1]`` (fp32), and optionally per-token entropy.

    ``start``: the first target column that matters (the batch's shortest prompt - 1); columns
    before it are 0 and their logits are never computed (``logits_to_keep``), which saves the LM
    head's FLOPs and the ``[B, L, vocab]`` memory over the prompts. The inputs move to the model's
    device; the outputs stay there.
    """
    import torch

    from grm.models.device import module_device

    device = module_device(model)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    L = input_ids.shape[1]
    keep = {"logits_to_keep": L - start} if start > 0 else {}
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **keep).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, input_ids[:, start + 1 :, None])[..., 0]
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = torch.nn.functional.pad(-(logp.exp() * logp).sum(-1), (start, 0))
    return torch.nn.functional.pad(chosen, (start, 0)), ent
