"""What ``grm eval --policy POLICY`` evaluates: POLICY resolved to a base model, the trained weights
that replace its own (if any) and the policy spec's prompting, then an hf engine over them.

POLICY is one of
- a run directory of ``grm run`` (its latest complete checkpoint),
- a checkpoint directory (``RUN/checkpoints/step-N``),
- a policy spec (``policy/*.yaml`` or ``builtin:NAME``: model, system prompt, stop strings),
- a model: a builtin alias, a local Hugging Face model directory, or a hub id.

A checkpoint's weights (either trainer backend, LoRA adapters merged: ``grm.models.checkpoints``)
are loaded into the base model named by the run's policy spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.base import GrmError
from grm.models.checkpoints import CheckpointError, is_checkpoint_dir, is_run_dir, latest_checkpoint, run_policy_role


class PolicySourceError(GrmError):
    """POLICY names nothing loadable (no such run, checkpoint, spec or model; a damaged checkpoint)."""


@dataclass(frozen=True)
class PolicySource:
    ref: str
    """POLICY as given on the command line."""
    model: str
    """Base model (alias, directory or hub id): the architecture, tokenizer and chat template."""
    checkpoint: Path | None = None
    """Checkpoint directory whose trained policy weights replace the base model's; None: the model as is."""
    system_prompt: str | None = None
    stop: tuple[str, ...] = ()
    dtype: str = "fp32"

    def identity(self) -> dict[str, Any]:
        """What makes two evaluations' responses comparable (recorded and checked on resume)."""
        return {
            "model": self.model,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "system_prompt": self.system_prompt,
            "stop": list(self.stop),
            "dtype": self.dtype,
        }

    def describe(self) -> str:
        return f"{self.model} + {self.checkpoint}" if self.checkpoint else self.model


def _from_spec(ref: str, base_dir: Path, overrides: list[str], where: str) -> PolicySource:
    from grm.config import ConfigError, load_policy

    try:
        spec = load_policy(ref, base_dir, overrides)
    except ConfigError as e:
        raise PolicySourceError(f"{where}: {e}") from None
    dtype = spec.engine.dtype if spec.engine.type == "hf" else "fp32"
    return PolicySource(ref, spec.model, None, spec.system_prompt, tuple(spec.generation.stop), dtype)


def _from_run(run_dir: Path, checkpoint: Path, ref: str) -> PolicySource:
    try:
        role = run_policy_role(run_dir)
    except CheckpointError as e:
        raise PolicySourceError(str(e)) from None
    # config.resolved.yaml records the spec path absolute (older runs: as written, tried from the run dir)
    where = f"{run_dir / 'config.resolved.yaml'}: policy.spec"
    src = _from_spec(str(role["spec"]), run_dir, list(role.get("overrides") or []), where)
    return PolicySource(ref, src.model, checkpoint.resolve(), src.system_prompt, src.stop, src.dtype)


def resolve_policy(ref: str) -> PolicySource:
    """POLICY -> what to load and how to prompt it; a clear error when it names nothing usable."""
    if not ref.strip():  # Path("") is the current directory
        raise PolicySourceError("--policy is empty; give a run directory, a checkpoint, a policy YAML or a model")
    path = Path(ref).expanduser()
    if path.is_dir():
        if is_run_dir(path):
            ckpt = latest_checkpoint(path)
            if ckpt is None:
                raise PolicySourceError(f"{path}: the run has no complete checkpoint (checkpoints/step-N with COMPLETE)")
            return _from_run(path, ckpt, ref)
        if is_checkpoint_dir(path):
            if not (path / "COMPLETE").exists():
                raise PolicySourceError(f"{path}: incomplete checkpoint (no COMPLETE marker); use a finished one")
            return _from_run(path.parent.parent, path, ref)
        if (path / "config.json").is_file():
            return PolicySource(ref, str(path.resolve()))
        raise PolicySourceError(
            f"{path}: not a run directory (config.resolved.yaml + checkpoints/), a checkpoint (checkpoints/step-N) "
            "or a Hugging Face model directory (config.json)"
        )
    if ref.endswith((".yaml", ".yml")) or ref.startswith("builtin:"):
        return _from_spec(ref, Path.cwd(), [], f"--policy {ref}")
    from grm.models.store import ALIASES

    if ref in ALIASES or (ref.count("/") == 1 and not ref.startswith((".", "/", "~"))):
        return PolicySource(ref, ref)
    raise PolicySourceError(
        f"--policy {ref}: not a run or checkpoint directory, a policy spec (.yaml, builtin:NAME), a builtin model "
        f"({', '.join(ALIASES)}), a local model directory or a hub id"
    )


# --------------------------------------------------------------------------- loading weights


def load_engine(src: PolicySource, *, max_batch_size: int = 32) -> Any:
    """An hf engine generating with the policy (base model, with the checkpoint's weights if any)."""
    from grm.engines.hf import HFEngine
    from grm.models.loading import load_model, load_trained

    try:
        model, tok = load_trained(src.model, src.checkpoint, src.dtype) if src.checkpoint else load_model(src.model, src.dtype)
    except CheckpointError as e:
        raise PolicySourceError(str(e)) from None
    return HFEngine(src.model, dtype=src.dtype, model_obj=model, tokenizer=tok, max_batch_size=max_batch_size)
