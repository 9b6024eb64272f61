"""The one way ``grm view`` reads a directory: files by a single name, relative to the directory's
own descriptor, never through a symbolic link, only when they are regular files, and never more
bytes than the caller allows.

A directory handed to ``grm view`` may come from anywhere (a colleague's tarball, a run written by
someone else): a ``notes.log -> /home/me/.ssh/id_ed25519`` link, a FIFO named ``metrics.jsonl``
(an open for reading would block forever) or a 1 GB ``gate.json`` must show as bad data, not be
followed, hang a request thread or fill memory. Opening with ``dir_fd`` and ``O_NOFOLLOW`` keeps
the check and the open one system call, so nothing can swap a link in between; ``O_NONBLOCK``
makes the open of a FIFO return at once, and ``fstat`` on the open descriptor then refuses it.
"""

from __future__ import annotations

import itertools
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

SMALL_FILE_LIMIT = 4 * 2**20
"""Bytes at most of a small file read whole (gate.json, config.resolved.yaml, metrics.json)."""

_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class BadFile(OSError):
    """A file of the directory that ``grm view`` refuses to read (a link, not a regular file, too
    large); its message names the file and says why. An OSError, so readers treat it like one."""


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link (grm view follows none)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _mib(n: int) -> str:
    return f"{n / 2**20:.3g} MiB"


@dataclass(frozen=True)
class Entry:
    """One name in a directory as ``lstat`` sees it (a link is a link, not its target)."""

    name: str
    mode: int
    size: int

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def kind(self) -> str:
        return "a regular file" if self.is_file else _kind(self.mode)


class Folder:
    """A directory opened once (``path`` is resolved by the caller); every read goes through here."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, _OPEN_DIR)

    def close(self) -> None:
        """Close the directory's descriptor; again is a no-op (closing a number twice could close
        another file that reused it)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def where(self, name: str) -> str:
        return str(self.path / name)

    def _check_name(self, name: str) -> None:
        # callers pass constants or names taken from this directory's own listing; this is the
        # backstop that keeps any other name (a path, '..', a NUL) from reaching the kernel
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise BadFile(f"{self.where('')}: {name!r} is not a file name in this directory")

    def lstat(self, name: str) -> Entry | None:
        """The entry ``name`` (not followed), or None when there is none."""
        self._check_name(name)
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return Entry(name, st.st_mode, st.st_size)

    def open(self, name: str) -> tuple[BinaryIO, os.stat_result]:
        """``name`` opened for reading with its ``fstat``; FileNotFoundError when absent, BadFile
        when it is anything but a regular file."""
        self._check_name(name)
        entry = self.lstat(name)
        if entry is None:
            raise FileNotFoundError(f"{self.where(name)}: no such file")
        if not entry.is_file:  # a device or FIFO is not even opened: opening some has effects
            raise BadFile(f"{self.where(name)}: {entry.kind}")
        try:
            fd = os.open(name, _OPEN_FILE, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as e:  # swapped for a link since the lstat (ELOOP), or unreadable
            raise BadFile(f"{self.where(name)}: {e.strerror or e}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadFile(f"{self.where(name)}: {_kind(st.st_mode)}")
            return os.fdopen(fd, "rb"), st
        except BaseException:
            os.close(fd)
            raise

    def read(self, name: str, limit: int) -> bytes:
        """The whole of a regular file of at most ``limit`` bytes (BadFile when larger)."""
        fh, st = self.open(name)
        with fh:
            if st.st_size > limit:
                raise BadFile(f"{self.where(name)}: {_mib(st.st_size)}, larger than the {_mib(limit)} grm view reads")
            data = fh.read(limit + 1)
        if len(data) > limit:  # grew since fstat
            raise BadFile(f"{self.where(name)}: larger than the {_mib(limit)} grm view reads")
        return data

    def entries(self, limit: int) -> tuple[list[Entry], bool]:
        """At most ``limit`` entries, sorted by name, and whether there were more (a directory of a
        million files costs ``limit`` stat calls, not a million)."""
        return _scan(self.fd, limit)

    def subdir_entries(self, name: str, limit: int) -> tuple[list[str], bool]:
        """Names in the subdirectory ``name`` (never through a link), at most ``limit``."""
        self._check_name(name)
        fd = os.open(name, _OPEN_DIR, dir_fd=self.fd)
        try:
            found, more = _scan(fd, limit, stat_entries=False)
        finally:
            os.close(fd)
        return [e.name for e in found], more


def _scan(fd: int, limit: int, *, stat_entries: bool = True) -> tuple[list[Entry], bool]:
    # scandir duplicates the descriptor and rewinds it when closed, so scans may repeat
    with os.scandir(fd) as it:
        batch = list(itertools.islice(it, limit + 1))
    more = len(batch) > limit
    out = []
    for d in sorted(batch[:limit], key=lambda d: d.name):
        if not stat_entries:
            out.append(Entry(d.name, 0, 0))
            continue
        try:
            st = d.stat(follow_symlinks=False)
        except OSError:
            continue  # removed since it was listed
        out.append(Entry(d.name, st.st_mode, st.st_size))
    return out, more
