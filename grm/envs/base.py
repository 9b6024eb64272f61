"""The ``Environment`` protocol a user implements in one file, the values it exchanges, the helpers
that call it (sync or ``async def`` alike) and check what it returns, and the loader that finds it
from a pipeline's ``env`` spec.

One instance runs one episode at a time: the runner makes an instance per episode in flight (with
``env_factory``), so an environment keeps its episode's state on ``self``. Construction should be
cheap; share heavy resources at module level.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from grm.base import GrmError
from grm.config.env import SHIPPED_ENVS, is_file_target
from grm.config.targets import loaded_target_problem
from grm.data.trajectory import ToolCall
from grm.envs.tool_calls import ToolCallError, tool_name
from grm.envs.tool_limits import ToolResult

ENVIRONMENTS: dict[str, str] = SHIPPED_ENVS
"""Shipped environments by name (``env: {type: calc}``, one home: ``grm.config.env``); any other is
given as ``path/to/file.py:Class`` or ``package.module:Class``."""


class EnvError(GrmError):
    """An environment that cannot be loaded, or that raised or returned something malformed; the
    message names the spec (or class) and what went wrong."""


@dataclass
class Reset:
    """The start of an episode."""

    messages: list[dict[str, Any]]
    """The first chat messages (``role``, ``content``), e.g. a system prompt and the task."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Tool schemas in OpenAI function format, rendered by the policy's chat template."""


@dataclass
class Observation:
    """One message the environment answers with: a tool's result or a (simulated) user's reply."""

    role: Literal["tool", "user"]
    content: str
    name: str | None = None
    """Tool observations: the tool's name."""
    tool_call_id: str | None = None
    ok: bool = True
    error: str | None = None
    """The tool's failure reason (``ToolResult.reason``), None when ok."""
    cut: bool = False
    seconds: float = 0.0

    @classmethod
    def from_tool(cls, call: ToolCall, result: ToolResult) -> Observation:
        return cls("tool", result.text, call.name, call.id, result.ok, result.reason, result.cut, result.seconds)

    def message(self) -> dict[str, Any]:
        """The chat message the template renders."""
        m: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.role == "tool":
            m.update({k: v for k, v in (("name", self.name), ("tool_call_id", self.tool_call_id)) if v is not None})
        return m


@dataclass
class Step:
    """What the environment says after one assistant turn."""

    observations: list[Observation] = field(default_factory=list)
    done: bool = False
    signals: dict[str, float] = field(default_factory=dict)
    """Rule outcomes judges and rewards may use (``success``, ``tool_errors``): the latest value of
    each name is the episode's."""
    final_answer: str | None = None


