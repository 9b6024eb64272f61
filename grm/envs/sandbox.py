"""Run one tool call in a subprocess of its own, with limits; whatever the tool does, the caller
gets a ``ToolResult`` back, never an exception.

Each call starts ``python -I -S -u -c BOOT`` (isolated: no site, no user paths, no ``PYTHON*``
variables) in a fresh session (its own process group), with stdin closed, a scrubbed environment
and a fresh scratch directory as cwd (deleted afterwards). The boot code, still alone in its
process, applies the limits and then runs the tool:

- rlimits: address space (``RLIMIT_AS``), CPU seconds (``RLIMIT_CPU``), file size, open files, no
  core dumps, and, when asked, processes (``RLIMIT_NPROC``; Linux does not apply it to root, so it
  binds only with ``run_as`` or when grm is not root);
- no network: ``unshare(CLONE_NEWNET)`` (as root), else ``unshare(CLONE_NEWUSER | CLONE_NEWNET)``
  (unprivileged user namespaces), either leaving the tool only a loopback that is down; where
  neither is allowed, a Python tool gets an audit hook that refuses sockets, subprocesses, forks
  and ctypes (``ToolResult.network == "audit"``: a weaker guard a determined program can get
  round), and a command is refused (it cannot be guarded without a namespace);
- ``run_as`` (root only): the uid/gid the tool runs as, after the namespace is made;
- then ``exec`` of the command, or the Python code run in the boot interpreter itself.

The parent reads the merged stdout/stderr in chunks of at most 64 KiB and keeps the first
``max_output_bytes``: output past it kills the tool (a 10 MB print is never held in memory). On
the wall-clock deadline, on too much output, and after a normal exit (background children) the
whole process group is killed. The filesystem is not isolated: a tool sees what its user sees.
Measured here (2 shared cores, root): a ``print(1)`` call takes ~0.1 s, the network namespace included.
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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Network = Literal["auto", "namespace", "audit", "allow"]

# Exit codes the boot code uses to say what happened inside a Python tool.
_EXIT_FILE_SIZE, _EXIT_EXCEPTION, _EXIT_MEMORY, _EXIT_NETWORK, _EXIT_SANDBOX = 95, 96, 97, 98, 99

REASONS = (
    "timeout",  # wall-clock limit
    "cpu_limit",  # RLIMIT_CPU (SIGXCPU)
    "memory_limit",  # RLIMIT_AS (MemoryError, or a program killed for it)
    "output_limit",  # more output than max_output_bytes
    "file_size",  # RLIMIT_FSIZE (SIGXFSZ)
    "network",  # the tool tried the network and failed on it
    "exception",  # a Python tool raised
    "exit_code",  # a non-zero exit
    "signal",  # killed by a signal (a segfault, an abort)
    "sandbox",  # the sandbox could not be set up as asked
)


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one tool call."""

    timeout_s: float = 10.0
    """Wall-clock seconds; past them the process group is killed."""
    cpu_s: int = 10
    """CPU seconds (RLIMIT_CPU) of each process of the tool."""
    memory_mb: int = 512
    """Address space (RLIMIT_AS) of each process, MiB. Python itself takes ~25 MiB."""
    max_output_bytes: int = 16 * 1024
    """stdout and stderr together; the rest is dropped and the tool killed."""
    file_size_mb: int = 16
    """Largest file the tool may write (RLIMIT_FSIZE), MiB."""
    open_files: int = 64
    """RLIMIT_NOFILE."""
    max_processes: int | None = None
    """RLIMIT_NPROC: processes of the tool's *user*, all counted (not applied to root: use
    ``run_as``). None leaves it."""
    run_as: int | None = None
    """When grm runs as root: the uid (and gid) the tool runs as, e.g. 65534 (nobody); it must be
    able to read the interpreter (Python tools) or the command. None runs as grm's user."""
    network: Network = "auto"
    """``auto``: a network namespace, else (Python tools only) the audit hook; ``namespace`` or
    ``audit``: that one or a ``sandbox`` failure; ``allow``: no guard."""

    def __post_init__(self) -> None:
        numbers = ("timeout_s", "cpu_s", "memory_mb", "max_output_bytes", "file_size_mb", "open_files")
        bad = [f"{k}={getattr(self, k)!r}" for k in numbers if not getattr(self, k) > 0]
        if self.network not in ("auto", "namespace", "audit", "allow"):
            bad.append(f"network={self.network!r}")
        if bad:
            raise ValueError(f"sandbox limits: {', '.join(bad)} (numbers must be > 0; network auto|namespace|audit|allow)")


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
    """The process's return code (negative: the signal that ended it); None for in-process tools."""
    network: str = "none"
    """The network guard in force: ``namespace``, ``audit``, ``allowed``, or ``none`` (no process)."""


