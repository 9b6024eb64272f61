"""A server command an engine starts and owns (``engine.launch`` of the openai engine, SGLang's
servers per bundle): health-checked before first use, started again on the same port when it dies,
and stopped with everything it started (its process group: SIGTERM, then SIGKILL after
``STOP_GRACE_S``), also when the process that started it dies without stopping it (a Linux
parent-death signal for the server, a watchdog in its group for the processes it forked)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from grm.base import open_own
from grm.engines.base import EngineError
from grm.engines.credentials import Credentials
from grm.engines.http import HttpClient

STOP_GRACE_S = 3.0
"""How long a stopped server's processes have to exit on SIGTERM before the group is killed."""

_DIE_WITH_PARENT = """
import ctypes, os, signal, sys, time
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: kept across exec
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the parent died before the request: it would never be sent
watch, grace = int(sys.argv[2]), float(sys.argv[3])
first = os.fork()
if first == 0:  # the watchdog, forked twice so the server never sees it as its child
    if os.fork():
        os._exit(0)
    try:
        os.read(watch, 1)  # EOF once grm's end is closed: grm stopped us, or died however it died
    except OSError:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)  # the server's children too: the death signal reaches only the server
    time.sleep(grace)
    os.killpg(0, signal.SIGKILL)
    os._exit(0)
os.waitpid(first, 0)
os.close(watch)
os.execvp(sys.argv[4], sys.argv[4:])
"""


class ServerProcess:
    """A server command started by the engine (``engine.launch``), health-checked on ``/models``
    before first use (``health_path``), started again on the same port when it dies (``revive``)
    and stopped with the process that started it."""

    def __init__(
        self,
        command: Sequence[str],
        base_url: str,
        *,
        timeout_s: float = 300.0,
        log_path: str | None = None,
        health_path: str = "/models",
        env: dict[str, str] | None = None,
        wait: bool = True,
    ) -> None:
        """``env``: the server's environment (None: this process's); ``wait=False`` returns once it
        is started (``wait_healthy`` then waits), so several servers can start together."""
        credentials = Credentials()
        self.command, self.health_path = list(command), health_path
        self.base_url = credentials.bind(base_url).rstrip("/")
        # each probe bounded like any request; its reply is small ("/models", "/health")
        self._probe = HttpClient(timeout_s=2.0, max_reply_bytes=1 << 20, credentials=credentials)
        append = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._log = os.fdopen(open_own(log_path, append, EngineError), "ab") if log_path else subprocess.DEVNULL
        self.timeout_s, self.env = timeout_s, env
        self.restarts = 0
        """Times the server was found dead and started again."""
        self._lock = threading.RLock()  # revive holds it while a failed start stops the server
        self._watch: int | None = None  # the write end of the watchdog's pipe (Linux)
        self._running = False  # a group to end: never signalled twice (its id may be reused once it is gone)
        self.proc = self._start()
        atexit.register(self.stop)
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        """Return once the server answers its health path; ``EngineError`` (the server stopped)
        when it exits first or stays silent past ``timeout_s``."""
        self._wait_healthy(self.timeout_s)

    def _start(self) -> subprocess.Popen[bytes]:
        # its own session and process group: a stop signal to the run's process group does not
        # reach it before we stop it, and stopping it signals the whole group (servers fork workers:
        # SGLang's schedulers, a shell's jobs). On Linux a shim asks for the server to be killed
        # when the process that started it dies (a judge actor ended by Ray never runs its atexit),
        # and leaves a watchdog in the group that ends the group once a pipe from this process
        # closes, which the kernel does however this process ends (SIGKILL included).
        if sys.platform != "linux":
            proc = subprocess.Popen(
                self.command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
            )
            self._running = True
            return proc
        read, self._watch = os.pipe()
        shim = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), str(read), str(STOP_GRACE_S)]
        try:
            proc = subprocess.Popen(
                [*shim, *self.command],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
                pass_fds=(read,),
            )
        except BaseException:
            os.close(self._watch)
            self._watch = None
            raise
        finally:
            os.close(read)
        self._running = True
        return proc

    def revive(self) -> bool:
        """Start the server again if its process has exited (killed, crashed, out of memory), and
        wait until it answers; True if it was restarted. Threads that find it dead together restart
        it once. A server that cannot come back raises ``EngineError``."""
        with self._lock:
            if self.proc.poll() is None:
                return False
            code = self.proc.returncode
            self._end_group()  # workers the dead server left would hold its port and its GPUs
            self.proc = self._start()
            self.restarts += 1
            try:
                self._wait_healthy(self.timeout_s)
            except EngineError as e:
                raise EngineError(f"the launched server died (exit code {code}) and did not come back: {e}") from None
            return True

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()  # what it started may outlive it
                raise EngineError(
                    f"server command exited with code {self.proc.returncode} before it was ready: {shlex.join(self.command)}"
                )
            with contextlib.suppress(EngineError):  # not up yet, or not answering well yet
                if self._probe.exchange("GET", self.base_url + self.health_path).status == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"server at {self.base_url} not healthy after {timeout_s:.0f} s: {shlex.join(self.command)}")

    def stop(self) -> None:
        """End the server and every process of its group: SIGTERM, then SIGKILL to those left after
        ``STOP_GRACE_S``. Safe to call again (``atexit`` calls it too)."""
        with self._lock:
            self._end_group()

    def _end_group(self) -> None:
        if not self._running:
            return
        self._running = False
        group = self.proc.pid  # the session's leader: its pid is the group's id
        if _signal_group(group, signal.SIGTERM):
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline:
                self.proc.poll()  # reap the leader: a zombie still counts as a member
                if not _signal_group(group, 0):
                    break
                time.sleep(0.05)
            else:
                _signal_group(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_GRACE_S)  # SIGKILLed: it has gone, or is a zombie about to be reaped
        if self._watch is not None:  # the watchdog is gone with the group; nothing reads this end now
            os.close(self._watch)
            self._watch = None


def _signal_group(group: int, sig: int) -> bool:
    """Send ``sig`` to process group ``group``; False when no process of it is left."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member that became another user's (setuid): ours are signalled
        return True
    return True
