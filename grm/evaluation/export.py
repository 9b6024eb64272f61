"""``grm export``: a run's trained policy as a Hugging Face model directory, what TRL and OpenRLHF
hand their users (a checkpoint holds the trainer's state: ~2 GB for SmolLM2, most of it the optimizer's).

The weights come as ``grm eval --policy`` loads them (``grm.evaluation.policy_source``: the base
model named by the run's policy spec, with the checkpoint's full weights, DeepSpeed ZeRO shards
gathered), in the precision the checkpoint keeps them (ZeRO: the fp32 master weights). Written:
``config.json``, ``model.safetensors``, ``generation_config.json``, the tokenizer's files and a short
``README.md`` model card (pipeline, base model, judges and weights, algorithm, step, that step's
main metrics). The directory is built beside ``--out`` and renamed into place
(``grm.base.atomic_dir``, which also leaves its ``COMPLETE`` marker): a crash leaves no half export.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grm.base import GrmError, atomic_dir
from grm.evaluation.policy_source import PolicySource, resolve_policy
from grm.models.checkpoints import CheckpointError, complete_checkpoints, is_checkpoint_dir, is_run_dir
from grm.models.trained import write_adapter_dir, write_hf_dir

WRITTEN = "config.json, model.safetensors, generation_config.json, tokenizer files, README.md"
"""What an export holds, in words (the CLI's summary line)."""
ADAPTER_WRITTEN = "adapter_config.json, adapter_model.safetensors, tokenizer files, README.md"
"""What an adapter-only export (``--adapter``, a LoRA run) holds."""
CARD_METRICS = ("reward_mean", "kl", "entropy", "response_len_mean", "masked")
"""metrics.jsonl keys the model card shows (with ``reward/JUDGE`` of each judge after the first)."""
LAYOUT = "a run directory (config.resolved.yaml + checkpoints/) or a checkpoint (RUN/checkpoints/step-N)"


class ExportError(GrmError):
    """SOURCE holds no checkpoint to export, or OUT cannot take the export."""


def _step(ckpt: Path) -> int:
    return int(ckpt.name[5:])


def find_checkpoint(source: Path, step: int | None = None) -> tuple[Path, Path]:
    """(run directory, complete checkpoint) that SOURCE and ``--step`` name; ExportError naming
    SOURCE otherwise (with the steps there are, when ``--step`` names none of them)."""
    if not source.is_dir():
        why = "no such directory" if not source.exists() else "not a directory"
        raise ExportError(f"{source}: {why}; expected {LAYOUT}")
    if is_run_dir(source):
        done = complete_checkpoints(source)
        if step is None:
            if not done:
                raise ExportError(f"{source}: the run has no complete checkpoint (checkpoints/step-N with COMPLETE)")
            return source, done[-1]
        hit = [p for p in done if _step(p) == step]
        if not hit:
            half = " (it is incomplete: no COMPLETE marker)" if (source / "checkpoints" / f"step-{step}").is_dir() else ""
            have = ", ".join(str(_step(p)) for p in done) or "none"
            raise ExportError(f"{source}: no complete checkpoint for --step {step}{half}; complete steps: {have}")
        return source, hit[0]
    real = source.resolve()  # `grm export step-2` (or `.`) from inside checkpoints/ names its run too
    if is_checkpoint_dir(real) and real.name.startswith("step-") and real.name[5:].isdigit():
        if not (real / "COMPLETE").exists():
            raise ExportError(f"{source}: incomplete checkpoint (no COMPLETE marker); export a finished one")
        if step is not None and _step(real) != step:
            raise ExportError(f"{source}: --step {step} names another checkpoint; --step picks one of a run directory")
        return real.parent.parent, real
    if (source / "config.json").is_file():
        raise ExportError(f"{source}: already a Hugging Face model directory (config.json); nothing to export")
    raise ExportError(f"{source}: not {LAYOUT}")


def check_out(out: Path, force: bool, run_dir: Path) -> None:
    """OUT must be new, an empty directory, or (``force``) a directory to replace, and never the run
    itself or its checkpoints folder (``--force`` would delete them)."""
    if out.is_symlink():  # the rename into place would replace the link, not fill what it points to
        raise ExportError(f"--out {out}: is a symbolic link; give the directory itself")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out}: exists and is not a directory; give a directory to create")
    target, run = out.resolve(), run_dir.resolve()
    if run.is_relative_to(target) or target.is_relative_to((run_dir / "checkpoints").resolve()):  # through a link too
        raise ExportError(f"--out {out}: would replace the run {run_dir} or write among its checkpoints; choose another")
    if out.is_dir() and not force and any(out.iterdir()):
        raise ExportError(f"--out {out}: exists and is not empty; use --force to replace it, or another --out")


def export_policy(source: Path, out: Path, step: int | None = None, force: bool = False, adapter: bool = False) -> Path:
    """Write the policy of SOURCE (a run directory: its latest complete checkpoint, or ``step``; or a
    checkpoint directory) to ``out`` as a Hugging Face model directory (a LoRA run's adapters merged),
    or with ``adapter`` a LoRA run's adapters alone as a ``peft`` adapter directory; returns ``out``."""
    source, out = Path(source).expanduser(), Path(out).expanduser()
    run_dir, ckpt = find_checkpoint(source, step)
    check_out(out, force, run_dir)
    src = resolve_policy(str(ckpt))  # the base model and prompting the run's config records
    card = model_card(run_dir, ckpt, src)
    with atomic_dir(out) as tmp:
        try:
            if adapter:
                write_adapter_dir(src.model, ckpt, tmp)
            else:
                write_model(src, tmp)
        except CheckpointError as e:
            raise ExportError(str(e)) from None
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out


