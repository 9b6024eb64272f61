"""What one tool call may use and what it gives back: ``SandboxLimits`` (checked when made),
``ToolResult`` (the observation and why a call failed, one of ``REASONS``) and ``ToolCounter``.
``grm.envs.sandbox`` enforces the limits; tools and environments take and return these types."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from grm.config.base import MAX_SECONDS, Strict, field_errors

Network = Literal["auto", "namespace", "audit", "allow"]

REASONS = (
    "timeout",  # wall-clock limit
    "cpu_limit",  # RLIMIT_CPU (SIGXCPU, then SIGKILL), checked against the CPU time the tool used
    "memory_limit",  # a Python tool raised MemoryError (RLIMIT_AS)
    "output_limit",  # more output than max_output_bytes
    "file_size",  # RLIMIT_FSIZE: SIGXFSZ, or EFBIG raised by a Python tool
    "network",  # a Python tool raised a network error (the network is not there)
    "exception",  # a Python tool raised
    "exit_code",  # a non-zero exit, or a command that cannot be run (127)
    "signal",  # killed by a signal (a segfault, an abort)
    "sandbox",  # the sandbox could not be set up as asked, or refused the call
)

_MAX_MB = 1 << 20
"""Largest memory_mb and file_size_mb: 1 TiB, beyond any host; rlimits are 64-bit byte counts."""


class SandboxLimits(Strict):
    """Limits of one tool call, checked when made: a wrong type (a string, a float for an integer, a
    boolean for a number), a value out of range or an unknown field is a ``ValueError`` naming it."""

    model_config = ConfigDict(frozen=True, strict=True)

    timeout_s: float = Field(10.0, gt=0, le=MAX_SECONDS)
    """Wall-clock seconds; past them every process of the tool is killed."""
    cpu_s: int = Field(10, ge=1, le=int(MAX_SECONDS))
    """CPU seconds (RLIMIT_CPU) of each process of the tool: SIGXCPU at it, SIGKILL a second later."""
    memory_mb: int = Field(512, ge=1, le=_MAX_MB)
    """Address space (RLIMIT_AS) of each process, MiB. Python itself takes ~25 MiB."""
    max_output_bytes: int = Field(16 * 1024, ge=1, le=1 << 30)
    """stdout and stderr together; the rest is dropped and the tool killed."""
    file_size_mb: int = Field(16, ge=1, le=_MAX_MB)
    """Largest file the tool may write (RLIMIT_FSIZE), MiB."""
    open_files: int = Field(64, ge=1, le=1 << 20)
    """RLIMIT_NOFILE of each process (the host's hard limit caps it)."""
    max_processes: int | None = Field(None, ge=1, le=1 << 22)
    """RLIMIT_NPROC: processes of the tool's *user*, all counted (not applied to root: use
    ``run_as``). None leaves it."""
    run_as: int | None = Field(None, ge=1, le=2**32 - 2)
    """When grm runs as root: the uid (and gid) the tool runs as, e.g. 65534 (nobody); it must be
    able to read the interpreter (Python tools) or the command. None runs as grm's user."""
    network: Network = "auto"
    """``auto``: the filtered network namespace, else the best fallback (see the module);
    ``namespace``: the filtered namespace or a ``sandbox`` failure; ``audit``: the audit hook
    (Python tools only); ``allow``: no guard."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise ValueError(field_errors(e)) from None  # nested in another model, it prefixes its field


@dataclass(frozen=True)
class ToolResult:
    """What one tool call gave: ``text`` is the observation the policy reads."""

    ok: bool
    text: str
    reason: str | None = None
    """None when ok, else one of ``REASONS`` (tools add their own, e.g. ``bad_arguments``)."""
    cut: bool = False
    """The output was cut to ``max_output_bytes``."""
    seconds: float = 0.0
    exit_code: int | None = None
    """The tool's return code as its supervisor reaped it (negative: the signal that ended it); on a
    kill by grm (timeout, output), the supervisor's; None when no process ran."""
    network: str = "none"
    """The network guard in force: ``namespace`` (filtered), ``namespace_unfiltered``, ``audit``,
    ``allowed``, or ``none`` (no tool process)."""
    processes: str = "none"
    """How the tool's processes are held: ``namespace`` (a PID namespace with a private ``/proc``),
    ``pid`` (a PID namespace, the host's ``/proc``), ``group`` (a process group only), or ``none``."""


class ToolCounter(Counter):
    """Counts of calls and failures by reason (``counter.add(result)``; ``dict(counter)`` to log)."""

    def add(self, result: ToolResult) -> ToolResult:
        self["calls"] += 1
        if not result.ok:
            self[f"failed_{result.reason}"] += 1
        return result


DEFAULT_LIMITS = SandboxLimits()