class ToolCounter(Counter):
    """Counts of calls and failures by reason (``counter.add(result)``; ``dict(counter)`` to log)."""

    def add(self, result: ToolResult) -> ToolResult:
        self["calls"] += 1
        if not result.ok:
            self[f"failed_{result.reason}"] += 1
        return result


# The child's boot code: stdlib only, everything it needs imported before the limits apply.
_BOOT = r"""
import ctypes, errno, json, os, resource, socket, sys, traceback, warnings  # all before run_as drops access
cfg = json.loads(sys.argv[1])
status = os.fdopen(cfg["status_fd"], "w")

def fail(msg):
    print("sandbox: " + msg, file=sys.stderr, flush=True)
    os._exit(99)

libc = ctypes.CDLL(None, use_errno=True)
def unshare(flags):
    return libc.unshare(flags) == 0

guard = "allowed"
want = cfg["network"]
if want in ("auto", "namespace"):
    if os.geteuid() == 0 and unshare(0x40000000):
        guard = "namespace"
if cfg["run_as"] is not None and os.geteuid() == 0:
    try:
        os.setgroups([])
        os.setgid(cfg["run_as"])
        os.setuid(cfg["run_as"])
    except OSError as e:
        fail("cannot run as uid %s: %s" % (cfg["run_as"], e))
if want in ("auto", "namespace") and guard != "namespace":
    if unshare(0x10000000 | 0x40000000):
        guard = "namespace"
    elif want == "namespace" or cfg["code"] is None:
        fail("no network namespace allowed here (unshare: %s)" % os.strerror(ctypes.get_errno()))
    else:
        guard = "audit"
if want == "audit":
    if cfg["code"] is None:
        fail("the audit guard needs a Python tool")
    guard = "audit"

for name, (soft, hard) in cfg["rlimits"].items():
    which = getattr(resource, name)
    cap = resource.getrlimit(which)[1]
    if cap != resource.RLIM_INFINITY:
        soft, hard = min(soft, cap), min(hard, cap)
    resource.setrlimit(which, (soft, hard))

status.write(guard)
status.close()

if cfg["code"] is None:
    try:
        os.execvpe(cfg["argv"][0], cfg["argv"], dict(os.environ))
    except OSError as e:
        print("cannot run %s: %s" % (cfg["argv"][0], e), file=sys.stderr, flush=True)
        os._exit(127)

BLOCKED = {"socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "socket.sendmsg",
           "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
           "os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function"}
def hook(event, args):
    if event in BLOCKED or (event == "socket.__new__" and args[1] != socket.AF_UNIX):
        raise PermissionError("sandbox: %s is not allowed in this tool" % event)
if guard == "audit":
    sys.addaudithook(hook)

code = open(cfg["code"], encoding="utf-8").read()
sys.argv = ["tool.py"]
def net_error(e):
    return isinstance(e, socket.gaierror) or (isinstance(e, PermissionError) and "socket." in str(e)) or (
        isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN))
try:
    exec(compile(code, "tool.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as e:
    tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
    try:
        traceback.print_exception(type(e), e, tb)
    except MemoryError:
        print(type(e).__name__, file=sys.stderr)
    sys.stdout.flush(); sys.stderr.flush()
    too_big = isinstance(e, OSError) and e.errno == errno.EFBIG  # Python ignores SIGXFSZ: the write fails instead
    os._exit(97 if isinstance(e, MemoryError) else 98 if net_error(e) else 95 if too_big else 96)
"""


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> ToolResult:
    """Run Python ``code`` as a script (``__name__ == "__main__"``) in the sandbox."""
    return _guarded(None, code, limits)


def run_command(argv: Sequence[str], limits: SandboxLimits = SandboxLimits()) -> ToolResult:
    """Run a command (``argv[0]`` looked up on a minimal PATH) in the sandbox."""
    if not argv:
        return ToolResult(False, "sandbox: empty command", "sandbox")
    return _guarded(list(argv), None, limits)


