"""Run one tool call in processes of its own, with limits; whatever the tool does, the caller gets a
``ToolResult`` back, never an exception.

Each call starts ``python -I -S -u -c BOOT`` (``BOOT``: the text of ``grm.envs.sandbox_boot``; isolated:
no site, no user paths, no ``PYTHON*`` variables) in a fresh session, with stdin closed, a scrubbed
environment and a fresh scratch directory as cwd (deleted afterwards). The boot code makes three processes:

- the *launcher* (the process grm started) unshares what the kernel allows, best first: a PID
  namespace, a mount namespace and, unless ``network: allow|audit``, a network namespace; as root
  directly, else through an unprivileged user namespace (after ``run_as``: a user namespace maps
  only its creator);
- the *supervisor*, the launcher's child: PID 1 of the new namespace, where it mounts a private
  ``/proc``; it forks the tool, reaps it and reports its exit status and CPU time;
- the *tool*: it takes ``run_as`` (root only), ``no_new_privs``, drops every capability, and, under
  the network namespace, a seccomp filter that refuses ``socket()`` of any family but
  ``AF_INET``/``AF_INET6``/``AF_NETLINK`` (those the namespace isolates: not unix sockets bound on
  the host's filesystem nor vsock) and ``io_uring`` (whose sockets the filter would not see); then
  the rlimits, and then ``exec`` of the command or the Python code in the boot interpreter.

What this enforces, where the kernel allows the namespaces (``ToolResult.processes == "namespace"``):
every process the tool starts dies with it (when PID 1 of a namespace exits the kernel kills the
rest; grm kills the supervisor on the deadline or too much output); grm and every other process
are invisible (``/proc`` shows the namespace only) and cannot be signalled; no network, loopback
down, and no socket to a listener on the host (``ToolResult.network == "namespace"``). Where the
kernel refuses them, it falls back and says so in the result: ``processes == "pid"`` (PID namespace
but ``/proc`` could not be mounted: the host's ``/proc`` shows other processes of the tool's user,
their environments included), ``"group"`` (no PID namespace: grm kills the process group, a child
that calls ``setsid`` escapes it, and the tool can signal processes of its user);
``network == "namespace_unfiltered"`` (no seccomp filter on this architecture: unix sockets on the
host's filesystem and vsock stay reachable), ``"audit"`` (no network namespace: a Python tool gets
an audit hook refusing sockets, subprocesses, forks and ctypes, a weaker guard a determined program
can get round; a command is refused). ``network: namespace`` refuses to run with less than the
filtered namespace.

rlimits, per process of the tool: address space (``RLIMIT_AS``), CPU seconds (``RLIMIT_CPU``),
file size, open files, no core dumps and, when asked, processes (``RLIMIT_NPROC``: Linux never
applies it to root, so it binds only with ``run_as`` or when grm is not root). The filesystem is
not isolated: a tool sees and may write what its user may (``run_as`` picks another user).

Reasons are grm's own observations where they can be: ``timeout`` and ``output_limit`` (grm killed
it), ``sandbox`` (set-up failures, reported by the boot code on a pipe the tool never holds: the
Python tool's end is closed before its code runs, a command's at ``exec``), ``cpu_limit`` (the tool
died of SIGXCPU or SIGKILL with its CPU time, measured by the supervisor, at the limit), ``signal``
and ``exit_code`` (its status as the supervisor reaped it; ``file_size`` when that signal is
SIGXFSZ, which a program could also send itself). ``exception``, ``memory_limit`` (``MemoryError``),
``network`` and ``file_size`` (``EFBIG``) of a Python tool say what its code raised, as classified
inside its own process and written on a separate pipe: the tool's own account, which a program
could fake on purpose (as it could ``raise MemoryError``), but never read from an exit code.

The parent reads the merged stdout/stderr in chunks of at most 64 KiB and keeps the first
``max_output_bytes``: output past it kills the tool (a 10 MB print is never held in memory).
Measured here (2 shared cores, root; median of 10): a ``print(1)`` call takes ~0.06 s with the
namespaces, ~0.055 s without.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grm.envs.tool_limits import DEFAULT_LIMITS, Network, SandboxLimits, ToolResult

_MiB = 1024 * 1024
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWNET, _CLONE_NEWUSER = 0x20000, 0x20000000, 0x40000000, 0x10000000


_BOOT = (Path(__file__).parent / "sandbox_boot.py").read_text(encoding="utf-8")
"""The boot code (``grm.envs.sandbox_boot``), run with ``-c`` in each tool's interpreter."""


def run_python(code: str, limits: SandboxLimits = DEFAULT_LIMITS) -> ToolResult:
    """Run Python ``code`` as a script (``__name__ == "__main__"``) in the sandbox."""
    if not isinstance(code, str):
        return ToolResult(False, f"sandbox: the code must be a string, not {type(code).__name__}", "sandbox")
    return _guarded(None, code, limits)


