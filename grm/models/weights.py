"""Model weights on disk: safetensors with tied tensors stored once, and per-target log-probs of a
causal LM (the one piece of model math engines and trainers share)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Set
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


def mismatch(own: dict[str, Any], saved: dict[str, Any], may_miss: Set[str] = frozenset()) -> str | None:
    """How ``saved`` does not fit ``own`` by names and shapes (``may_miss``: names it may lack), or
    None: ``missing [...], unexpected [...], shape differs [...]`` (at most three of each)."""
    missing = set(own) - set(saved) - may_miss
    unexpected = set(saved) - set(own)
    wrong = [k for k in set(own) & set(saved) if tuple(own[k].shape) != tuple(saved[k].shape)]
    if not (missing or unexpected or wrong):
        return None
    return f"missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}, shape differs {sorted(wrong)[:3]}"


def save_weights(state_dict: dict[str, Any], path: str | Path, version: int) -> float:
    """Write ``model.safetensors`` + ``VERSION`` atomically (tied tensors stored once); returns seconds."""
    from safetensors.torch import save_file

    t0 = time.perf_counter()
    with atomic_dir(path) as tmp:
        save_file(unique_tensors(state_dict), str(tmp / "model.safetensors"), metadata={"version": str(version)})
        (tmp / "VERSION").write_text(f"{version}\n")
    return time.perf_counter() - t0


def token_logprobs(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    *,
    with_entropy: bool = False,
    start: int = 0,
    prompt_lens: Any = None,
) -> tuple[Any, Any]:
    """Log-prob of every target token ``[B, L-1]`` (fp32), and optionally per-token entropy.

    ``start``: the first target column that matters (the batch's shortest prompt - 1); columns
    before it are 0 and their logits are never computed (``logits_to_keep``). Nor are the logits
    of positions whose target is padding (``at_targets``): the LM head and the ``[*, vocab]``
    log-softmax run over real targets only, which is most of their cost saved on a batch of
    ragged answers. ``prompt_lens`` (``[B]``, the rows right padded): each distinct prompt runs
    once and the rows go on from its keys/values (``shared_prompt_logprobs``); columns before a
    row's prompt end are 0. The inputs move to the model's device; the outputs stay there.
    """
    from grm.models.device import module_device

    device = module_device(model)
    if prompt_lens is not None:
        return shared_prompt_logprobs(
            model, input_ids.to(device), attention_mask.to(device), prompt_lens, with_entropy=with_entropy
        )
    B, L = input_ids.shape
    keep = {"logits_to_keep": L - start} if start > 0 else {}
    # kept position start + s predicts target column start + s: a real token or padding (indices
    # from the host mask, so nothing reads the device's values)
    ri, si = (i.to(device) for i in attention_mask[:, start + 1 :].bool().nonzero(as_tuple=True))
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    with at_targets(model, (B, L - start), ri, si) as picked:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **keep).logits
    targets = input_ids[ri, si + start + 1]
    return _place(picked(logits), targets, ri, si + start, (B, L - 1), with_entropy)


@contextlib.contextmanager
def at_targets(model: Any, shape: tuple[int, int], rows: Any, cols: Any) -> Iterator[Any]:
    """A context in which ``model``'s LM head runs only at positions ``(rows[n], cols[n])`` of the
    ``shape`` = ``[B, S]`` positions the forward computes logits for: a pre-hook on the output
    embeddings keeps those hidden states, so the logits come out ``[N, vocab]``. Whatever a model
    does after its head (a logit scale, soft-capping) is elementwise and still applies. Yields
    ``picked(logits) -> [N, vocab]``, which also takes the whole ``[B, S, vocab]`` of a model whose
    head did not receive ``[B, S, hidden]`` (the hook then leaves it alone)."""
    inner = _unwrapped(model)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None

    def pre(_mod: Any, args: tuple) -> tuple | None:
        h = args[0]
        if h.dim() == 3 and tuple(h.shape[:2]) == tuple(shape):
            return (h[rows, cols], *args[1:])
        return None

    def picked(logits: Any) -> Any:
        return logits[rows, cols] if logits.dim() == 3 else logits

    handle = head.register_forward_pre_hook(pre) if head is not None else None
    try:
        yield picked
    finally:
        if handle is not None:
            handle.remove()


def _unwrapped(model: Any) -> Any:
    """The Hugging Face model itself: a DeepSpeed engine wraps it as ``.module``."""
    return getattr(model, "module", model)


def _place(logits: Any, targets: Any, rows: Any, cols: Any, shape: tuple[int, int], with_entropy: bool) -> tuple[Any, Any]:
    """Log-probs of ``targets`` ``[N]`` under ``logits`` ``[N, vocab]``, placed at ``(rows, cols)``
    in zeros of ``shape``; the same for entropy."""
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(-1, targets[:, None])[:, 0]
    out = torch.zeros(shape, dtype=chosen.dtype, device=chosen.device).index_put((rows, cols), chosen)
    ent = None
    if with_entropy:
        with torch.no_grad():
            e = -(logp.exp() * logp).sum(-1)
            ent = torch.zeros(shape, dtype=e.dtype, device=e.device).index_put((rows, cols), e)
    return out, ent


def shared_prompt_logprobs(
    model: Any, input_ids: Any, attention_mask: Any, prompt_lens: Any, *, with_entropy: bool = False
) -> tuple[Any, Any]:
    """``token_logprobs`` with each distinct prompt computed once: a GRPO group's samples share
    their prompt, which is most of a short answer's tokens, so the forward (and its backward) runs
    the prompts once per group instead of once per sample.

    One forward call over one packed row, whatever the rows (ZeRO-3 gathers parameters in every
    call, so every rank must make the same number): the distinct prompts but their last token, then
    each row from its prompt's last token on, each segment at its own positions; a 4-D mask lets a
    prompt see itself causally and a row's segment see itself causally and its prompt. No padding
    runs (ragged answers of a micro-batch were a third padding when the rows were padded to the
    longest) and no keys/values are copied. Same values as one full forward up to float rounding."""
    import torch

    device = input_ids.device
    B, L = input_ids.shape
    plen = [int(p) for p in prompt_lens.tolist()]
    total = [int(n) for n in attention_mask.sum(-1).tolist()]
    if min(plen) < 1 or any(t < p for p, t in zip(plen, total, strict=True)):
        raise ValueError(f"prompt lengths {plen} do not fit rows of {total} tokens")
    rows = input_ids.tolist()
    head_of = [tuple(r[: p - 1]) for r, p in zip(rows, plen, strict=True)]
    at: dict[tuple[int, ...], int] = {}  # a distinct head -> its offset in the packed row
    ids: list[int] = []
    pos: list[int] = []
    spans: list[tuple[int, int, int, int]] = []  # (start, length, head start, head length) per segment
    for h in head_of:
        if h and h not in at:
            at[h] = len(ids)
            spans.append((len(ids), len(h), 0, 0))
            ids += h
            pos += range(len(h))
    # tail token s < t - p of row b predicts target column p - 1 + s: the packed token after it
    at_n: list[int] = []  # where each target's logits are read in the packed row
    ri: list[int] = []
    col: list[int] = []
    for b, (p, t) in enumerate(zip(plen, total, strict=True)):
        spans.append((len(ids), t - p + 1, at.get(head_of[b], 0), len(head_of[b])))
        at_n += range(len(ids), len(ids) + t - p)
        ri += [b] * (t - p)
        col += range(p - 1, t - 1)
        ids += rows[b][p - 1 : t]
        pos += range(p - 1, t)
    N = len(ids)
    see = torch.zeros((N, N), dtype=torch.bool)
    for start, n, h0, hn in spans:
        see[start : start + n, start : start + n] = torch.ones((n, n), dtype=torch.bool).tril()
        see[start : start + n, h0 : h0 + hn] = True
    mask = see
    if not _sdpa_like(model):  # eager attention adds its mask to the scores
        dtype = next(_unwrapped(model).parameters()).dtype
        mask = torch.zeros((N, N), dtype=dtype).masked_fill(~see, torch.finfo(dtype).min)
    packed = torch.tensor([ids], dtype=torch.long, device=device)
    read = torch.tensor(at_n, dtype=torch.long, device=device)
    with at_targets(model, (1, N), torch.zeros_like(read), read) as picked:
        logits = model(
            input_ids=packed,
            attention_mask=mask[None, None].to(device),
            position_ids=torch.tensor([pos], dtype=torch.long, device=device),
            use_cache=False,
        ).logits
    ri_t, col_t = (torch.tensor(v, dtype=torch.long, device=device) for v in (ri, col))
    return _place(picked(logits), packed[0, read + 1], ri_t, col_t, (B, L - 1), with_entropy)


def _sdpa_like(model: Any) -> bool:
    """Whether the model's attention takes a boolean mask (SDPA, flex); eager attention adds it."""
    impl = getattr(getattr(_unwrapped(model), "config", None), "_attn_implementation", None)
    return impl not in (None, "eager")