def write_model(src: PolicySource, where: Path) -> None:
    """The base model with the checkpoint's weights, its tokenizer and generation config, into ``where``."""
    assert src.checkpoint is not None
    write_hf_dir(src.model, src.checkpoint, where)


# --------------------------------------------------------------------------- the model card


def _run_config(run_dir: Path) -> dict[str, Any]:
    from grm.config import ConfigError, load_yaml

    try:
        data = load_yaml(run_dir / "config.resolved.yaml", own=True).data
    except ConfigError:  # resolve_policy read it a moment ago; the card then says less
        return {}
    return data if isinstance(data, dict) else {}


def _judges(cfg: dict[str, Any], run_dir: Path) -> list[tuple[str, Any]]:
    """(name, weight) of each judge: the name its spec gives (metrics keys use it), else the spec as recorded."""
    from grm.config import ConfigError, load_judge

    out = []
    for role in cfg.get("judges") or []:
        if not isinstance(role, dict):
            continue
        name, overrides = str(role.get("spec")), role.get("overrides") or []
        if isinstance(role.get("spec"), str) and isinstance(overrides, list) and all(isinstance(o, str) for o in overrides):
            try:
                name = load_judge(name, run_dir, overrides).name
            except (ConfigError, OSError, ValueError):
                pass
        weight = role.get("weight", 1.0)
        out.append((name, weight if isinstance(weight, (int, float)) and not isinstance(weight, bool) else None))
    return out


def _metrics_row(run_dir: Path, step: int) -> tuple[dict[str, Any] | None, str | None]:
    """(the metrics line of ``step``, else the last one before it; or None) and why none could be read."""
    from grm.jsonl import JsonlError, read_jsonl
    from grm.run_format import read_row

    def check(row: dict[str, Any]) -> None:
        read_row("metrics", row)  # a newer format refused, an older one migrated

    try:
        rows = read_jsonl(run_dir / "metrics.jsonl", repair=False, check=check, own=True)
    except JsonlError as e:
        return None, str(e)
    before = [r for r in rows if isinstance(r.get("step"), int) and r["step"] <= step]
    return (before[-1] if before else None), None


def _number(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "n/a" if v is None else str(v)
    return f"{v:.4g}"


def _base_hub_id(model: str) -> str | None:
    """The base model's hub id, for the card's ``base_model`` (a local directory has none)."""
    from grm.models.store import ALIASES

    if model in ALIASES:
        return ALIASES[model].hf_name
    if model.count("/") == 1 and not model.startswith((".", "/", "~")) and not Path(model).exists():
        return model
    return None


def model_card(run_dir: Path, ckpt: Path, src: PolicySource) -> str:
    """README.md of an export: where the weights come from and the exported step's main numbers."""
    cfg = _run_config(run_dir)
    step = _step(ckpt)
    algo = cfg.get("algorithm") if isinstance(cfg.get("algorithm"), dict) else {}
    train = cfg.get("train") if isinstance(cfg.get("train"), dict) else {}
    judges = _judges(cfg, run_dir)
    hub = _base_hub_id(src.model)
    front = [f"base_model: {json.dumps(hub)}"] if hub else []
    head = ["---", *front, "library_name: transformers", "tags: [grm, rlaif]", "---"]
    of = f" of {train['steps']}" if isinstance(train.get("steps"), int) else ""
    where = f"{run_dir.resolve().name}/checkpoints/{ckpt.name}"
    lines = [
        *head,
        f"# {cfg.get('name', 'grm')}: policy at step {step}",
        "",
        f"Trained with grm (RLAIF with generative reward models); exported by `grm export` from run `{where}`.",
        "",
        f"- pipeline: {cfg.get('name', 'unknown')}",
        f"- base model: {src.model}" + (f" ({hub})" if hub and hub != src.model else ""),
        f"- algorithm: {algo.get('type', 'unknown')}",
        "- judges: " + (", ".join(f"{n} (weight {_number(w)})" for n, w in judges) or "unknown"),
        f"- step: {step}{of}",
    ]
    if src.system_prompt:
        lines.append(f"- system prompt in training: {json.dumps(src.system_prompt, ensure_ascii=False)}")
    if src.stop:
        lines.append(f"- stop strings in training: {json.dumps(list(src.stop), ensure_ascii=False)}")
    row, unread = _metrics_row(run_dir, step)
    if unread:
        lines += ["", f"metrics.jsonl could not be read: {unread}"]
    elif row is not None:
        keys = [CARD_METRICS[0], *(f"reward/{n}" for n, _ in judges), *CARD_METRICS[1:]]
        lines += ["", f"## Metrics at step {row['step']} (metrics.jsonl)", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {_number(row[k])} |" for k in keys if k in row]
    return "\n".join(lines) + "\n"
