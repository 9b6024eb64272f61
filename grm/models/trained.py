"""A run directory or checkpoint is a model anywhere a model is named (a judge's ``model:``, a
policy spec, ``grm eval --policy``, ``grm export``): ``resolve_model`` turns it into a Hugging Face
directory, made once from the checkpoint's weights (``grm.models.checkpoints``: either trainer
backend, LoRA adapters merged) into the model store, or the run's own ``RUN/model/`` export.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from grm.base import atomic_dir
from grm.models.checkpoints import (
    LORA_FILE,
    CheckpointError,
    apply_state,
    checkpoint_state,
    is_checkpoint_dir,
    is_run_dir,
    latest_checkpoint,
    lora_settings,
    raw_checkpoint_state,
    run_base_model,
    run_checkpoint,
)
from grm.models.model_files import check_model_dir
from grm.models.store import ModelStoreError, local_path, store_dir, store_lock, store_path


def resolve_model(ref: str) -> str:
    """What ``from_pretrained`` loads for a model reference: a builtin alias (fetched on first use),
    a local Hugging Face model directory, a grm run directory or checkpoint (its trained policy,
    ``trained_model_dir``), or a hub id (``grm.models.store.store_path``). A local directory's files
    are checked before transformers reads them (``grm.models.model_files``)."""
    where = _resolve(ref)
    if Path(where).is_dir():
        check_model_dir(Path(where))
    return where


def _resolve(ref: str) -> str:
    path = local_path(ref, "model")
    if path.is_dir() and not (path / "config.json").is_file() and (is_run_dir(path) or is_checkpoint_dir(path.resolve())):
        try:
            return str(trained_model_dir(path))
        except CheckpointError as e:
            raise ModelStoreError(str(e)) from None
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelStoreError(
            f"{path} is a directory but has no config.json: not a Hugging Face model dir, nor a grm run "
            "directory (config.resolved.yaml + checkpoints/) or a checkpoint (RUN/checkpoints/step-N)"
        )
    return store_path(ref)


def _base(model: str) -> tuple[Any, Any]:
    """(fp32 causal LM, tokenizer) of a base model, which may itself be a trained run."""
    import torch

    from grm.models.hf_load import causal_lm_at, tokenizer_at

    path = resolve_model(model)
    return causal_lm_at(path, torch.float32), tokenizer_at(path)


def write_hf_dir(base_model: str, checkpoint: Path, where: Path) -> None:
    """The base model with the checkpoint's weights (adapters merged), its tokenizer and generation
    config, into ``where``, in the precision the checkpoint keeps them (fp32 masters stay fp32)."""
    model, tok = _base(base_model)
    state = checkpoint_state(checkpoint, model)
    apply_state(model, state, checkpoint)
    kept = {v.dtype for v in raw_checkpoint_state(checkpoint).values() if v.is_floating_point()}
    del state
    if len(kept) == 1:
        model.to(kept.pop())
    model.save_pretrained(str(where))  # safetensors (transformers' default since 4.35)
    tok.save_pretrained(str(where))
    if not (where / "generation_config.json").is_file():  # a base model without one
        from transformers import GenerationConfig

        GenerationConfig.from_model_config(model.config).save_pretrained(str(where))


def write_adapter_dir(base_model: str, checkpoint: Path, where: Path) -> None:
    """A LoRA checkpoint's adapters alone, as ``peft`` saves them (``adapter_config.json``,
    ``adapter_model.safetensors``; ``peft.PeftModel.from_pretrained(base, where)`` loads them), with
    the base model's tokenizer."""
    cfg = lora_settings(checkpoint)
    if cfg is None:
        raise CheckpointError(f"{checkpoint}: not a LoRA checkpoint (no policy/{LORA_FILE}); export the whole model")
    from grm.config.pipeline import LoraSpec
    from grm.models.lora import load_adapters, wrap

    model, tok = _base(base_model)
    spec = LoraSpec(r=cfg["r"], alpha=cfg["alpha"], dropout=cfg["dropout"], target_modules=cfg["target_modules"])
    adapted = wrap(model, spec)
    try:
        load_adapters(adapted, raw_checkpoint_state(checkpoint), str(checkpoint))
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    adapted.save_pretrained(str(where))
    tok.save_pretrained(str(where))


def trained_model_dir(path: Path) -> Path:
    """A Hugging Face directory holding the policy of a run directory (its latest checkpoint) or a
    checkpoint directory: the run's own ``RUN/model/`` when it is the latest checkpoint's export
    (written when the run completed), else an export made once into the model store
    (``GRM_HOME/trained/``), keyed by the checkpoint's path and completion time, so a checkpoint
    rewritten in place is exported anew."""
    run_dir, ckpt = run_checkpoint(path)
    own = run_dir / "model"
    done = ckpt / "COMPLETE"
    if ckpt == latest_checkpoint(run_dir) and (own / "config.json").is_file() and (own / "COMPLETE").exists():
        if (own / "COMPLETE").stat().st_mtime_ns >= done.stat().st_mtime_ns:
            return own.resolve()
    key = hashlib.sha256(f"{ckpt.resolve()}:{done.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    out = store_dir("trained") / f"{run_dir.resolve().name}-{ckpt.name}-{key}"
    with store_lock(f"trained-{out.name}"):  # two judge replicas asking at once export it once
        if not (out / "COMPLETE").exists():
            base = run_base_model(run_dir)
            with atomic_dir(out) as tmp:
                write_hf_dir(base, ckpt, tmp)
    return out