@dataclass(frozen=True)
class AssistantMessage:
    """One assistant turn as the environment sees it: the text the policy generated and the tool
    calls parsed from it (or why they could not be)."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_error: ToolCallError | None = None
    finish_reason: str = "stop"
    """``length`` when the policy ran out of tokens mid-turn."""

    def message(self) -> dict[str, Any]:
        """The OpenAI chat form (``tool_calls`` present only when there are some)."""
        m: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            m["tool_calls"] = [c.openai() for c in self.tool_calls]
        return m


@runtime_checkable
class Environment(Protocol):
    """What a user implements; either method may be ``async def``."""

    def reset(self, row: dict[str, Any]) -> Reset | Awaitable[Reset]:
        """Start an episode for the data ``row``."""
        ...

    def step(self, message: AssistantMessage) -> Step | Awaitable[Step]:
        """Answer one assistant turn."""
        ...


# ----------------------------------------------------------------------------- calling


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, awaited when it returns an awaitable: sync and ``async def`` methods alike."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def _name(env: object) -> str:
    return type(env).__qualname__


async def reset_env(env: Environment, row: dict[str, Any]) -> Reset:
    """``env.reset(row)`` checked: any exception it raises, or a malformed ``Reset``, is an
    ``EnvError`` naming the class (the runner ends that episode with ``env_error``)."""
    try:
        out = await call_maybe_async(env.reset, row)
    except EnvError:
        raise  # already says which environment (an environment worker's answer, or the class's own)
    except Exception as e:
        raise EnvError(f"{_name(env)}.reset raised {type(e).__name__}: {str(e)[:300]}") from e
    if not isinstance(out, Reset):
        raise EnvError(f"{_name(env)}.reset returned {type(out).__name__}, not a Reset")
    for i, m in enumerate(out.messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise EnvError(f"{_name(env)}.reset: messages[{i}] needs string 'role' and 'content'")
    if not out.messages:
        raise EnvError(f"{_name(env)}.reset returned no messages")
    for i, t in enumerate(out.tools):
        if not isinstance(t, Mapping) or not tool_name(t):
            raise EnvError(f"{_name(env)}.reset: tools[{i}] is not a tool schema in OpenAI function format")
    return out


async def step_env(env: Environment, message: AssistantMessage) -> Step:
    """``env.step(message)`` checked like ``reset_env``; signals come back as finite floats."""
    try:
        out = await call_maybe_async(env.step, message)
    except EnvError:
        raise  # already says which environment (an environment worker's answer, or the class's own)
    except Exception as e:
        raise EnvError(f"{_name(env)}.step raised {type(e).__name__}: {str(e)[:300]}") from e
    if not isinstance(out, Step):
        raise EnvError(f"{_name(env)}.step returned {type(out).__name__}, not a Step")
    for i, o in enumerate(out.observations):
        if not isinstance(o, Observation) or not isinstance(o.content, str):
            raise EnvError(f"{_name(env)}.step: observations[{i}] is not an Observation with text content")
    signals = {}
    for k, v in out.signals.items():
        if not isinstance(k, str) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise EnvError(f"{_name(env)}.step: signal {k!r} = {v!r} is not a finite number")
        signals[k] = float(v)
    out.signals = signals
    if out.final_answer is not None and not isinstance(out.final_answer, str):
        raise EnvError(f"{_name(env)}.step: final_answer must be a string or None")
    return out


# ----------------------------------------------------------------------------- loading


def load_env_class(spec: str, base_dir: str | Path | None = None) -> type:
    """The class ``spec`` names: a shipped name (``calc``), ``path/to/file.py:Class`` (relative to
    ``base_dir``, e.g. the pipeline's directory) or ``package.module:Class``. Every failure is an
    ``EnvError`` naming the spec."""
    cls, cls_name = load_target(spec, base_dir)
    if not isinstance(cls, type):
        raise EnvError(f"env {spec!r}: {cls_name} is a {type(cls).__name__}, not a class")
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise EnvError(f"env {spec!r}: {cls_name} does not implement the Environment protocol (no {' or '.join(missing)})")
    return cls


def load_target(spec: str, base_dir: str | Path | None = None, what: Literal["class", "function"] = "class") -> tuple[Any, str]:
    """The object ``spec`` names, and its name: a shipped environment's name, ``path/to/file.py:NAME``
    (relative to ``base_dir``) or ``package.module:NAME``. Every failure is an ``EnvError`` naming
    the spec; a missing name lists the module's classes (or functions, for ``what="function"``)."""
    target = ENVIRONMENTS.get(spec, spec)
    where, sep, name = target.rpartition(":")
    label = "Class" if what == "class" else "function"
    if not sep or not where or not name:
        shipped = ", ".join(sorted(ENVIRONMENTS))
        raise EnvError(f"env {spec!r}: not a shipped environment ({shipped}) nor PATH.py:{label} nor package.module:{label}")
    if is_file_target(where):
        module = _import_file(spec, Path(base_dir or ".") / where)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as e:
            raise EnvError(f"env {spec!r}: cannot import module {where}: {type(e).__name__}: {str(e)[:300]}") from e
    found = getattr(module, name, None)
    if found is None:
        kind = (lambda v: isinstance(v, type)) if what == "class" else inspect.isfunction
        defined = sorted(n for n, v in vars(module).items() if kind(v) and v.__module__ == module.__name__)
        plural = "classes" if what == "class" else "functions"
        raise EnvError(f"env {spec!r}: {where} has no {name} ({plural} there: {', '.join(defined) or 'none'})")
    why = loaded_target_problem(found) if callable(found) else None  # a non-callable: the caller says what it wanted
    if why is not None:
        raise EnvError(f"env {spec!r}: {name} {why}")
    return found, name


def _import_file(spec: str, path: Path) -> Any:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise EnvError(f"env {spec!r}: file {path} not found")
    st = path.stat()
    key = hashlib.sha1(f"{path}:{st.st_mtime_ns}:{st.st_size}".encode()).hexdigest()[:12]
    name = f"grm_env_{key}_{''.join(c if c.isalnum() else '_' for c in path.stem)}"
    if name in sys.modules:  # the same file, unchanged: not executed again per episode
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise EnvError(f"env {spec!r}: cannot import {path} as Python")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before executing: dataclasses and pickling look the module up by name
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) else ""
        raise EnvError(f"env {spec!r}: importing {path} raised {type(e).__name__}{where}: {str(e)[:300]}") from e
    return module


def _construct(spec: str, cls: type, kwargs: Mapping[str, Any]) -> Any:
    try:
        env = cls(**kwargs)
    except Exception as e:
        raise EnvError(f"env {spec!r}: {cls.__name__}(**{dict(kwargs)!r:.200}) raised {type(e).__name__}: {str(e)[:300]}") from e
    for method in ("reset", "step"):
        try:
            inspect.signature(getattr(env, method)).bind(None)
        except (TypeError, ValueError):
            raise EnvError(f"env {spec!r}: {cls.__name__}.{method} must take one argument") from None
    return env


def env_factory(
    spec: str, kwargs: Mapping[str, Any] | None = None, base_dir: str | Path | None = None
) -> Callable[[], Environment]:
    """A function making a fresh environment per episode; the class is loaded and one instance made
    now, so a bad spec, a bad argument or a constructor that raises fails at load time."""
    cls, kw = load_env_class(spec, base_dir), _kwargs(spec, kwargs)
    _construct(spec, cls, kw)
    return lambda: _construct(spec, cls, kw)


def load_env(spec: str, kwargs: Mapping[str, Any] | None = None, base_dir: str | Path | None = None) -> Environment:
    """One environment instance for ``spec`` (see ``load_env_class``) built with ``kwargs``."""
    return _construct(spec, load_env_class(spec, base_dir), _kwargs(spec, kwargs))


def _kwargs(spec: str, kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise EnvError(f"env {spec!r}: arguments must be a mapping, got {type(kwargs).__name__}")
    return dict(kwargs or {})


def list_envs() -> list[tuple[str, str, str]]:
    """(name, spec, first docstring line) of each shipped environment."""
    out = []
    for name, spec in sorted(ENVIRONMENTS.items()):
        doc = inspect.getdoc(load_env_class(name)) or ""
        out.append((name, spec, doc.splitlines()[0] if doc else ""))
    return out
