"""What ``grm eval --policy POLICY`` evaluates: POLICY resolved to a base model, the trained weights
that replace its own (if any) and the policy spec's prompting, then an hf engine over them.

POLICY is one of
- a run directory of ``grm run`` (its latest complete checkpoint),
- a checkpoint directory (``RUN/checkpoints/step-N``),
- a policy spec (``policy/*.yaml`` or ``builtin:NAME``: model, system prompt, stop strings),
- a model: a builtin alias, a local Hugging Face model directory, or a hub id.

A checkpoint holds the trainer's state, not a Hugging Face export: ``policy/model.safetensors``
(torch backend; tied tensors stored once) or ``policy/state/`` (DeepSpeed ``save_checkpoint``; ZeRO
1-3 keep the fp32 master weights partitioned in the optimizer files, so they are gathered with
DeepSpeed's own ``zero_to_fp32``; ZeRO-0 keeps the whole module in the model-states file). The
weights are loaded into the base model named by the run's policy spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.base import GrmError


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


def _from_spec(ref: str, base_dir: Path, overrides: list[str], where: str) -> PolicySource:
    from grm.config import ConfigError, load_policy

    try:
        spec = load_policy(ref, base_dir, overrides)
    except ConfigError as e:
        raise PolicySourceError(f"{where}: {e}") from None
    dtype = spec.engine.dtype if spec.engine.type == "hf" else "fp32"
    return PolicySource(ref, spec.model, None, spec.system_prompt, tuple(spec.generation.stop), dtype)


def _from_run(run_dir: Path, checkpoint: Path, ref: str) -> PolicySource:
    from grm.config import ConfigError, load_yaml

    rec = run_dir / "config.resolved.yaml"
    if not rec.is_file():
        raise PolicySourceError(f"{checkpoint}: no {rec} beside it, so the policy's base model is unknown")
    try:
        role = load_yaml(rec).data.get("policy")
    except ConfigError as e:
        raise PolicySourceError(f"cannot read the run's recorded configuration: {e}") from None
    if not isinstance(role, dict) or "spec" not in role:
        raise PolicySourceError(f"{rec}: no policy.spec (not a grm run directory?)")
    # config.resolved.yaml records the spec path absolute (older runs: as written, tried from the run dir)
    src = _from_spec(str(role["spec"]), run_dir, list(role.get("overrides") or []), f"{rec}: policy.spec")
    return PolicySource(ref, src.model, checkpoint.resolve(), src.system_prompt, src.stop, src.dtype)


def resolve_policy(ref: str) -> PolicySource:
    """POLICY -> what to load and how to prompt it; a clear error when it names nothing usable."""
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


def checkpoint_state(checkpoint: Path) -> dict[str, Any]:
    """The trained policy's full weights (CPU tensors) from a checkpoint of either trainer backend."""
    pdir = checkpoint / "policy"
    if (pdir / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(pdir / "model.safetensors"))
    state_dir = pdir / "state"
    if state_dir.is_dir():
        if any(state_dir.glob("*zero_pp_rank_*optim_states.pt")):
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            return dict(get_fp32_state_dict_from_zero_checkpoint(str(pdir), tag="state"))
        files = sorted(state_dir.glob("mp_rank_*_model_states.pt"))
        if files:
            import torch

            return torch.load(files[0], map_location="cpu", weights_only=False)["module"]
    raise PolicySourceError(f"{pdir}: no policy weights (model.safetensors or a DeepSpeed state/ directory)")


def apply_state(model: Any, state: dict[str, Any], where: Path) -> None:
    """Load ``state`` into ``model``: every weight must match by name and shape, except the second
    name of a tied tensor, which checkpoints store once."""
    from grm.models.weights import tied_aliases

    own = model.state_dict()
    missing = set(own) - set(state) - tied_aliases(own)
    unexpected = set(state) - set(own)
    wrong = [k for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape)]
    if missing or unexpected or wrong:
        raise PolicySourceError(
            f"{where}: the checkpoint does not fit the base model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}, shape differs {sorted(wrong)[:3]}"
        )
    model.load_state_dict(state, strict=False)


def load_engine(src: PolicySource, *, max_batch_size: int = 32) -> Any:
    """An hf engine generating with the policy (base model, with the checkpoint's weights if any)."""
    from grm.engines.hf import HFEngine
    from grm.models.loading import load_model

    model, tok = load_model(src.model, src.dtype)
    if src.checkpoint is not None:
        apply_state(model, checkpoint_state(src.checkpoint), src.checkpoint)
    return HFEngine(src.model, dtype=src.dtype, model_obj=model, tokenizer=tok, max_batch_size=max_batch_size)
