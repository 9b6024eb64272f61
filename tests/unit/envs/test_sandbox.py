"""Tool faults end as ToolResults with ok=False and a truthful reason, quickly, never as an exception:
a hang, crashes, an output flood, a network attempt, a memory blow-up, CPU spin, a big file, a fork
bomb; bad limits and bad commands are refused naming what is wrong; every process a tool starts dies
with it; it cannot see or signal grm, reach a unix socket on the host, or forge the sandbox's reasons."""

import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.envs import sandbox
from grm.envs.sandbox import run_command, run_python
from grm.envs.tool_limits import SandboxLimits, ToolCounter

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
    assert r.processes in ("namespace", "pid", "group")


def _running_with(arg: str) -> list[int]:
    """Host pids of live processes with ``arg`` on their command line."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if arg.encode() in Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0") and not gone(int(d)):
                    out.append(int(d))
            except OSError:
                pass
    return out


# A plain child, and one that leaves the process group (setsid) with its output closed: the tester's
# escape, which outlived the tool by seconds when only the group was killed.
_SPAWN = """import subprocess, sys, time
subprocess.Popen(['sleep', {plain!r}])
subprocess.Popen(['sleep', {escapee!r}], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print('started', flush=True)
"""


@pytest.mark.parametrize(
    "ending,then,reason",
    [("exits", "", None), ("hangs", "time.sleep(60)", "timeout"), ("floods", "sys.stdout.write('x' * 100_000)", "output_limit")],
)
def test_every_process_a_tool_starts_dies_with_it_however_the_tool_ends(ending, then, reason):
    plain, escapee = (f"{random.randint(1000, 9999)}.{random.randint(10**5, 10**6)}" for _ in range(2))
    limits = SandboxLimits(timeout_s=1.0, max_output_bytes=1000, network="namespace")
    r = None
    try:
        r, seconds = timed(run_python, _SPAWN.format(plain=plain, escapee=escapee) + then, limits)
        if r.reason == "sandbox" or r.processes == "group":
            pytest.skip(f"no PID namespace here ({r.text.strip()[-80:]}): a child that calls setsid escapes the group")
        assert r.reason == reason and r.text.startswith("started") and seconds < 2
        deadline = time.monotonic() + 1.0  # on a kill by grm, the namespace's init dies with the launcher
        while (_running_with(plain) or _running_with(escapee)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _running_with(plain) == [] and _running_with(escapee) == []
    finally:  # where a child may have escaped (no PID namespace), it may still be starting: look a few times
        for _ in range(1 if r is not None and r.processes in ("namespace", "pid") else 10):
            for pid in _running_with(plain) + _running_with(escapee):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)


def test_a_tool_that_closes_its_output_and_waits_is_killed_for_time_and_said_so():
    r, seconds = timed(run_python, "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(30)", FAST)
    assert not r.ok and r.reason == "timeout" and r.text == "[tool error: timed out after 1 s]" and 1.0 <= seconds < 2


def test_a_tool_cannot_read_other_processes_environments_nor_signal_grm():
    token = f"grm-canary-{random.randint(10**9, 10**10)}"
    helper = subprocess.Popen(["sleep", "30"], env={"GRM_CANARY": token})  # a process of grm's user holding a secret
    got: list[int] = []
    before = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    code = f"""import os, signal
seen = b''
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            seen += open('/proc/' + p + '/environ', 'rb').read()
        except OSError:
            pass
print({token!r}.encode() in seen)
for pid in (os.getppid(), {os.getpid()}, {helper.pid}):
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        pass
"""
    try:
        r = run_python(code, FAST)
        time.sleep(0.1)
        alive = helper.poll() is None
    finally:
        signal.signal(signal.SIGUSR1, before)
        helper.kill()
        helper.wait()
    if r.processes != "namespace":
        pytest.skip(f"no PID namespace with a private /proc here (processes={r.processes})")
    assert r.ok and r.text == "False\n" and got == [] and alive


def test_a_tool_cannot_reach_a_unix_socket_listening_on_the_host(tmp_path):
    path = str(tmp_path / "grm.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    server.setblocking(False)
    code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\ns.sendall(b'hello')"
    try:
        py = run_python(code, FAST)
        cmd = run_command([sys.executable, "-I", "-c", code], FAST)
        if py.network != "namespace":
            pytest.skip(f"no filtered network namespace here (network={py.network})")
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    assert py.reason == "network" and "Address family not supported" in py.text and "network is not available" in py.text
    assert cmd.reason == "exit_code" and "Address family not supported" in cmd.text and cmd.network == "namespace"


def test_the_tool_has_no_capabilities_and_cannot_raise_its_limits():
    code = (
        "import resource\nprint(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))"
    )
    r = run_python(code, FAST)
    assert r.reason == "exception" and r.text.startswith("0000000000000000\n") and "not allowed to raise maximum limit" in r.text


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(code=st.integers(1, 255), how=st.sampled_from(["import sys; sys.exit({})", "import os; os._exit({})"]))
def test_an_exit_code_is_reported_as_an_exit_code_whatever_its_value(code, how):
    r = run_python(how.format(code), FAST)  # 97 and 98 once read as memory_limit and network
    assert (r.reason, r.exit_code, r.text) == ("exit_code", code, f"[tool error: exited with code {code}]")


@pytest.mark.parametrize("sig", [signal.SIGXCPU, signal.SIGKILL, signal.SIGTERM])
def test_a_signal_a_tool_sends_itself_is_not_read_as_a_limit(sig):
    r = run_python(f"import os; os.kill(os.getpid(), {int(sig)})", FAST)
    assert r.reason == "signal" and r.exit_code == -sig and f"killed by {sig.name}" in r.text


def test_what_a_forked_child_raised_is_not_read_as_the_tools_own_failure():
    r = run_python("import os, sys\nif os.fork() == 0:\n    raise MemoryError\nos.wait()\nsys.exit(1)", FAST)
    assert (r.reason, r.exit_code) == ("exit_code", 1) and r.text.endswith("MemoryError\n[tool error: exited with code 1]")


def test_a_tool_writing_on_every_descriptor_cannot_forge_the_sandbox_status():
    forged = "fail forged\\nexit 2 0 9.9\\nguard allowed\\nprocesses group\\nexec cannot run forged\\n"
    code = "import contextlib, os\nfor fd in range(3, 256):\n    with contextlib.suppress(OSError):\n"
    code += f"        os.write(fd, b'{forged}')\n"
    py = run_python(code + "print('done')")
    cmd = run_command(["sh", "-c", f"for fd in 3 4 5 6 7 8 9; do printf '{forged}' >&$fd; done 2>/dev/null; echo done"])
    for r in (py, cmd):
        assert r.ok and r.text == "done\n" and r.exit_code == 0 and r.network != "allowed" and r.processes != "group"


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
        # exec, not a fork, keeps the shell (and with it the bomb: all die with the tool now) until the timeout
        r, seconds = timed(run_command, ["sh", "-c", "bomb() { bomb | bomb & }; bomb; exec sleep 5"], limits)
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
    with pytest.raises(ValueError, match=r"^timeout_s: Input should be greater than 0 \(got 0\); network: Input should be"):
        SandboxLimits(timeout_s=0, network="wifi")
    r = run_command(["echo", "hi"], SandboxLimits(network="audit"))
    assert not r.ok and r.reason == "sandbox" and "the audit guard needs a Python tool" in r.text


_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2, 0.5, 1.0, 2**31, 2**63, 2**64, 10**30, "5", "auto", "allow", "wifi", [1], {}]),
    st.text(max_size=4),
)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(field=st.sampled_from(sorted(SandboxLimits.model_fields)), value=_ANY)
def test_a_limit_is_refused_naming_its_field_or_holds_a_value_of_its_type_that_the_kernel_takes(field, value):
    try:
        limits = SandboxLimits(**{field: value})
    except ValueError as e:
        assert str(e).startswith(f"{field}: ") and "\n" not in str(e)
        return
    held = getattr(limits, field)
    annotation = SandboxLimits.model_fields[field].annotation
    kinds = typing.get_args(annotation) or (annotation,)
    assert not isinstance(held, bool) and (held is None or field == "network" or isinstance(held, kinds))
    assert not isinstance(held, float) or (math.isfinite(held) and held > 0)
    for soft, hard in sandbox._rlimits(limits).values():  # what setrlimit gets: C integers, soft <= hard
        assert type(soft) is int and type(hard) is int and 0 <= soft <= hard < 2**63
    assert limits.run_as is None or 0 < limits.run_as < 2**32 - 1  # uid_t; -1 means "unchanged" to setuid


def test_an_unknown_limit_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^memroy_mb: Extra inputs are not permitted \(got 64\)$"):
        SandboxLimits(memroy_mb=64)


@pytest.mark.parametrize(
    "limits",
    [
        {"memory_mb": 1},
        {"open_files": 1},
        {"max_output_bytes": 1},
        {"timeout_s": 1e-6},
        {"file_size_mb": 1},
        {"memory_mb": 1 << 20, "file_size_mb": 1 << 20, "open_files": 1 << 20, "max_processes": 1 << 22, "cpu_s": 10**6},
    ],
)
def test_the_extremes_of_valid_limits_give_a_truthful_result_never_the_boots_traceback(limits):
    for r in (run_python("print('hi')", SandboxLimits(**limits)), run_command(["echo", "hi"], SandboxLimits(**limits))):
        assert 'File "<string>"' not in r.text and r.reason in (None, "memory_limit", "output_limit", "timeout", "exit_code")
        assert r.ok or r.text.endswith("]")


_TEXT = st.text(st.characters(exclude_categories=()), max_size=6)  # surrogates and NUL included


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(name=_TEXT, args=st.lists(_TEXT, max_size=3))
def test_any_command_line_gives_a_result_never_an_exception_nor_the_boots_traceback(name, args):
    argv = ["grm-no-such-" + name, *args]
    unencodable = any("\0" in a or any("\ud800" <= c <= "\udc7f" for c in a) for a in argv)
    r = run_command(argv, FAST)
    assert 'File "<string>"' not in r.text
    if unencodable:
        assert (r.reason, r.exit_code) == ("sandbox", None) and r.text.startswith("sandbox: argument ")
    else:
        assert (r.reason, r.exit_code) == ("exit_code", 127) and "cannot run grm-no-such-" in r.text


@pytest.mark.parametrize(
    "argv,says",
    [
        ([""], "empty command name"),
        (["a\x00b"], "argument 0 contains a NUL character"),
        (["echo", "\ud800"], "argument 1 has characters the file system cannot encode"),
        ("echo hi", "the command must be a list of strings, not a str"),
        (["echo", b"hi"], "argument 1 is a bytes, not a string"),
        ([], "empty command"),
    ],
)
def test_a_command_that_cannot_be_run_is_refused_before_a_process_starts(argv, says):
    r = run_command(argv, FAST)
    assert (r.ok, r.reason, r.text, r.exit_code, r.processes) == (False, "sandbox", f"sandbox: {says}", None, "none")


def test_code_or_limits_of_the_wrong_type_are_refused_not_raised():
    assert run_python(b"print(1)").text == "sandbox: the code must be a string, not bytes"  # type: ignore[arg-type]
    assert run_python("print(1)", {"timeout_s": 1}).reason == "sandbox"  # type: ignore[arg-type]


def test_namespaces_are_tried_best_first_as_root_directly_else_through_a_user_namespace():
    pid_mnt, net, user = 0x20000000 | 0x20000, 0x40000000, 0x10000000
    assert sandbox._unshare_attempts("auto", 0) == [
        (False, pid_mnt | net),
        (False, net),
        (True, user | pid_mnt | net),
        (True, user | net),
    ]
    assert sandbox._unshare_attempts("allow", 1000) == [(True, user | pid_mnt)]


def test_without_namespaces_the_result_says_so_and_a_command_is_refused(monkeypatch):
    monkeypatch.setattr(sandbox, "_unshare_attempts", lambda network, euid: [])
    py, cmd = run_python("print(1)", FAST), run_command(["echo", "1"], FAST)
    allowed = run_command(["echo", "1"], SandboxLimits(network="allow"))
    strict = run_python("print(1)", SandboxLimits(network="namespace"))
    assert py.ok and (py.network, py.processes) == ("audit", "group")
    assert cmd.reason == "sandbox" and "no network namespace allowed here, and a command has no other guard" in cmd.text
    assert allowed.ok and (allowed.network, allowed.processes) == ("allowed", "group")
    assert strict.reason == "sandbox" and "no network namespace allowed here" in strict.text


def test_code_that_is_not_valid_unicode_still_gives_a_result():
    r = run_python("print('a')  # a lone surrogate: \udcff")
    assert r.ok and r.text == "a\n"
