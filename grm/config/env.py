"""Environment config (a pipeline's ``env:`` block): multi-turn, tool-using episodes instead of
single answers. The environment class is named by ``type`` (a shipped one, ``grm envs list``) or by
``path`` (``FILE.py:Class`` or ``package.module:Class``, the user's own); its limits end an episode
cleanly with the reason recorded."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from grm.config.base import MAX_TOKENS, Seconds, Strict

_TARGET = re.compile(r"^[^:\x00]+:[A-Za-z_][A-Za-z0-9_]*$")

SHIPPED_ENVS: dict[str, str] = {
    "calc": "grm.envs.calc:CalcEnv",
    "clarify": "grm.envs.clarify:ClarifyEnv",
}
"""Shipped environments by name (``env: {type: calc}``), each a ``package.module:Class``."""


class EnvSpec(Strict):
    """Which environment runs the episodes and how long one may last."""

    type: str = "python"
    """A shipped environment's name (``grm envs list``, e.g. ``calc``), or ``python`` for the user's
    own class named by ``path``."""
    path: str | None = None
    """(type: python) ``FILE.py:Class`` (relative to the pipeline file) or ``package.module:Class``:
    a class implementing ``grm.envs.base.Environment``; one instance per episode."""
    kwargs: dict[str, Any] = {}
    """Keyword arguments of the environment's constructor."""
    max_turns: int = Field(4, ge=1, le=1024)
    """Policy turns in one episode; reaching it ends the episode (reason ``max_turns``)."""
    max_total_tokens: int = Field(2048, ge=16, le=MAX_TOKENS)
    """Tokens in an episode's whole context (prompt, every turn, every observation); an episode that
    would pass it ends (reason ``max_tokens``)."""
    observation_tokens: int = Field(512, ge=8, le=MAX_TOKENS)
    """Policy-model tokens one observation (tool result, user message) may add to the context; a
    longer one is cut (counted)."""
    wall_time_s: Seconds = Field(300.0, gt=0)
    """Wall time of one episode, generation included (reason ``wall_time``)."""
    tool_time_s: Seconds = Field(60.0, gt=0)
    """Time an episode's tools and environment steps may take in all (reason ``tool_time``)."""
    credit: Literal["episode", "process"] = "episode"
    """How an episode's advantage reaches its turns: ``episode``, every policy token gets it;
    ``process``, when a judge names the first faulty turn (``trajectory.first_faulty_turn``), the
    policy turns before it keep only a positive advantage (they are not blamed for a failure) and
    the faulty turn and the ones after it take the advantage as it is."""
    max_bad_tool_calls: int = Field(2, ge=0, le=1024)
    """Malformed tool calls answered with an error observation the policy may correct; one more ends
    the episode (reason ``bad_tool_call``)."""

    @field_validator("path")
    @classmethod
    def _target(cls, v: str | None) -> str | None:
        if v is not None and not _TARGET.match(v):
            raise ValueError(f"'{v}' is not FILE.py:Class or package.module:Class")
        return v

    @model_validator(mode="after")
    def _named(self) -> EnvSpec:
        if self.type == "python" and self.path is None:
            raise ValueError("type: python needs path: FILE.py:Class (or name a shipped environment in type)")
        if self.type != "python" and self.type not in SHIPPED_ENVS:
            raise ValueError(f"type '{self.type}' is neither python nor a shipped environment ({', '.join(SHIPPED_ENVS)})")
        if self.type != "python" and self.path is not None:
            raise ValueError(f"path is only for type: python; '{self.type}' is a shipped environment")
        return self

    @property
    def target(self) -> str:
        """The class to load: ``package.module:Class`` or ``FILE.py:Class``."""
        return SHIPPED_ENVS[self.type] if self.type != "python" else str(self.path)
