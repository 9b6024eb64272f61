"""What ``grm run --resume`` may change in a run directory, and what it must leave alone.

A run directory keeps ``config.resolved.yaml`` as its first start wrote it; each resume adds
``config.resume-K.yaml`` (K = 1, 2, ...) with the configuration it ran under, so the record of every
start survives. Before writing anything, a resume is checked against the first start: the fields of
``RESUME_KEEPS`` made the checkpoints and the prompt order and must not change, so a resume that
changes one is refused with the run directory left exactly as it was.

On resume the log lines of steps after the checkpoint are cut off ``metrics.jsonl``,
``samples.jsonl`` and ``heldout.jsonl`` in place (``cut_after``): lines are appended in step order, so what goes is a tail,
and shortening a file needs no free space (a full disk is a common reason to resume).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import yaml

from grm.base import atomic_write_text, open_own
from grm.config.yaml_reader import ConfigError, load_yaml
from grm.orchestrator.errors import RunError
from grm.run_format import FORMAT_KEY, check_format, line_format, read_row

CONFIG = "config.resolved.yaml"
"""The first start's resolved pipeline, never rewritten."""

RESUME_KEEPS = (
    "seed",  # the prompt order and every rollout's sampling seed
    "data",  # the prompt stream a checkpoint's position points into
    "policy.spec",  # the model the checkpoint's weights belong to
    "policy.overrides",
    "algorithm.type",  # PPO's checkpoints carry a critic
    "algorithm.epochs",  # optimizer steps per batch: the policy version counts batches by them
    "algorithm.mini_batches",
    "train.backend.type",  # the checkpoint's layout: torch files or DeepSpeed ZeRO shards
    "train.backend.ranks",  # one ZeRO shard per rank
    "train.backend.zero_stage",
    "train.backend.dtype",
)
"""Dotted fields a resume must keep as the first start recorded them (a mapping: every field in it)."""

ALWAYS_RECORDED = ("seed", "data", "policy.spec", "algorithm.type")
"""Fields of ``RESUME_KEEPS`` every grm has recorded: a record without one was not written by grm
run (or was edited), and a resume cannot be checked against it. The others may be missing from a
run of an older grm: not compared, and said so."""

_RESUME_RECORD = re.compile(r"config\.resume-(\d+)\.yaml")


def _leaves(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(f"{prefix}.{k}", v))
        return out
    return {prefix: value}


def _at(data: Any, dotted: str) -> tuple[bool, Any]:
    for key in dotted.split("."):
        if not isinstance(data, dict) or key not in data:
            return False, None
        data = data[key]
    return True, data


def recorded_config(run_dir: Path) -> dict[str, Any]:
    """The first start's configuration, or RunError naming the file when it cannot be read."""
    path = run_dir / CONFIG
    try:  # within a config's bounds: comparing an alias bomb's fields would walk billions of values
        return load_yaml(path, own=True).data
    except ConfigError as e:
        raise RunError(f"cannot read the run's recorded configuration: {e}") from None


def _same(key: str, was: Any, now: Any) -> bool:
    """Whether a recorded field equals its value now; a file path that an older grm recorded as
    written (relative) is compared from the working directory, as grm resolves it now."""
    if key in ("policy.spec", "data.prompts") and isinstance(was, str) and isinstance(now, str):
        if not was.startswith("builtin:") and not Path(was).is_absolute():
            return str(Path(was).resolve()) == now
    return was == now


def check_resumable(run_dir: Path, now: dict[str, Any]) -> None:
    """RunError naming every field of ``RESUME_KEEPS`` that ``now`` (the resume's resolved config,
    as JSON data) changes from the first start; reads only. A field the first start did not record
    (a run from an older grm, or one added since) is not compared, and said so; a record without one
    of ``ALWAYS_RECORDED`` is refused."""
    first = recorded_config(run_dir)
    lost = [f for f in ALWAYS_RECORDED if not _at(first, f)[0]]
    if lost:
        raise RunError(
            f"{run_dir / CONFIG}: records no {', '.join(lost)}: not the configuration grm run writes, so this "
            "resume cannot be checked against the first start; start a new run (another out_dir) instead"
        )
    changed, unrecorded = [], []
    for dotted in RESUME_KEEPS:
        had, old = _at(first, dotted)
        if not had:
            unrecorded.append(dotted)
            continue
        new_leaves = _leaves(dotted, _at(now, dotted)[1])
        for key, was in sorted(_leaves(dotted, old).items()):
            if not _same(key, was, new_leaves.get(key)):
                changed.append(f"{key}: recorded {was!r}, now {new_leaves.get(key)!r}")
    if changed:
        raise RunError(
            f"{run_dir}: cannot resume with this pipeline: {'; '.join(changed)} ({run_dir / CONFIG}); these made the "
            "run's checkpoints and prompt order, so a resume must keep them; start a new run (another out_dir) instead"
        )
    if unrecorded:
        print(f"{run_dir / CONFIG} does not record {', '.join(unrecorded)} (an older grm's run?): not compared on this resume")


