"""Loading a causal LM (and its tokenizer, or just its transformer body) from a builtin alias, a
local directory, a grm run or checkpoint, or a hub id. Engines, trainers and the reference all load models through here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grm.models.dtype import resolve_dtype, torch_dtype
from grm.models.hf_load import causal_lm_at, loading, quiet, tokenizer_at


def load_tokenizer(model: str) -> Any:
    """The tokenizer of any model reference ``resolve_model`` takes, without its weights."""
    from grm.models.trained import resolve_model

    return tokenizer_at(resolve_model(model))


def local_tokenizer(model: str, _depth: int = 0) -> Any | None:
    """The tokenizer of ``model`` when it is on this machine: a fetched builtin alias, a local model
    directory, or a run or checkpoint directory (its base model's, which is what its export holds,
    so nothing is exported or fetched to show it). None for an alias not fetched yet or a hub id;
    ``ModelStoreError`` naming the model for a path that cannot be used or a tokenizer that does not load."""
    from grm.models.checkpoints import CheckpointError, is_checkpoint_dir, is_run_dir, run_base_model, run_checkpoint
    from grm.models.store import ALIASES, ModelStoreError, is_fetched, local_path

    if model in ALIASES:
        return load_tokenizer(model) if is_fetched(model) else None
    path = local_path(model, "model")
    if not path.is_dir():
        return None
    if not (path / "config.json").is_file() and (is_run_dir(path) or is_checkpoint_dir(path.resolve())):
        if _depth > 8:  # a run trained from a run trained from ...: a loop of runs naming each other
            raise ModelStoreError(f"{path}: its base model is a run whose base model is a run, more than 8 deep")
        try:
            base = run_base_model(run_checkpoint(path)[0])
        except CheckpointError as e:
            raise ModelStoreError(str(e)) from None
        return local_tokenizer(base, _depth + 1)
    return load_tokenizer(model)


def load_model(model: str, dtype: str = "fp32") -> tuple[Any, Any]:
    """(causal LM in eval mode, tokenizer). ``dtype`` may be ``auto`` (see ``grm.models.dtype``)."""
    dtype = resolve_dtype(dtype)
    from grm.models.trained import resolve_model

    path = resolve_model(model)
    tok = tokenizer_at(path)
    net = causal_lm_at(path, torch_dtype(dtype))
    net.eval()
    return net, tok


def load_body(model: str, dtype: str = "fp32") -> Any:
    """The transformer body without its LM head (a critic puts a value head on it)."""
    from transformers import AutoModel

    from grm.models.trained import resolve_model

    quiet()
    path = resolve_model(model)
    with loading(path, "weights"):
        return AutoModel.from_pretrained(path, dtype=torch_dtype(dtype))


def load_trained(base_model: str, checkpoint: Path, dtype: str = "fp32") -> tuple[Any, Any]:
    """(base model with a checkpoint's weights, adapters merged; tokenizer)."""
    from grm.models.checkpoints import apply_state, checkpoint_state

    model, tok = load_model(base_model, dtype)
    apply_state(model, checkpoint_state(checkpoint, model), checkpoint)
    return model, tok
