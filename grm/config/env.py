"""Environment config (a pipeline's ``env:`` block): multi-turn, tool-using episodes instead of
single answers. The environment class is named by ``type`` (a shipped one, ``grm envs list``) or by
``path`` (``FILE.py:Class`` or ``package.module:Class``, the user's own); its limits end an episode
cleanly with the reason recorded."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from grm.config.base import MAX_TOKENS, Seconds, Strict, base_dir
from grm.config.targets import file_problem, module_problem

_TARGET = re.compile(r"^[^:\x00]+:[A-Za-z_][A-Za-z0-9_]*$")

SHIPPED_ENVS: dict[str, str] = {
    "calc": "grm.envs.calc:CalcEnv",
    "clarify": "grm.envs.clarify:ClarifyEnv",
    "revise": "grm.envs.revise:ReviseEnv",
}
"""Shipped environments by name (``env: {type: calc}``), each a ``package.module:Class``."""

_OWN = ("python", "agent")
"""Types whose ``path`` names the user's own code: an environment class, an agent function."""


def is_file_target(where: str) -> bool:
    """Whether a target's part before ``:`` names a Python file rather than a dotted module (one
    rule for this check, ``grm.envs.base.load_target`` and ``grm eval``'s resume record)."""
    return where.endswith(".py") or "/" in where or "\\" in where


class EnvSpec(Strict):
    """Which environment runs the episodes and how long one may last."""

    type: str = "python"
    """A shipped environment's name (``grm envs list``, e.g. ``calc``), ``python`` for the user's
    own class named by ``path``, or ``agent`` for the user's own agent function named by ``path``:
    agent code that takes an OpenAI base URL, run against the policy endpoint (``grm.envs.agent``)."""
    path: str | None = None
    """(type: python) ``FILE.py:Class`` (relative to the pipeline file) or ``package.module:Class``:
    a class implementing ``grm.envs.base.Environment``; one instance per episode. (type: agent)
    ``FILE.py:function`` or ``package.module:function``: ``agent(row, base_url, model)``, one call
    per episode, returning None or ``{signals, final_answer}``."""
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
    turn_wait_s: Annotated[Seconds, Field(ge=0)] | Literal["auto"] | None = "auto"
    """How episodes share the policy's engine. Once an episode's step (its tools) has finished, the
    engine waits at most this long for the steps still running before it generates the next turn of
    the episodes that are ready (the others join a later call), so a slow tool never holds the
    engine idle for longer; steps that finish within it batch together as in lockstep. ``auto``: the
    last engine call's seconds (a straggler is left behind only when waiting for it would cost more
    than a turn: on CPU a call for part of the episodes costs about what one for all does). ``null``:
    strict lockstep (every live episode's step first, then one call; reproducible batches)."""
    pool: str | None = None
    """A pool of ``pools`` for environment workers: each episode's environment (its reset, its steps
    and their sandboxed tools) then runs in one of ``workers`` Ray actors there, many episodes in
    flight per worker, instead of beside the policy's engine. The workers take none of the pool's
    CPU share from roles placed with them; a pool of their own reserves its CPUs for their tools.
    None: environments run in the policy's process."""
    workers: int = Field(1, ge=1, le=1024)
    """(with ``pool``) Environment worker actors; episodes are spread over them in turn."""

    @field_validator("path")
    @classmethod
    def _target(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        if not _TARGET.match(v):
            raise ValueError(f"'{v}' is not FILE.py:NAME or package.module:NAME (a class, or for type: agent a function)")
        where = v.rpartition(":")[0]
        if is_file_target(where):  # as grm.envs.base.load_target reads it: relative to the pipeline
            problem = file_problem((base_dir(info) or Path.cwd()) / where)
        else:
            problem = module_problem(where)  # before anything imports it
        if problem is not None:
            raise ValueError(f"{v!r}: {problem}")
        return v

    @model_validator(mode="after")
    def _named(self) -> EnvSpec:
        if self.type in _OWN and self.path is None:
            what = "Class" if self.type == "python" else "function"
            raise ValueError(f"type: {self.type} needs path: FILE.py:{what} (or name a shipped environment in type)")
        if self.type not in _OWN and self.type not in SHIPPED_ENVS:
            shipped = ", ".join(SHIPPED_ENVS)
            raise ValueError(f"type '{self.type}' is neither python nor a shipped environment ({shipped}) nor agent")
        if self.type == "agent" and self.kwargs:
            raise ValueError("kwargs are an environment class's arguments; an agent function (type: agent) takes none")
        if self.type == "agent" and self.pool is not None:
            raise ValueError("pool is for environment classes; an agent (type: agent) runs beside the policy's endpoint")
        if self.workers > 1 and self.pool is None:
            raise ValueError(f"workers: {self.workers} needs a pool: environment workers run as actors on one")
        if self.type not in _OWN and self.path is not None:
            raise ValueError(f"path is only for type: python or agent; '{self.type}' is a shipped environment")
        return self

    @property
    def target(self) -> str:
        """The class (or, type: agent, the function) to load: ``package.module:NAME`` or ``FILE.py:NAME``."""
        return SHIPPED_ENVS[self.type] if self.type not in _OWN else str(self.path)

    @property
    def is_agent(self) -> bool:
        """Episodes run by the user's agent function through the policy endpoint (``grm.envs.agent``)."""
        return self.type == "agent"
