"""A server command an engine starts and owns (``engine.launch`` of the openai engine, SGLang's
servers per bundle): health-checked before first use, started again on the same port when it dies,
and stopped with the process that started it (a Linux parent-death signal, set before exec)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from grm.base import open_own
from grm.engines.base import EngineError
from grm.engines.credentials import Credentials
from grm.engines.http import HttpClient

_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: kept across exec
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the parent died before the request: it would never be sent
os.execvp(sys.argv[2], sys.argv[2:])
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
        self._lock = threading.Lock()
        self.proc = self._start()
        atexit.register(self.stop)
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        """Return once the server answers its health path; ``EngineError`` (the server stopped)
        when it exits first or stays silent past ``timeout_s``."""
        self._wait_healthy(self.timeout_s)

    def _start(self) -> subprocess.Popen[bytes]:
        # its own session: a stop signal to the run's process group does not reach it before we
        # stop it; on Linux it is also killed when the process that started it dies (a judge actor
        # ended by Ray never runs its atexit), through a shim that asks for that, then execs it
        shim = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid())] if sys.platform == "linux" else []
        return subprocess.Popen(
            [*shim, *self.command], stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
        )

    def revive(self) -> bool:
        """Start the server again if its process has exited (killed, crashed, out of memory), and
        wait until it answers; True if it was restarted. Threads that find it dead together restart
        it once. A server that cannot come back raises ``EngineError``."""
        with self._lock:
            if self.proc.poll() is None:
                return False
            code = self.proc.returncode
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
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
