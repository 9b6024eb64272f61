"""The sandbox's boot code: what ``python -I -S -u -c`` runs for each tool call (``grm.envs.sandbox``
passes this file's text as ``-c`` and its settings as ``argv[1]``). Stdlib only, everything imported
before ``run_as`` drops access; see ``grm.envs.sandbox`` for the three processes it makes and what
each enforces. Status lines go to the parent on ``STATUS``, which the tool's own code never holds; a
Python tool's verdict on what its code raised goes on ``VERDICT``.

Imported as a module it only defines; the work runs as ``__main__``. It is its own file so that it is
linted and read like any other module, not kept as a string.
"""

import ctypes
import errno
import json
import os
import resource
import signal
import socket
import sys
import traceback
import warnings  # noqa: F401  (imported before run_as drops access, like the rest: a tool may need it)

libc = ctypes.CDLL(None, use_errno=True)
NEWPID, NEWNET = 0x20000000, 0x40000000


def report(*words):
    os.write(STATUS, (" ".join(str(w).replace("\n", " ") for w in words) + "\n").encode("utf-8", "replace"))


def fail(msg):
    report("fail", msg)
    os._exit(99)


def become(uid):
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError as e:
        fail(f"cannot run as uid {uid}: {e.strerror}")


def quiet():  # the output pipe is the tool's alone: its end of file is the tool's
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]


# machine: (AUDIT_ARCH_*, the socket syscall's number); io_uring_setup is 425 on each
ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198), "riscv64": (0xC00000F3, 198)}


def socket_filter():
    # seccomp: socket() only for the families the network namespace isolates; no io_uring (its
    # sockets would not pass here); nothing through another ABI (i386, x32) that could.
    spec = ARCHES.get(os.uname().machine)
    if spec is None:
        return False
    arch, nr_socket = spec
    LD, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
    ALLOW, ERRNO = 0x7FFF0000, 0x00050000
    insns = [
        (LD, 0, 0, 4),
        (JEQ, 1, 0, arch),
        (RET, 0, 0, ERRNO | errno.ENOSYS),
        (LD, 0, 0, 0),
        (JGE, 0, 1, 0x40000000),
        (RET, 0, 0, ERRNO | errno.ENOSYS),
        (JEQ, 0, 1, 425),
        (RET, 0, 0, ERRNO | errno.ENOSYS),
        (JEQ, 0, 5, nr_socket),
        (LD, 0, 0, 16),
        (JEQ, 3, 0, socket.AF_INET),
        (JEQ, 2, 0, socket.AF_INET6),
        (JEQ, 1, 0, socket.AF_NETLINK),
        (RET, 0, 0, ERRNO | errno.EAFNOSUPPORT),
        (RET, 0, 0, ALLOW),
    ]
    array = (Insn * len(insns))(*(Insn(*i) for i in insns))
    return libc.prctl(22, 2, ctypes.byref(Prog(len(insns), array)), 0, 0) == 0  # PR_SET_SECCOMP, FILTER


BLOCKED = {
    "socket.connect",
    "socket.bind",
    "socket.getaddrinfo",
    "socket.sendto",
    "socket.sendmsg",
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.call_function",
}


def hook(event, args):
    if event in BLOCKED or (event == "socket.__new__" and args[1] != socket.AF_UNIX):
        raise PermissionError(f"sandbox: {event} is not allowed in this tool")


def net_error(e):
    return (
        isinstance(e, socket.gaierror)
        or (isinstance(e, PermissionError) and "socket." in str(e))
        or (isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EAFNOSUPPORT))
    )


