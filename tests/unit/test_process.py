"""Handing freed heap memory back between phase calls (``grm.process.release_free_memory``) and
where the actors call it (``grm.orchestrator.cores``: the end of every phase call)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from grm.orchestrator import cores
from grm.orchestrator.cores import CoreLedger, CoreShare, NoLedger
from grm.process import _malloc_trim

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# A process that frees 9 of every 10 blocks of 1 MiB from the middle of its heap (as a judge call
# frees its keys/values while its results stay): glibc keeps those pages resident until trimmed.
FRAGMENTED_HEAP = """
import ctypes, ctypes.util, sys
from grm.process import release_free_memory

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD: 1 MiB blocks come from the heap, as once a large block was freed
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
blocks = [libc.malloc(1 << 20) for _ in range(400)]
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
for i, b in enumerate(blocks):
    if i % 10:
        libc.free(b)
before = rss()
release_free_memory()
print(before, rss())
"""


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_release_free_memory_gives_back_pages_freed_inside_the_heap() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", FRAGMENTED_HEAP], capture_output=True, text=True, cwd=root, check=True)
    before, after = (int(x) for x in out.stdout.split())
    # 360 MiB were freed; the 40 kept blocks and the interpreter stay
    assert before - after > 300 << 20, (before, after)


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_malloc_trim_is_found_on_glibc() -> None:
    assert _malloc_trim() is not None


def test_a_phase_call_releases_memory_once_on_the_way_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[int] = []
    monkeypatch.setattr(cores, "release_free_memory", lambda: calls.append(1))
    plain = NoLedger()
    with plain.busy():
        assert calls == []
    assert calls == [1]
    with pytest.raises(RuntimeError), plain.busy():
        raise RuntimeError("a failed phase call still gives its memory back")
    assert calls == [1, 1]

    calls.clear()
    lent = CoreLedger(CoreShare("run", 0, 1), tmp_path)
    with lent.busy():
        with lent.busy():  # a nested call is the same phase
            pass
        assert calls == []
    assert calls == [1]