def record_start(run_dir: Path, now: dict[str, Any], resumed_from: Path | None) -> Path:
    """Write this start's configuration: ``config.resolved.yaml`` for the first start, else the next
    ``config.resume-K.yaml`` (the earlier records stay as they are)."""
    text = yaml.safe_dump(now, sort_keys=False, allow_unicode=True)
    if resumed_from is None:
        path = run_dir / CONFIG
    else:
        done = [int(m.group(1)) for p in run_dir.iterdir() if (m := _RESUME_RECORD.fullmatch(p.name))]
        path = run_dir / f"config.resume-{max(done, default=0) + 1}.yaml"
        text = f"# grm run --resume from {resumed_from.name}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n{text}"
    try:
        atomic_write_text(path, text)
    except OSError as e:
        raise RunError(f"{path}: cannot write the run's configuration ({e.strerror or e})") from None
    return path


# The recorder writes "step" as every row's first key and its format as the last: read from the
# line's ends, a line of a 150 MB samples.jsonl costs two regexes, not a json.loads (grm.view.index
# measures the same shortcut).
_STEP = re.compile(rb'^\{\s*"step"\s*:\s*(-?\d{1,18})(?![\d.eE])')
_FORMAT = f'"{FORMAT_KEY}"'.encode()


def _step_of(line: bytes, path: Path, n: int, kind: str) -> int:
    """The step of line ``n``; RunError naming it when it has none, or a format this grm cannot read."""
    m, fmt = _STEP.match(line), line_format(line)
    if m and (fmt is not None or _FORMAT not in line):
        check_format(kind, 1 if fmt is None else fmt, f"{path}:{n}", RunError)
        return int(m.group(1))
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise RunError(
            f"{path}:{n}: not a JSON line ({e}); only the last line can be cut short by a killed writer: mend or delete it"
        ) from None
    if isinstance(row, dict):
        read_row(kind, row, f"{path}:{n}", RunError)
    step = row.get("step") if isinstance(row, dict) else None
    if type(step) is not int:
        raise RunError(f"{path}:{n}: no integer 'step' field; not a line grm run writes")
    return step


def cut_after(path: Path, step: int, kind: str | None = None) -> None:
    """Cut the lines of steps after ``step``, and a torn last line, off the end of ``path`` (a
    metrics.jsonl, samples.jsonl or heldout.jsonl: ``kind``, by default the file's stem), in place and fsynced.
    RunError naming the file (and line) when it cannot be read or cut, when a line of an earlier
    step follows one of a later step, or when a line has a format this grm cannot read."""
    kind = kind or path.stem
    if not os.path.lexists(path):
        return
    fd = open_own(path, os.O_RDWR, RunError)  # a link is refused (cutting it would cut its target), a FIFO or device too
    try:
        with os.fdopen(fd, "r+b") as fh:
            offset, cut = 0, None
            for n, line in enumerate(fh, 1):
                if not line.endswith(b"\n"):  # torn: its writer was killed mid-line
                    cut = offset if cut is None else cut
                    break
                if line.strip():
                    s = _step_of(line, path, n, kind)
                    if s > step and cut is None:
                        cut = offset
                    elif s <= step and cut is not None:
                        raise RunError(
                            f"{path}:{n}: a line of step {s} after lines of later steps; the file is not in step "
                            f"order, so resuming from step {step} cannot cut its later steps off the end"
                        )
                offset += len(line)
            if cut is not None:
                fh.truncate(cut)
                fh.flush()
                os.fsync(fh.fileno())
    except OSError as e:
        raise RunError(f"{path}: cannot cut the lines after step {step} ({e.strerror or e})") from None
