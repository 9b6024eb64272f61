"""Tool faults end as ToolResults with ok=False and a reason, quickly, never as an exception: a hang,
crashes, an output flood, a network attempt, a memory blow-up, CPU spin, a big file, a fork bomb."""

import os
import shutil
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from grm.envs.sandbox import SandboxLimits, ToolCounter, run_command, run_python

FAST = SandboxLimits(timeout_s=1.0, cpu_s=2)


def timed(fn, *args):
    start = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - start


def gone(pid: int) -> bool:
    """The process no longer runs (it may linger as a zombie until its new parent reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith(("Z", "X"))
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_plain_call_returns_its_output():
    r = run_python("print(6 * 7)")
    assert r.ok and r.text == "42\n" and r.reason is None and r.exit_code == 0 and r.network in ("namespace", "audit")


def test_a_hang_is_killed_at_the_timeout_with_its_whole_process_group():
    code = "import subprocess, time\nchild = subprocess.Popen(['sleep', '60'])\nprint(child.pid, flush=True)\ntime.sleep(60)\n"
    r, seconds = timed(run_python, code, SandboxLimits(timeout_s=1.0, network="namespace"))
    if r.reason == "sandbox":
        pytest.skip("no network namespace here; the audit guard refuses subprocesses")
    assert not r.ok and r.reason == "timeout" and "timed out after 1 s" in r.text
    assert 1.0 <= seconds < 3
    time.sleep(0.1)
    assert gone(int(r.text.split()[0]))


@pytest.mark.parametrize(
    "code,reason,says",
    [
        ("import ctypes; ctypes.string_at(0)", "signal", "killed by SIGSEGV"),
        ("import sys; print('bye'); sys.exit(3)", "exit_code", "exited with code 3"),
        ("raise ValueError('no good')", "exception", "ValueError: no good"),
    ],
)
def test_a_crash_is_an_observation(code, reason, says):
    r, seconds = timed(run_python, code, FAST)
    assert not r.ok and r.reason == reason and says in r.text and seconds < 3


def test_a_10_mb_print_returns_the_first_bytes_and_a_cut_note_without_holding_it():
    limits = SandboxLimits(timeout_s=2.0, max_output_bytes=4096)
    tracemalloc.start()
    try:
        r, seconds = timed(run_python, "import sys; sys.stdout.write('x' * 10_000_000)", limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not r.ok and r.reason == "output_limit" and r.cut
    assert r.text.startswith("x" * 4096) and "[output cut at 4096 bytes]" in r.text and len(r.text) < 4200
    assert peak < 1_000_000 and seconds < 3


@pytest.mark.parametrize("network", ["auto", "audit"])
def test_a_network_attempt_gets_an_error_observation(network):
    code = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"
    r, seconds = timed(run_python, code, SandboxLimits(timeout_s=2.5, network=network))
    assert not r.ok and r.reason == "network" and "network is not available" in r.text and seconds < 3
    assert r.network == "audit" if network == "audit" else r.network in ("namespace", "audit")


def test_the_audit_guard_also_refuses_subprocesses():
    r = run_python("import os; os.system('echo hi')", SandboxLimits(network="audit"))
    assert not r.ok and "os.system is not allowed" in r.text and "hi" not in r.text.split("\n")


def test_a_memory_blow_up_is_stopped_by_the_address_space_limit():
    r, seconds = timed(run_python, "x = bytearray(400 * 2**20)", SandboxLimits(memory_mb=64, timeout_s=2))
    assert not r.ok and r.reason == "memory_limit" and "out of memory (limit 64 MiB)" in r.text and seconds < 3


def test_cpu_spin_is_stopped_by_the_cpu_limit():
    r, seconds = timed(run_python, "while True: pass", SandboxLimits(cpu_s=1, timeout_s=2.9))
    assert not r.ok and r.reason in ("cpu_limit", "timeout") and seconds < 3.2


def test_a_big_file_is_stopped_by_the_file_size_limit():
    r = run_python("open('big', 'wb').write(b'x' * 3 * 2**20)", SandboxLimits(file_size_mb=1, timeout_s=2))
    assert not r.ok and r.reason == "file_size"


def _processes_of(uid: int) -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                n += os.stat(f"/proc/{d}").st_uid == uid
            except OSError:
                pass
    return n


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
def test_a_fork_bomb_is_bounded_by_the_process_limit():
    # Linux never applies RLIMIT_NPROC to root: as root the tool runs as nobody (run_as).
    root = os.geteuid() == 0
    uid = 65534 if root else os.geteuid()
    allowed = _processes_of(uid) + 20
    limits = SandboxLimits(timeout_s=1.0, max_processes=allowed, run_as=65534 if root else None)
    peak, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _processes_of(uid))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r, seconds = timed(run_command, ["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 5"], limits)
    finally:
        done.set()
        watcher.join()
    assert "fork" in r.text.lower()  # dash: "Cannot fork"
    assert 0 < peak[0] <= allowed and seconds < 3


def test_the_environment_is_scrubbed_and_the_scratch_directory_removed(monkeypatch):
    monkeypatch.setenv("GRM_TEST_SECRET", "hunter2")
    r = run_python("import os; print(sorted(os.environ)); print(os.getcwd()); open('f', 'w').write('x')")
    names, cwd = r.text.splitlines()[:2]
    assert r.ok and "GRM_TEST_SECRET" not in names and "hunter2" not in r.text
    assert eval(names) == ["HOME", "LANG", "PATH", "TMPDIR"]
    assert Path(cwd).name.startswith("grm-tool-") and not Path(cwd).exists()


def test_a_background_child_does_not_hold_the_call():
    r, seconds = timed(run_command, ["sh", "-c", "echo started; sleep 30 &"], SandboxLimits(timeout_s=2))
    assert r.ok and r.text == "started\n" and seconds < 1.5


def test_a_missing_command_and_an_empty_one_are_results():
    r = run_command(["no-such-command-grm"], FAST)
    assert not r.ok and r.reason == "exit_code" and r.exit_code == 127 and "cannot run no-such-command-grm" in r.text
    assert run_command([], FAST).reason == "sandbox"


def test_the_counter_counts_calls_and_failures_by_reason():
    c = ToolCounter()
    c.add(run_python("print(1)"))
    c.add(run_python("raise KeyError", FAST))
    assert dict(c) == {"calls": 2, "failed_exception": 1}


def test_bad_limits_are_refused_and_a_command_cannot_be_guarded_by_the_audit_hook():
    with pytest.raises(ValueError, match=r"timeout_s=0, network='wifi'"):
        SandboxLimits(timeout_s=0, network="wifi")
    r = run_command(["echo", "hi"], SandboxLimits(network="audit"))
    assert not r.ok and r.reason == "sandbox" and "the audit guard needs a Python tool" in r.text


def test_code_that_is_not_valid_unicode_still_gives_a_result():
    r = run_python("print('a')  # a lone surrogate: \udcff")
    assert r.ok and r.text == "a\n"
