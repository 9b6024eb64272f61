"""The files transformers reads from a local model directory, checked before it reads any of them.

transformers opens a model directory's files by name and reads each whole: a FIFO named
``tokenizer_config.json`` blocks the load forever, a device never ends, and a 2 GB
``config.json`` is parsed in full before anything fails. Each file it reads as configuration or
vocabulary must be a regular file (links followed: the Hugging Face cache is made of links) under a
size no real model comes near: configuration files and chat templates a few kB to about a MB
(Gemma 3's ``tokenizer_config.json``, the largest we know, is 1.2 MB), vocabularies tens of MB
(``tokenizer.json`` of Gemma 3: 33 MB). Weights are not checked: their size is the model's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from grm.models.store import ModelStoreError

MB = 1 << 20

CONFIG_MAX_BYTES = 8 * MB
"""Configuration files (JSON read whole by Python, each entry made an object)."""
TEMPLATE_MAX_BYTES = 1 * MB
"""A chat template: Jinja compiled to Python on first use."""
VOCAB_MAX_BYTES = 256 * MB
"""Vocabularies and tokenizer models (parsed by the tokenizers library)."""

FILE_LIMITS: dict[str, int] = {
    **dict.fromkeys(
        (
            "config.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "added_tokens.json",
            "generation_config.json",
            "chat_template.json",
            "preprocessor_config.json",
            "processor_config.json",
        ),
        CONFIG_MAX_BYTES,
    ),
    "chat_template.jinja": TEMPLATE_MAX_BYTES,
    **dict.fromkeys(
        ("tokenizer.json", "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model"),
        VOCAB_MAX_BYTES,
    ),
}

EXTRA_TEMPLATES = "additional_chat_templates"
"""A folder of named chat templates (``NAME.jinja``), each read like ``chat_template.jinja``."""
MAX_EXTRA_TEMPLATES = 64


def check_model_dir(path: Path) -> None:
    """``ModelStoreError`` naming the file when a file of ``path`` that transformers reads is not a
    regular file or is larger than any real model's (``FILE_LIMITS``)."""
    for name, limit in FILE_LIMITS.items():
        _check_file(path / name, limit)
    extra = path / EXTRA_TEMPLATES
    if extra.is_dir():
        try:
            with os.scandir(extra) as entries:
                names = [e.name for _, e in zip(range(MAX_EXTRA_TEMPLATES + 1), entries, strict=False)]
        except OSError as e:
            raise ModelStoreError(f"{extra}: cannot list ({e.strerror or e})") from None
        if len(names) > MAX_EXTRA_TEMPLATES:
            raise ModelStoreError(f"{extra}: more than {MAX_EXTRA_TEMPLATES} entries; no model has that many chat templates")
        for name in names:
            if name.endswith(".jinja"):
                _check_file(extra / name, TEMPLATE_MAX_BYTES)


def _check_file(path: Path, limit: int) -> None:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):
            raise ModelStoreError(f"{path}: a symbolic link to nothing") from None
        return
    except OSError as e:
        raise ModelStoreError(f"{path}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelStoreError(f"{path}: a directory where the model keeps a file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelStoreError(f"{path}: not a regular file (a FIFO, socket or device), which would never finish loading")
    if st.st_size > limit:
        raise ModelStoreError(f"{path}: {st.st_size:,} bytes, more than the {limit:,} a model's {path.name} may hold")