def run_command(argv: Sequence[str], limits: SandboxLimits = DEFAULT_LIMITS) -> ToolResult:
    """Run a command (``argv[0]`` looked up on a minimal PATH) in the sandbox."""
    problem = _argv_problem(argv)
    if problem is not None:
        return ToolResult(False, f"sandbox: {problem}", "sandbox")
    return _guarded(list(argv), None, limits)


def _argv_problem(argv: Any) -> str | None:
    """Why ``argv`` cannot be exec'd, before any process starts; None when it can be."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        return f"the command must be a list of strings, not a {type(argv).__name__}"
    if not argv:
        return "empty command"
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            return f"argument {i} is a {type(arg).__name__}, not a string"
        if "\0" in arg:
            return f"argument {i} contains a NUL character"
        try:
            os.fsencode(arg)
        except UnicodeEncodeError:
            return f"argument {i} has characters the file system cannot encode"
    return None if argv[0] else "empty command name"


def _guarded(argv: list[str] | None, code: str | None, limits: SandboxLimits) -> ToolResult:
    if not isinstance(limits, SandboxLimits):
        return ToolResult(False, f"sandbox: limits must be SandboxLimits, not {type(limits).__name__}", "sandbox")
    try:
        return _run(argv, code, limits)
    except OSError as e:  # no scratch directory, no pipe, no process: the host is short of something
        return ToolResult(False, f"sandbox: cannot run the tool ({e.strerror or e})", "sandbox")


def _rlimits(limits: SandboxLimits) -> dict[str, tuple[int, int]]:
    """(soft, hard) per rlimit. CPU: SIGXCPU at the soft limit, SIGKILL a second later."""
    out = {
        "RLIMIT_AS": limits.memory_mb * _MiB,
        "RLIMIT_FSIZE": limits.file_size_mb * _MiB,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    if limits.max_processes is not None:
        out["RLIMIT_NPROC"] = limits.max_processes
    return {"RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1)} | {k: (v, v) for k, v in out.items()}


def _unshare_attempts(network: Network, euid: int) -> list[tuple[bool, int]]:
    """(through a user namespace, ``unshare`` flags) to try in turn, best first: PID and mount
    namespaces with the network one, then the network one alone; as root directly, then (root
    without the capability, or not root) through an unprivileged user namespace."""
    net = _CLONE_NEWNET if network in ("auto", "namespace") else 0
    sets = [_CLONE_NEWPID | _CLONE_NEWNS | net] + ([net] if net else [])
    direct = [(False, f) for f in sets] if euid == 0 else []
    return direct + [(True, _CLONE_NEWUSER | f) for f in sets]


def _run(argv: list[str] | None, code: str | None, limits: SandboxLimits) -> ToolResult:
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="grm-tool-")
    proc: subprocess.Popen[bytes] | None = None
    fds: list[int] = []
    try:
        for _ in range(2):  # inside the try: a second pipe refused (EMFILE) leaves no fd or directory behind
            fds += os.pipe()
        status_r, status_w, verdict_r, verdict_w = fds
        code_path = None
        if code is not None:
            code_path = os.path.join(scratch, "tool.py")
            with open(code_path, "w", encoding="utf-8", errors="replace") as fh:
                fh.write(code)
        if limits.run_as is not None and os.geteuid() == 0:
            for p in (scratch, *([code_path] if code_path else [])):
                os.chown(p, limits.run_as, limits.run_as)
        cfg = {
            "status_fd": status_w,
            "verdict_fd": verdict_w,
            "network": limits.network,
            "unshare": _unshare_attempts(limits.network, os.geteuid()),
            "run_as": limits.run_as,
            "rlimits": _rlimits(limits),
            "argv": argv,
            "code": code_path,
        }
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-u", "-c", _BOOT, json.dumps(cfg)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=scratch,
                env=_scrubbed_env(scratch, limits.run_as),
                start_new_session=True,
                pass_fds=(status_w, verdict_w),
            )
        except OSError as e:
            return ToolResult(False, f"sandbox: cannot start the tool ({e})", "sandbox", seconds=time.monotonic() - start)
        for i in (1, 3):  # the write ends: only the sandbox's processes hold them now
            os.close(fds[i])
            fds[i] = -1
        out, cut, timed_out = _read_bounded(proc, limits, start)
        status = _lines(_drain(status_r))
        verdict = _drain(verdict_r)
        return _result(out, cut, timed_out, status, verdict, proc.returncode, limits, time.monotonic() - start)
    finally:
        if proc is not None and proc.returncode is None:
            _kill_group(proc)
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _scrubbed_env(scratch: str, run_as: int | None) -> dict[str, str]:
    """Only what a tool needs: no credentials, proxies or library paths of the parent leak in."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": scratch, "TMPDIR": scratch}
    if run_as is not None:
        with contextlib.suppress(KeyError):
            env["USER"] = pwd.getpwuid(run_as).pw_name
    return env


