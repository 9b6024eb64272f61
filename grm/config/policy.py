"""Policy spec (``policy/*.yaml``) and generation-engine settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grm.config.base import Strict


class HFEngineSpec(Strict):
    """Hugging Face transformers backend (CPU default)."""

    type: Literal["hf"] = "hf"
    dtype: Literal["bf16", "fp32"] = "fp32"
    """Weights and activations dtype. On the 2-core AVX-512 CPU we measured fp32 matmuls at ~1.9x
    the bf16 rate (benchmarks/), so fp32 is the CPU default; bf16 halves memory and suits GPUs."""
    threads: int | None = Field(None, ge=1)
    """torch intra-op threads for the process; None: the pool's CPU count."""
    max_batch_size: int = Field(32, ge=1)
    """Rows (requests x samples) decoded together; longer lists are chunked."""


EngineSpec = HFEngineSpec
"""The engine variants (``type:``). openai and sglang join here with the serving issue."""


class GenerationDefaults(Strict):
    max_new_tokens: int = Field(64, ge=1)
    """Tokens generated per response at most."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature; 0 is greedy."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    top_k: int = Field(0, ge=0)
    """Top-k sampling; 0 disables it."""
    stop: list[str] = []
    """Stop strings; the response is cut before the first one."""


class PolicySpec(Strict):
    """A policy model and how it is prompted."""

    name: str
    """Human-readable name used in run directories and logs."""
    model: str
    """Builtin alias (``grm models list``), a local Hugging Face model directory, or a hub id."""
    system_prompt: str | None = None
    """System message prepended to every prompt; None uses the chat template's default."""
    engine: EngineSpec = HFEngineSpec()
    """Rollout engine settings."""
    generation: GenerationDefaults = GenerationDefaults()
    """Defaults for rollout sampling; the pipeline's ``rollout:`` overrides them."""
