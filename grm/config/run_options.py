"""A pipeline's run-side settings (``faults``, ``checkpoint``, ``logging``, ``heldout``): how a run
survives failures, keeps its state, reports and checks itself, beside what it trains
(``grm.config.pipeline``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from grm.config.base import MAX_TOKENS, Strict
from grm.config.judge_checks import check_source


class FaultSpec(Strict):
    """What a run does when a role fails. A judge call's deadline is not here: it is the judge
    spec's ``limits`` (``deadline_s``, or derived from the call's size); past it a call is
    re-issued once, then its items are masked."""

    @model_validator(mode="before")
    @classmethod
    def _judge_timeout_moved(cls, data: object) -> object:
        # An old YAML fails naming where the setting went, rather than as an unknown key.
        if isinstance(data, dict) and "judge_timeout_s" in data:
            raise ValueError(
                "judge_timeout_s is no longer a pipeline setting: a judge call's deadline is the judge "
                "spec's limits.deadline_s; set it per judge role with overrides: [limits.deadline_s=SECONDS]"
            )
        return data

    judge_restarts: int = Field(3, ge=0, le=1000)
    """Times Ray restarts a dead judge actor (its in-flight calls are re-issued)."""
    max_masked_fraction: float = Field(0.5, ge=0, le=1)
    """The run stops with an error when a step masks more than this share of its samples."""


class CheckpointSpec(Strict):
    every: int = Field(0, ge=0, le=10**7)
    """Save a checkpoint every N steps (0: only at the end)."""
    keep: int = Field(2, ge=1, le=10_000)
    """Most recent checkpoints kept."""
    export: bool = True
    """When the run completes (not after a stop or a failure), ``grm run`` writes the final policy to
    RUN_DIR/model/, a Hugging Face directory (``grm export``). It costs the weights' size on disk in
    the checkpoint's precision (SmolLM2-135M fp32: ~540 MB) and a few seconds, the model loaded once
    more on CPU in the ``grm run`` process; false skips it (``grm export RUN_DIR --out DIR`` later)."""


class WandbSpec(Strict):
    """Weights & Biases: every step's numeric metrics (the metrics.jsonl line) logged against
    ``step``, the resolved configuration as the run's config. Needs the ``wandb`` package
    (``pip install 'grm-rlaif[wandb]'``); an online run reads its key from ``WANDB_API_KEY``
    (never from YAML)."""

    project: str = Field(min_length=1, max_length=128)
    """The W&B project."""
    entity: str | None = Field(None, min_length=1, max_length=128)
    """The team or user (None: the key's default)."""
    mode: Literal["online", "offline", "disabled"] = "online"
    """``offline`` writes the W&B run into RUN_DIR/wandb/ only (``wandb sync`` uploads it later),
    with no network and no key."""
    name: str | None = Field(None, min_length=1, max_length=128)
    """The W&B run's name (None: the run directory's name)."""
    group: str | None = Field(None, min_length=1, max_length=128)
    """Groups runs in the W&B interface (seeds of one experiment, say)."""
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=64)
    """Tags of the W&B run."""


class LoggingSpec(Strict):
    """Where a run's metrics go beside metrics.jsonl and TensorBoard (RUN_DIR/tensorboard/, always)."""

    wandb: WandbSpec | None = None
    """Log to Weights & Biases too; a resumed run continues the same W&B run (its id is kept in
    RUN_DIR/wandb-run.json)."""


class HeldoutSpec(Strict):
    """A before/after check on prompts the run never trains on: before the first step and after the
    last (and every ``every`` steps, when set), the policy answers the first ``limit`` prompts
    greedily and rule verifiers score the answers (``heldout.jsonl``, report.md, the console). The
    prompts are read with ``data:``'s column names (prompt, reference, checklist, constraints)."""

    prompts: str
    """Prompt source (a file or ``builtin:NAME``), disjoint from ``data.prompts``."""
    judges: list[str] = Field(min_length=1)
    """Rule verifiers (``mode: rule``; paths or ``builtin:NAME``) that score the answers: a check
    that needs no model and cannot be talked into a verdict."""
    limit: int = Field(32, ge=1, le=100_000)
    """The first N prompts of the source."""
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    """Tokens per answer at most; default ``rollout.max_new_tokens``."""
    every: int = Field(0, ge=0, le=10**9)
    """Also after every N-th step; 0: only before the first step and after the last."""

    @field_validator("prompts")
    @classmethod
    def _source(cls, v: str, info: ValidationInfo) -> str:
        return check_source(v, info)
