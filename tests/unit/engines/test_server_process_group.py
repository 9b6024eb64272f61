"""A launched server is stopped with everything it started: the whole process group gets SIGTERM,
then SIGKILL after a short grace, and nothing is left behind, even when grm itself is killed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from grm.engines import server_process
from grm.engines.base import EngineError
from grm.engines.server_process import ServerProcess
from grm.process import free_port

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups and the parent-death signal are Linux's")


def _child_of(pid_file, timeout=10.0):
    """The pid the server's shell wrote once its background job started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.05)
    raise AssertionError("the server never started its child")


def _gone(pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            with open(f"/proc/{pid}/stat") as fh:  # a zombie waiting for init to reap it is gone too
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _server(tmp_path, script, **kw):
    url = f"http://127.0.0.1:{free_port()}/v1"
    return ServerProcess(["sh", "-c", script], url, wait=False, **kw)


@pytest.mark.timeout(60)
def test_a_server_that_never_gets_healthy_is_stopped_with_the_child_it_started(tmp_path):
    pid_file = tmp_path / "child"
    server = _server(tmp_path, f"sleep 101 & echo $! > {pid_file}; wait", timeout_s=1.0)
    child = _child_of(pid_file)
    with pytest.raises(EngineError, match="not healthy after"):
        server.wait_healthy()
    assert _gone(child), "the server's child outlived the server"


@pytest.mark.timeout(60)
def test_a_server_that_ignores_sigterm_is_killed_with_its_group_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(server_process, "STOP_GRACE_S", 0.5)
    pid_file = tmp_path / "child"
    server = _server(tmp_path, f"trap '' TERM; sleep 102 & echo $! > {pid_file}; wait; sleep 102")
    child = _child_of(pid_file)
    start = time.monotonic()
    server.stop()
    assert time.monotonic() - start < 3  # 0.5 s of grace, not the 10 s the leader alone used to get
    assert server.proc.poll() is not None and _gone(child)
    server.stop()  # again (atexit): nothing is signalled twice


@pytest.mark.timeout(60)
def test_a_server_whose_leader_exited_has_its_orphans_stopped(tmp_path):
    pid_file = tmp_path / "child"
    server = _server(tmp_path, f"sleep 103 & echo $! > {pid_file}; exit 3", timeout_s=5.0)
    child = _child_of(pid_file)
    with pytest.raises(EngineError, match="exited with code 3"):
        server.wait_healthy()
    assert _gone(child)


@pytest.mark.timeout(60)
def test_the_servers_children_die_with_grm_even_when_grm_is_killed(tmp_path):
    pid_file = tmp_path / "child"
    code = (
        "import sys, time\n"
        "from grm.process import free_port\n"
        "from grm.engines.server_process import ServerProcess\n"
        f"s = ServerProcess(['sh', '-c', 'sleep 104 & echo $! > {pid_file}; wait'], "
        "f'http://127.0.0.1:{free_port()}/v1', wait=False)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "up"
        child = _child_of(pid_file)
        os.kill(owner.pid, signal.SIGKILL)  # as Ray ends a judge actor, or `timeout -s KILL`: no atexit runs
        owner.wait()
        assert _gone(child), "the server's child outlived grm"
    finally:
        owner.kill()
