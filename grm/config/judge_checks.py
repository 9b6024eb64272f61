"""A pipeline judge's checks on labelled pairs: the gate before training and the canary during it
(``judges[].gate``, ``judges[].canary``), and the data sources they read."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator

from grm.config.base import Strict, check_file
from grm.config.paths import BUILTIN_DATA_SETS, resolve_path


def check_source(v: str, info: ValidationInfo) -> str:
    """A data source: builtin:NAME of a generated set, or a file/dir relative to the pipeline."""
    if v.startswith("builtin:"):
        if v.removeprefix("builtin:") not in BUILTIN_DATA_SETS:
            raise ValueError(f"unknown builtin data set '{v}'; known: {', '.join(BUILTIN_DATA_SETS)}")
        return v
    check_file(v, info, "pipelines")
    base = (info.context or {}).get("base_dir")
    if base is not None:
        path = resolve_path(v, Path(base), "pipelines")
        if not path.is_dir():
            if not path.is_file():
                raise ValueError(f"{path}: not a regular file (a FIFO or device); give a data file or a saved dataset")
            if path.suffix not in DATA_SUFFIXES:
                raise ValueError(
                    f"{path}: unsupported data file type '{path.suffix}'; use {', '.join(DATA_SUFFIXES)} or a saved datasets dir"
                )
    return v


DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
"""The data files grm reads (``grm.data.sources``); a directory is a saved ``datasets`` set."""


class GateSpec(Strict):
    """Judge gate: before training, the judge is evaluated on labelled pairs through ``grm eval``'s
    code; below the bar the run stops before the policy is loaded."""

    data: str
    """Labelled pairs (prompt, two responses, label 1/2): builtin:arith-pairs, or an LLMBar-style
    .json/.jsonl/.csv/.parquet file (path relative to this pipeline) with input/output_1/output_2/label
    or prompt/response_a/response_b/label columns."""
    min_accuracy: float = Field(ge=0, le=1)
    """The bar, as a fraction of pairs in [0, 1]: the judge's swap-combined accuracy (``grm eval``'s
    ``accuracy_swap_combined``; ties and masked judgments count as wrong) must be at least this."""
    limit: int | None = Field(None, ge=1, le=10**9)
    """Evaluate only the first N pairs of ``data``; None: all of them."""

    @field_validator("data")
    @classmethod
    def _source(cls, v: str, info: ValidationInfo) -> str:
        return check_source(v, info)


class CanarySpec(Strict):
    """Judge canary: during training the judge re-scores a fixed labelled set, so drift of the judge
    (a restarted replica on another device, a changed engine, numerical trouble) shows in metrics."""

    data: str
    """Labelled pairs, as for ``gate.data`` (builtin:NAME or a file relative to this pipeline)."""
    every: int = Field(ge=1, le=10**7)
    """Re-score the set after every K-th training step (steps K, 2K, ...)."""
    limit: int = Field(32, ge=1, le=1 << 20)
    """Pairs re-scored each time: the first N of ``data`` (every reading uses the same ones)."""
    max_drop: float = Field(0.1, ge=0, le=1)
    """Largest tolerated fall of the canary's accuracy, in accuracy points (fraction of pairs, [0, 1])
    below its first reading of the run; a larger fall prints a warning and is listed in report.md."""

    @field_validator("data")
    @classmethod
    def _source(cls, v: str, info: ValidationInfo) -> str:
        return check_source(v, info)
