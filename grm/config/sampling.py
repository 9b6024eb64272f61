"""How a judge model samples (critiques, principles, written checklists)."""

from __future__ import annotations

from pydantic import Field

from grm.config.base import MAX_TOKENS, Strict, Temperature


class JudgeSampling(Strict):
    """How critiques are sampled."""

    n: int = Field(1, ge=1, le=1024)
    """Critiques sampled per item (and per presentation order); they vote via ``aggregate``."""
    temperature: Temperature = 0.7
    """Sampling temperature; 0 is greedy (then n > 1 repeats the same critique)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass of each critique token, in (0, 1]; 1 keeps every token."""
    top_k: int = Field(0, ge=0, le=MAX_TOKENS)
    """Only the k most likely tokens are sampled from; 0 disables it."""
    max_new_tokens: int = Field(256, ge=1, le=MAX_TOKENS)
    """Tokens per critique at most."""
    stop: list[str] = []
    """Stop strings; the critique is cut before the first one."""
    stop_at_score: bool = False
    """(pointwise and pairwise text parsers) End a critique once the parser reads a score from it
    that two more characters do not change: the tokens a judge writes after its score line are
    not generated (hf engine; a server generates to its own end), so a second score line it
    might have written is not there to read."""
    seed: int = Field(0, ge=0, lt=2**31)
    """Base seed; sample j of an item uses (seed, j), so results do not depend on batching. Below
    2**31: servers (llama.cpp) read seeds as 32-bit integers, and retries add offsets to it."""
