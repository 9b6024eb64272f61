"""Durable writes (grm.base): atomic_write_text under concurrent writers and full disks, and
atomic_dir / settle_dir under a crash between every pair of filesystem operations."""

from __future__ import annotations

import errno
import os
import stat
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from grm.base import atomic_dir, atomic_write_text, is_complete, settle_dir
from tests.unit.crashes import Crash, crash_at, fail_at

PAYLOADS = [chr(ord("a") + i) * (64 * 1024 + i) for i in range(8)]  # larger than one write() of a pipe buffer


def _write_many(path: str, writer: int, times: int = 40) -> None:
    for _ in range(times):
        atomic_write_text(path, PAYLOADS[writer])


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_concurrent_writers_never_collide_and_a_reader_only_ever_sees_a_whole_file(tmp_path, kind):
    path = tmp_path / "state.json"
    atomic_write_text(path, PAYLOADS[0])
    seen: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        if kind == "threads":
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(_write_many, [str(path)] * 4, range(4)))
        else:
            with ProcessPoolExecutor(2, mp_context=get_context("fork")) as pool:
                list(pool.map(_write_many, [str(path)] * 4, range(4, 8)))
    finally:
        stop.set()
        reader.join()
    assert path.read_text() in PAYLOADS
    assert seen and all(text in PAYLOADS for text in seen), {len(t) for t in seen if t not in PAYLOADS}
    assert _leftovers(tmp_path, {"state.json"}) == []  # every writer's temp file was its own, and went


def test_a_full_disk_at_any_point_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    atomic_write_text(path, "old\n")
    outcomes = []
    for k in range(1, 50):
        with fail_at(k, monkeypatch) as faults:
            try:
                atomic_write_text(path, "new\n")
                outcomes.append("written")
            except OSError as e:
                assert e.errno == errno.ENOSPC
                outcomes.append("failed")
        # written: the new text; failed: the old, or the new when only the directory's fsync failed
        assert path.read_text() == "new\n" if outcomes[-1] == "written" else path.read_text() in ("old\n", "new\n")
        assert _leftovers(tmp_path, {"config.yaml"}) == [], k
        atomic_write_text(path, "old\n")
        if not faults.fired:
            break
    assert outcomes.count("failed") >= 4 and outcomes[-1] == "written", outcomes


def test_the_file_keeps_its_permissions_and_a_new_one_follows_the_umask(tmp_path):
    old = tmp_path / "shared.yaml"
    old.write_text("x")
    old.chmod(0o640)
    atomic_write_text(old, "y")
    assert stat.S_IMODE(old.stat().st_mode) == 0o640
    mask = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "new.yaml", "z")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o640  # 0o666 less 0o027, not mkstemp's 0o600


# --------------------------------------------------------------------------- directories


@pytest.fixture
def no_fsync(monkeypatch):
    """The crash tests kill the process, not the power: a real fsync only makes them slow (each
    fsync call still counts as a point to crash at)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _write_version(path: Path, version: str) -> None:
    """A checkpoint-like directory: files, and a nested atomic_dir as a trainer's save makes."""
    with atomic_dir(path) as tmp:
        (tmp / "driver.json").write_text(f'{{"version": "{version}"}}')
        with atomic_dir(tmp / "policy") as inner:
            (inner / "weights.bin").write_bytes(version.encode() * 1000)
            (inner / "state").mkdir()
            (inner / "state" / "optim.pt").write_text(version * 10)


def _version_of(path: Path) -> str:
    """The version a directory holds, checking that every file of it is that version's."""
    assert is_complete(path) and is_complete(path / "policy"), sorted(p.name for p in path.iterdir())
    version = (path / "driver.json").read_text().split('"')[3]
    assert (path / "policy" / "weights.bin").read_bytes() == version.encode() * 1000
    assert (path / "policy" / "state" / "optim.pt").read_text() == version * 10
    return version


@pytest.mark.usefixtures("no_fsync")
@pytest.mark.parametrize("existing", [True, False], ids=["overwrite", "first-write"])
def test_a_crash_between_any_two_operations_leaves_a_complete_version(tmp_path, monkeypatch, existing):
    """Killed at the k-th filesystem call of writing step-2 (for every k), the next start's
    settle_dir finds the old step-2 or the new one, whole, and nothing else beside it."""
    outcomes = []
    for k in range(1, 200):
        root = tmp_path / f"k{k}"
        root.mkdir()
        path = root / "step-2"
        if existing:
            _write_version(path, "old")
        with crash_at(k, monkeypatch) as faults:
            try:
                _write_version(path, "new")
            except Crash:
                pass
        settle_dir(path)  # the next start
        if path.exists():
            outcomes.append(_version_of(path))
        else:
            assert not existing, f"killed at call {k}: no step-2 left"
            outcomes.append(None)
        assert _leftovers(root, {"step-2"}) == [], k
        if path.exists():
            assert _leftovers(path, {"driver.json", "policy", "COMPLETE"}) == [], k
        _write_version(path, "next")  # and the directory can be written again
        assert _version_of(path) == "next"
        if not faults.fired:
            break
    assert outcomes[-1] == "new" and len(outcomes) > 30, outcomes
    assert ("old" if existing else None) in outcomes  # crashes before the swap kept what was there


@pytest.mark.usefixtures("no_fsync")
def test_a_failure_inside_or_after_the_block_keeps_the_old_version_in_place_without_settling(tmp_path, monkeypatch):
    path = tmp_path / "step-2"
    _write_version(path, "old")
    failed = 0
    for k in range(1, 200):
        with fail_at(k, monkeypatch, errno.EIO) as faults:
            try:
                _write_version(path, "new")
            except OSError:
                failed += 1
        assert _version_of(path) in ("old", "new"), k  # no settle_dir: the failed write put it back itself
        # what a failed clean-up may leave (out of a loader's sight) goes with the next write
        assert all(".old" in x or ".trash-" in x for x in _leftovers(tmp_path, {"step-2"})), k
        _write_version(path, "old")
        assert _leftovers(tmp_path, {"step-2"}) == [], k
        if not faults.fired:
            break
    assert failed > 20