def _read_bounded(proc: subprocess.Popen[bytes], limits: SandboxLimits, start: float) -> tuple[bytes, bool, bool]:
    """(the first ``max_output_bytes`` of the output, cut, timed out). The end of the output is not
    the end of the tool (it may close stdout and go on): the call ends when the launcher exits, on a
    cut or at the deadline, and the launcher's group is killed then (with its supervisor, every
    process in the tool's PID namespace)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = bytearray()
    cut = timed_out = eof = False
    deadline = start + limits.timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if eof:
                time.sleep(min(remaining, 0.005))
                ready = False
            else:
                ready = bool(sel.select(timeout=min(remaining, 0.05)))
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    eof = True
                    continue
                buf += chunk[: limits.max_output_bytes + 1 - len(buf)]
                if len(buf) > limits.max_output_bytes:
                    cut = True
                    break
            elif _exited(proc):
                break  # drained; a background child (outside a PID namespace) may still hold the pipe
    _kill_group(proc)
    return bytes(buf[: limits.max_output_bytes]), cut, timed_out


def _drain(fd: int, limit: int = 65536) -> str:
    """What the sandbox's processes wrote on a pipe, at most ``limit`` bytes, without waiting."""
    os.set_blocking(fd, False)
    data = b""
    while len(data) < limit:
        try:
            chunk = os.read(fd, limit - len(data))
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace")


def _lines(text: str) -> dict[str, str]:
    """The first ``KEY rest`` line per key of the boot code's status."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        out.setdefault(key, rest)
    return out


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the launcher exited, without reaping it: its pid, which is the group's id, stays
    taken until ``_kill_group`` has signalled the group, so the kill cannot reach a stranger."""
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tool_status(status: dict[str, str]) -> tuple[int, int, float] | None:
    """(pid, return code, CPU seconds) of the tool as its supervisor reaped it; None if it did not."""
    try:
        pid, rc, cpu = status["exit"].split()
        return int(pid), int(rc), float(cpu)
    except (KeyError, ValueError):
        return None


def _verdict(text: str, pid: int) -> str | None:
    """What the tool's own process (not a child of it) said its code raised."""
    said = [w for p, _, w in (line.partition(" ") for line in text.splitlines()) if p == str(pid)]
    return said[0] if said else None


def _result(
    out: bytes,
    cut: bool,
    timed_out: bool,
    status: dict[str, str],
    verdict_text: str,
    launcher_rc: int,
    limits: SandboxLimits,
    seconds: float,
) -> ToolResult:
    text = out.decode("utf-8", "replace")
    if cut:
        text += f"\n[output cut at {limits.max_output_bytes} bytes]"
    tool = _tool_status(status)
    rc = tool[1] if tool else launcher_rc
    verdict = _verdict(verdict_text, tool[0]) if tool and rc == 1 else None
    reason, note = None, None
    if timed_out:
        reason, note = "timeout", f"timed out after {limits.timeout_s:g} s"
    elif cut:
        reason, note = "output_limit", "stopped: too much output"
    elif "fail" in status:
        reason, note = "sandbox", f"the sandbox could not be set up: {status['fail']}"
    elif tool is None:
        reason, note = "sandbox", f"the sandbox ended without the tool's status ({_ended(launcher_rc)})"
    elif "exec" in status:
        reason, note = "exit_code", status["exec"]
    elif verdict == "memory":
        reason, note = "memory_limit", f"out of memory (limit {limits.memory_mb} MiB)"
    elif verdict == "network":
        reason, note = "network", "the network is not available to tools"
    elif verdict == "file_size":
        reason, note = "file_size", f"file size limit ({limits.file_size_mb} MiB) reached"
    elif verdict == "exception":
        reason, note = "exception", "the code raised an exception"
    elif rc in (-signal.SIGXCPU, -signal.SIGKILL) and tool[2] >= limits.cpu_s - 0.05:
        reason, note = "cpu_limit", f"CPU time limit ({limits.cpu_s} s) reached"
    elif rc == -signal.SIGXFSZ:
        reason, note = "file_size", f"file size limit ({limits.file_size_mb} MiB) reached"
    elif rc != 0:
        reason, note = ("signal" if rc < 0 else "exit_code"), _ended(rc)
    if note is not None:
        text = f"{text.rstrip()}\n[tool error: {note}]".lstrip("\n")
    guard, processes = status.get("guard", "none"), status.get("processes", "none")
    return ToolResult(reason is None, text, reason, cut, seconds, rc, guard, processes)


def _ended(rc: int) -> str:
    if rc >= 0:
        return f"exited with code {rc}"
    try:
        return f"killed by {signal.Signals(-rc).name}"
    except ValueError:
        return f"killed by signal {-rc}"
