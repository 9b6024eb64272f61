"""Loading a causal LM (and its tokenizer, or just its transformer body) from a builtin alias, a
local directory, a grm run or checkpoint, or a hub id. Engines, trainers and the reference all load models through here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grm.models.dtype import resolve_dtype, torch_dtype


def _quiet() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_model(model: str, dtype: str = "fp32") -> tuple[Any, Any]:
    """(causal LM in eval mode, tokenizer). ``dtype`` may be ``auto`` (see ``grm.models.dtype``)."""
    dtype = resolve_dtype(dtype)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grm.models.trained import resolve_model

    _quiet()
    path = resolve_model(model)
    tok = AutoTokenizer.from_pretrained(path)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype))
    net.eval()
    return net, tok


def load_body(model: str, dtype: str = "fp32") -> Any:
    """The transformer body without its LM head (a critic puts a value head on it)."""
    from transformers import AutoModel

    from grm.models.trained import resolve_model

    _quiet()
    return AutoModel.from_pretrained(resolve_model(model), dtype=torch_dtype(dtype))


def load_trained(base_model: str, checkpoint: Path, dtype: str = "fp32") -> tuple[Any, Any]:
    """(base model with a checkpoint's weights, adapters merged; tokenizer)."""
    from grm.models.checkpoints import apply_state, checkpoint_state

    model, tok = load_model(base_model, dtype)
    apply_state(model, checkpoint_state(checkpoint, model), checkpoint)
    return model, tok
