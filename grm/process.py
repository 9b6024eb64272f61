"""Facts about this process and its machine: a free TCP port and the process's own peak memory,
and handing freed heap memory back to the system. Standard library only, so the driver and the
light command-line paths may use it."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import resource
import socket
import sys
from collections.abc import Callable


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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> None:
    """Give the pages glibc's allocator holds free back to the system (``malloc_trim(0)``).

    A phase call (a judge's batch, a reference pass, a training step) frees hundreds of MB of
    tensors: keys/values, activations, logits. glibc keeps freed blocks below its mmap threshold
    (which rises to 32 MiB once a large block has been freed) in its heap, resident, so an actor
    that judged and then ran a reference pass held what both phases left at once. Mapping every
    large block instead (``MALLOC_MMAP_THRESHOLD_``) returns memory at once but pays a page fault
    per block in every decode step: far slower. Trimming once when a phase call ends keeps the fast
    allocator inside a phase and gives back what it left between phases, in milliseconds
    (benchmarks/README, "Freed memory between phases"). No-op off glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