def _guarded(argv: list[str] | None, code: str | None, limits: SandboxLimits) -> ToolResult:
    try:
        return _run(argv, code, limits)
    except OSError as e:  # no scratch directory, no pipe, no process: the host is short of something
        return ToolResult(False, f"sandbox: cannot run the tool ({e.strerror or e})", "sandbox")


def _rlimits(limits: SandboxLimits) -> dict[str, tuple[int, int]]:
    """(soft, hard) per rlimit. CPU: SIGXCPU at the soft limit, SIGKILL a second later."""
    mb = 1024 * 1024
    cpu = max(1, int(limits.cpu_s))
    out = {
        "RLIMIT_AS": limits.memory_mb * mb,
        "RLIMIT_FSIZE": limits.file_size_mb * mb,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    if limits.max_processes is not None:
        out["RLIMIT_NPROC"] = limits.max_processes
    return {"RLIMIT_CPU": (cpu, cpu + 1)} | {k: (v, v) for k, v in out.items()}


def _run(argv: list[str] | None, code: str | None, limits: SandboxLimits) -> ToolResult:
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="grm-tool-")
    proc: subprocess.Popen[bytes] | None = None
    status_r, status_w = os.pipe()
    try:
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
            "network": limits.network,
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
                pass_fds=(status_w,),
            )
        except OSError as e:
            return ToolResult(False, f"sandbox: cannot start the tool ({e})", "sandbox", seconds=time.monotonic() - start)
        os.close(status_w)
        status_w = -1
        out, cut, timed_out = _read_bounded(proc, limits, start)
        rc = proc.returncode
        guard = os.read(status_r, 64).decode("ascii", "replace") or "none"
        return _result(out, cut, timed_out, rc, limits, guard, time.monotonic() - start)
    finally:
        if proc is not None and proc.returncode is None:
            _kill_group(proc)
        for fd in (status_r, status_w):
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
    """(the first ``max_output_bytes`` of the output, cut, timed out); the group is killed on a cut
    or the deadline, and after the leader exits (its background children with it)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = bytearray()
    cut = timed_out = False
    deadline = start + limits.timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if sel.select(timeout=min(remaining, 0.05)):
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    break  # every writer closed: the tool and anything it started are done
                buf += chunk[: limits.max_output_bytes + 1 - len(buf)]
                if len(buf) > limits.max_output_bytes:
                    cut = True
                    break
            elif _exited(proc):
                break  # the tool exited; a background child still holds the pipe
    _kill_group(proc)
    return bytes(buf[: limits.max_output_bytes]), cut, timed_out


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the leader exited, without reaping it: its pid, which is the group's id, stays taken
    until ``_kill_group`` has signalled the group, so the kill cannot reach a stranger."""
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _result(out: bytes, cut: bool, timed_out: bool, rc: int, limits: SandboxLimits, guard: str, seconds: float) -> ToolResult:
    text = out.decode("utf-8", "replace")
    if cut:
        text += f"\n[output cut at {limits.max_output_bytes} bytes]"
    reason, note = None, None
    if timed_out:
        reason, note = "timeout", f"timed out after {limits.timeout_s:g} s"
    elif cut:
        reason, note = "output_limit", "stopped: too much output"
    elif rc == _EXIT_MEMORY:
        reason, note = "memory_limit", f"out of memory (limit {limits.memory_mb} MiB)"
    elif rc == _EXIT_NETWORK:
        reason, note = "network", "the network is not available to tools"
    elif rc == _EXIT_EXCEPTION:
        reason, note = "exception", "the code raised an exception"
    elif rc == _EXIT_SANDBOX:
        reason, note = "sandbox", "the sandbox could not be set up"
    elif rc == -signal.SIGXCPU:
        reason, note = "cpu_limit", f"CPU time limit ({limits.cpu_s} s) reached"
    elif rc in (-signal.SIGXFSZ, _EXIT_FILE_SIZE):
        reason, note = "file_size", f"file size limit ({limits.file_size_mb} MiB) reached"
    elif rc < 0:
        reason, note = "signal", f"killed by {_signal_name(-rc)}"
    elif rc != 0:
        reason, note = "exit_code", f"exited with code {rc}"
    if note is not None:
        text = f"{text.rstrip()}\n[tool error: {note}]".lstrip("\n")
    return ToolResult(reason is None, text, reason, cut, seconds, rc, guard)


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"
