"""A run's trained policy as weights: run and checkpoint directories, and the weights a checkpoint
of either trainer backend holds (LoRA adapters merged into their base). ``grm.models.trained`` makes
a Hugging Face directory of them.

A checkpoint holds the trainer's state, not a Hugging Face export: ``policy/model.safetensors``
(torch backend; tied tensors stored once) or ``policy/state/`` (DeepSpeed ``save_checkpoint``; ZeRO
1-3 keep the fp32 master weights partitioned in the optimizer files, so they are gathered with
DeepSpeed's own ``zero_to_fp32``; ZeRO-0 keeps the whole module in the model-states file). A LoRA
run (``train.lora``) stores only the adapters' weights and ``policy/lora.json`` (their settings);
they are merged into the base model's weights here (``W + B A alpha / r``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grm.base import GrmError, regular_file_bytes


class CheckpointError(GrmError):
    """A run or checkpoint directory that holds no usable weights (no checkpoint, a damaged one)."""


LORA_FILE = "lora.json"
"""``CHECKPOINT/policy/lora.json``: the adapter settings of a LoRA checkpoint (its weights are adapters only)."""


def is_run_dir(path: Path) -> bool:
    """A ``grm run`` directory: its recorded configuration beside its checkpoints folder."""
    return (path / "config.resolved.yaml").is_file() and (path / "checkpoints").is_dir()


def is_checkpoint_dir(path: Path) -> bool:
    """A checkpoint of a run (``RUN/checkpoints/step-N`` holding ``policy/``), complete or not."""
    return (path / "policy").is_dir() and path.parent.name == "checkpoints"


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoints with their ``COMPLETE`` marker, oldest first (a half-written one never counts)."""
    done = [p for p in (run_dir / "checkpoints").glob("step-*") if (p / "COMPLETE").exists() and p.name[5:].isdigit()]
    return sorted(done, key=lambda p: int(p.name[5:]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The run's newest complete checkpoint."""
    done = complete_checkpoints(run_dir)
    return done[-1] if done else None


def run_checkpoint(path: Path) -> tuple[Path, Path]:
    """(run directory, complete checkpoint) for a run directory (its latest) or a checkpoint directory."""
    if is_run_dir(path):
        ckpt = latest_checkpoint(path)
        if ckpt is None:
            raise CheckpointError(f"{path}: the run has no complete checkpoint (checkpoints/step-N with COMPLETE)")
        return path, ckpt
    real = path.resolve()
    if is_checkpoint_dir(real):
        if not (real / "COMPLETE").exists():
            raise CheckpointError(f"{path}: incomplete checkpoint (no COMPLETE marker); use a finished one")
        return real.parent.parent, real
    raise CheckpointError(
        f"{path}: not a run directory (config.resolved.yaml + checkpoints/) or a checkpoint (checkpoints/step-N)"
    )


def run_policy_role(run_dir: Path) -> dict[str, Any]:
    """The ``policy:`` block ``config.resolved.yaml`` records (``spec`` and ``overrides``)."""
    from grm.config import ConfigError, load_yaml

    rec = run_dir / "config.resolved.yaml"
    if not rec.is_file():
        raise CheckpointError(f"{run_dir}: no config.resolved.yaml, so the policy's base model is unknown")
    try:
        role = load_yaml(rec, own=True).data.get("policy")
    except ConfigError as e:
        raise CheckpointError(f"cannot read the run's recorded configuration: {e}") from None
    if not isinstance(role, dict) or "spec" not in role:
        raise CheckpointError(f"{rec}: no policy.spec (not a grm run directory?)")
    overrides = role.get("overrides") or []
    if not isinstance(role["spec"], str) or not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise CheckpointError(f"{rec}: policy.spec must be text and policy.overrides a list of texts, as grm run records them")
    return role


def run_base_model(run_dir: Path) -> str:
    """The base model (alias, directory or hub id) of the run's policy spec."""
    from grm.config import ConfigError, load_policy

    role = run_policy_role(run_dir)
    try:  # config.resolved.yaml records the spec path absolute (older runs: as written, from the run dir)
        return load_policy(str(role["spec"]), run_dir, list(role.get("overrides") or [])).model
    except ConfigError as e:
        raise CheckpointError(f"{run_dir / 'config.resolved.yaml'}: policy.spec: {e}") from None


# --------------------------------------------------------------------------- weights


def lora_settings(checkpoint: Path) -> dict[str, Any] | None:
    """The adapter settings of a LoRA checkpoint (``policy/lora.json``), None for full weights."""
    f = checkpoint / "policy" / LORA_FILE
    if not f.is_file():
        return None
    raw = regular_file_bytes(f, CheckpointError, limit=1 << 20)
    try:
        cfg = json.loads(raw or b"")
        number = (int, float)
        targets = cfg["target_modules"]
        ok = (
            type(cfg["r"]) is int
            and cfg["r"] >= 1
            and isinstance(cfg["alpha"], number)
            and cfg["alpha"] > 0
            and isinstance(cfg["dropout"], number)
            and 0 <= cfg["dropout"] < 1
            and isinstance(cfg["scaling"], number)
            and (targets == "all-linear" or (isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets)))
        )
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise CheckpointError(f"{f}: not a LoRA settings file grm wrote ({type(e).__name__}: {str(e)[:100]})") from None
    if not ok:
        raise CheckpointError(
            f"{f}: not a LoRA settings file grm wrote (r >= 1, alpha > 0, 0 <= dropout < 1, scaling, target_modules)"
        )
    return cfg


def raw_checkpoint_state(checkpoint: Path) -> dict[str, Any]:
    """The tensors the checkpoint's trainer saved (CPU), names as the trained module had them; of a
    LoRA checkpoint, the adapters only (DeepSpeed also keeps a tied head there)."""
    state = _saved_tensors(checkpoint)
    return {k: v for k, v in state.items() if ".lora_" in k} if lora_settings(checkpoint) else state


SAVED_GLOBALS = frozenset(
    {
        "numpy.ndarray",
        "numpy.dtype",
        "numpy._core.multiarray._reconstruct",
        "numpy.core.multiarray._reconstruct",
        "deepspeed.runtime.zero.config.ZeroStageEnum",
        "deepspeed.utils.tensor_fragment.fragment_address",
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",
        "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    }
)
"""The Python objects grm's trainers pickle besides tensors and plain values (DeepSpeed's state and
loss scaler, numpy's RNG state); ``numpy.dtypes.*`` too."""


def refuse_foreign_pickles(directory: str | Path) -> None:
    """CheckpointError naming the first ``*.pt`` file under ``directory`` whose pickle names any
    Python object but those grm's trainers save (``SAVED_GLOBALS``), read without unpickling it.

    ``torch.load`` (and DeepSpeed's loaders, which pass ``weights_only=False``) run whatever a
    pickle names: a crafted checkpoint in a run directory given to ``grm export``, ``grm eval
    --policy``, ``model:`` or ``--resume`` would run its code. Checked before any of them loads it.
    """
    import os

    import torch

    found = []
    for top, dirs, files in os.walk(directory):  # links to directories are not walked: refused instead
        for d in dirs:
            if (Path(top) / d).is_symlink():
                raise CheckpointError(
                    f"{Path(top) / d}: a symbolic link in a checkpoint; grm loads only what the checkpoint holds"
                )
        found += [Path(top) / f for f in files if f.endswith(".pt")]
    for f in sorted(found):
        if not f.is_file():
            raise CheckpointError(f"{f}: not a regular file (a FIFO, socket or device)")
        try:
            names = torch.serialization.get_unsafe_globals_in_checkpoint(str(f))
        except Exception as e:  # torch raises many types for a file that is not a torch zip archive
            raise CheckpointError(f"{f}: not a checkpoint file grm can read ({type(e).__name__})") from None
        foreign = [n for n in names if n not in SAVED_GLOBALS and not n.startswith("numpy.dtypes.")]
        if foreign:
            raise CheckpointError(
                f"{f}: its pickle names {foreign[0][:120]!r}, which grm's trainers never save; grm does not "
                "unpickle it (that could run any code): use a checkpoint grm wrote"
            )


def _saved_tensors(checkpoint: Path) -> dict[str, Any]:
    pdir = checkpoint / "policy"
    if (pdir / "model.safetensors").is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(pdir / "model.safetensors"))
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{pdir / 'model.safetensors'}: not a safetensors file grm can read ({str(e)[:200]})") from None
    state_dir = pdir / "state"
    if state_dir.is_dir():
        refuse_foreign_pickles(state_dir)
        if any(state_dir.glob("*zero_pp_rank_*optim_states.pt")):
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            kw = {"exclude_frozen_parameters": True} if lora_settings(checkpoint) else {}
            try:
                return dict(get_fp32_state_dict_from_zero_checkpoint(str(pdir), tag="state", **kw))
            except Exception as e:  # DeepSpeed raises many types for files that do not fit together
                raise CheckpointError(
                    f"{state_dir}: DeepSpeed cannot read its ZeRO states ({type(e).__name__}: {str(e)[:200]})"
                ) from None
        files = sorted(state_dir.glob("mp_rank_*_model_states.pt"))
        if files:
            import torch

            try:  # only the globals refuse_foreign_pickles allowed are in it
                module = torch.load(files[0], map_location="cpu", weights_only=False)["module"]
            except (KeyError, TypeError, ValueError, RuntimeError, EOFError) as e:
                raise CheckpointError(
                    f"{files[0]}: not a DeepSpeed model states file ({type(e).__name__}: {str(e)[:200]})"
                ) from None
            if not isinstance(module, dict):
                raise CheckpointError(f"{files[0]}: its 'module' is not a dict of tensors")
            return module
    raise CheckpointError(f"{pdir}: no policy weights (model.safetensors or a DeepSpeed state/ directory)")


def checkpoint_state(checkpoint: Path, base: Any | None = None) -> dict[str, Any]:
    """The trained policy's full weights (CPU tensors, Hugging Face names) from a checkpoint of either
    backend. A LoRA checkpoint's adapters are merged into ``base`` (the base model, loaded by the
    caller): the result then holds every weight ``base`` has, the adapted ones merged."""
    state = raw_checkpoint_state(checkpoint)
    lora = lora_settings(checkpoint)
    if lora is None:
        return state
    if base is None:
        raise CheckpointError(f"{checkpoint}: a LoRA checkpoint; its base model is needed to merge the adapters")
    from grm.models.lora import merge_adapter_state

    try:
        return merge_adapter_state(base.state_dict(), state, lora)
    except ValueError as e:
        raise CheckpointError(f"{checkpoint}: {e}") from None


def apply_state(model: Any, state: dict[str, Any], where: Path) -> None:
    """Load ``state`` into ``model``: every weight must match by name and shape, except the second
    name of a tied tensor, which checkpoints store once."""
    from grm.models.weights import mismatch, tied_aliases

    own = model.state_dict()
    if (why := mismatch(own, state, tied_aliases(own))) is not None:
        raise CheckpointError(f"{where}: the checkpoint does not fit the base model: {why}")
    model.load_state_dict(state, strict=False)