def tool(guard):
    # made before the rlimits, so that even a tool out of memory can still say so
    me = os.getpid()
    verdicts = {k: f"{me} {k}\n".encode() for k in ("memory", "network", "file_size", "exception")}
    try:
        code = set_up(guard)
    except Exception as e:  # the boot code's own fault, before the tool's code runs
        fail(f"the sandbox's boot failed: {type(e).__name__}: {e}")
    if not PYTHON:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores both; a command should not
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        argv = cfg["argv"]
        try:
            os.execvpe(argv[0], argv, dict(os.environ))
        except OSError as e:
            report("exec", f"cannot run {argv[0]}: {e.strerror or e}")
            os._exit(127)
        except Exception as e:
            fail(f"the sandbox's boot failed: {type(e).__name__}: {e}")
    os.close(STATUS)
    if guard == "audit":
        sys.addaudithook(hook)
    sys.argv = ["tool.py"]
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
        sys.stdout.flush()
        sys.stderr.flush()
        too_big = isinstance(e, OSError) and e.errno == errno.EFBIG  # Python ignores SIGXFSZ: the write fails instead
        kind = "memory" if isinstance(e, MemoryError) else "network" if net_error(e) else "file_size" if too_big else "exception"
        if os.getpid() == me:  # not a child the tool forked, which runs this same handler
            try:
                os.write(VERDICT, verdicts[kind])
            except OSError:
                pass
        os._exit(1)
    sys.exit(0)  # through the interpreter's exit: atexit handlers, buffers flushed


def set_up(guard):  # run_as, no privileges, the socket filter, the rlimits; a Python tool's code
    if cfg["run_as"] is not None and os.geteuid() == 0:
        become(cfg["run_as"])
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: no setuid binary gives privileges back
        fail("cannot set no_new_privs: " + os.strerror(ctypes.get_errno()))
    if libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), (CapData * 2)()) != 0:
        fail("cannot drop capabilities: " + os.strerror(ctypes.get_errno()))
    if guard == "namespace" and not socket_filter():
        if cfg["network"] == "namespace":
            fail("no seccomp filter here for sockets the network namespace leaves open (unix sockets, vsock)")
        guard = "namespace_unfiltered"
    report("guard", guard)
    code = None
    if PYTHON:
        try:
            with open(cfg["code"], encoding="utf-8") as fh:
                code = fh.read()
        except OSError as e:
            fail(f"cannot read the tool's code: {e.strerror}")
    for name, (soft, hard) in cfg["rlimits"].items():
        which = getattr(resource, name)
        cap = resource.getrlimit(which)[1]
        if cap != resource.RLIM_INFINITY:
            soft, hard = min(soft, cap), min(hard, cap)
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as e:
            fail(f"cannot set {name} to {soft}: {e}")
    return code


def supervise(processes):
    report("processes", processes)
    try:
        child = os.fork()
    except OSError as e:
        fail(f"cannot start the tool: {e.strerror}")
    if child == 0:
        tool(guard)
    quiet()
    while True:
        pid, status, usage = os.wait4(-1, 0)
        if pid == child:
            break
    report("exit", child, os.waitstatus_to_exitcode(status), "%.3f" % (usage.ru_utime + usage.ru_stime))
    os._exit(0)


if __name__ == "__main__":
    cfg = json.loads(sys.argv[1])
    STATUS, VERDICT = cfg["status_fd"], cfg["verdict_fd"]
    os.set_inheritable(STATUS, False)  # a command's exec closes it
    os.set_inheritable(VERDICT, False)
    PYTHON = cfg["code"] is not None
    want = cfg["network"]
    got = 0
    for through_user, flags in cfg["unshare"]:
        if through_user and cfg["run_as"] is not None and os.geteuid() == 0:
            become(cfg["run_as"])  # a user namespace maps only its creator's uid
        if libc.unshare(flags) == 0:
            got = flags
            break
    if want == "allow":
        guard = "allowed"
    elif want != "audit" and got & NEWNET:
        guard = "namespace"
    elif want == "namespace":
        fail("no network namespace allowed here")
    elif not PYTHON:
        fail(
            "the audit guard needs a Python tool"
            if want == "audit"
            else "no network namespace allowed here, and a command has no other guard"
        )
    else:
        guard = "audit"
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: a tool of the same user cannot open our fds through /proc
    if got & NEWPID:
        try:
            init = os.fork()
        except OSError as e:
            fail(f"cannot start the sandbox's supervisor: {e.strerror}")
        if init == 0:
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the launcher
            private = libc.mount(None, b"/", None, 0x4000 | 0x40000, None) == 0  # MS_REC | MS_PRIVATE
            private = private and libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None) == 0  # NOSUID, NODEV, NOEXEC
            supervise("namespace" if private else "pid")
        quiet()
        os.waitpid(init, 0)
        os._exit(0)
    supervise("group")
