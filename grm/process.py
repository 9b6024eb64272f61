"""Facts about this process and its machine: a free TCP port and the process's own peak memory.
Standard library only, so the driver and the light command-line paths may use it."""

from __future__ import annotations

import resource
import socket
import sys


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (for a server or a process-group rendezvous)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB: ``VmHWM`` of ``/proc/self/status`` on
    Linux (the peak of this program's own memory; ``ru_maxrss`` would start from the parent's peak,
    which Linux carries across the ``exec`` of a process spawned by a large one: 1,270 MiB for a
    220 MiB driver started by a test runner), else ``ru_maxrss`` (macOS reports bytes)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)
