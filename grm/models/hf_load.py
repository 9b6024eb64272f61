"""transformers' loaders over a resolved model path, with whatever they raise as one
``ModelStoreError`` naming the path (``grm.models.loading`` and ``grm.models.trained`` load
through here)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from grm.models.store import ModelStoreError


def quiet() -> None:
    """No progress bars or advice from transformers on grm's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


@contextmanager
def loading(path: str, what: str) -> Iterator[None]:
    """Turns whatever transformers raises while loading ``what`` from ``path`` into one
    ``ModelStoreError`` naming both. transformers raises many types for a directory it cannot use
    (ValueError for a tokenizer it cannot build, JSONDecodeError for a damaged config, OSError for a
    missing file, KeyError for an unknown architecture), none of them a message for the user."""
    try:
        yield
    except ModelStoreError:
        raise
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ModelStoreError(f"{path}: cannot load the model's {what} ({type(e).__name__}: {first})") from None


def tokenizer_at(path: str) -> Any:
    """The tokenizer of a resolved model path (``resolve_model``'s answer)."""
    from transformers import AutoTokenizer

    quiet()
    with loading(path, "tokenizer"):
        return AutoTokenizer.from_pretrained(path)


def causal_lm_at(path: str, dtype: Any) -> Any:
    """The causal LM of a resolved model path in torch dtype ``dtype``."""
    from transformers import AutoModelForCausalLM

    quiet()
    with loading(path, "weights"):
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
