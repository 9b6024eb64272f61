"""The run's local Ray head in a session of its own (``grm.orchestrator.ray_head``), with stand-in
head processes (shell scripts): the address handshake, a head that fails or hangs, and that
stopping it leaves nothing of its session behind, workers in process groups of their own included."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grm.orchestrator import ray_head
from grm.orchestrator.errors import RunError


def stand_in(tmp_path: Path, monkeypatch, code: str) -> None:
    """``start_head`` runs this Python code instead of ``python -m grm.orchestrator.ray_head``."""
    (tmp_path / "head.py").write_text("import os, subprocess, sys, time\n" + code + "\n")
    script = tmp_path / "head.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'head.py'}\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))


def settle(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


# two children, each in a process group of its own, as Ray's workers are
WORKERS = "workers = [subprocess.Popen(['sleep', '300'], preexec_fn=os.setpgrp) for _ in range(2)]"


def test_the_address_line_is_read_past_other_output_and_stop_ends_the_whole_session(tmp_path, monkeypatch):
    said = "print('Started a local Ray instance.')\nprint('grm-ray-head-address 10.0.0.1:6380', flush=True)"
    stand_in(tmp_path, monkeypatch, f"{WORKERS}\n{said}\nsys.stdin.read()")
    assert ray_head.start_head({"num_cpus": 1}, timeout=30) == "10.0.0.1:6380"
    head = ray_head._head
    assert head is not None and os.getsid(head.process.pid) == head.process.pid  # a session of its own
    assert settle(lambda: len(ray_head._session_members(head.process.pid)) == 3)
    assert len({os.getpgid(p) for p in ray_head._session_members(head.process.pid)}) == 3
    ray_head.stop_head(timeout=1.0)
    assert ray_head._head is None and head.process.returncode is not None
    assert ray_head._session_members(head.process.pid) == []


def test_a_head_that_exits_is_one_error_with_its_last_line(tmp_path, monkeypatch):
    stand_in(
        tmp_path,
        monkeypatch,
        "print('Traceback (most recent call last):\\nValueError: bad resources', file=sys.stderr)\nsys.exit(3)",
    )
    with pytest.raises(RunError, match=r"^a local Ray exited with status 3: ValueError: bad resources$"):
        ray_head.start_head({}, timeout=30)
    assert ray_head._head is None


def test_a_head_that_never_answers_is_stopped_with_its_workers(tmp_path, monkeypatch):
    pid_file = tmp_path / "pid"
    stand_in(tmp_path, monkeypatch, f"open('{pid_file}', 'w').write(str(os.getpid()))\n{WORKERS}\ntime.sleep(300)")
    t0 = time.monotonic()
    with pytest.raises(RunError, match=r"^a local Ray did not start within 0.5 s$"):
        ray_head.start_head({}, timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert ray_head._session_members(int(pid_file.read_text())) == []


def test_kill_session_leaves_other_sessions_alone(tmp_path):
    mine = subprocess.Popen(
        [sys.executable, "-c", f"import os, subprocess, time\n{WORKERS}\ntime.sleep(300)"], start_new_session=True
    )
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        assert settle(lambda: len(ray_head._session_members(mine.pid)) == 3)
        ray_head.kill_session(mine.pid)
        assert ray_head._session_members(mine.pid) == [] and mine.wait(5) is not None
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
