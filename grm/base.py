"""What every layer of grm shares: the user-error base class, durable file writes (atomic files and
directories, never through a link), bounded reads of regular files, and the one-writer lock of an
output directory. JSON lines over these are ``grm.jsonl``.

Imports only the standard library, so any module (config, engines, training, orchestrator) may use
it without pulling in a heavy dependency or running against the import contract.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class GrmError(Exception):
    """An error the user can act on: the CLI prints its message as one line and exits 2, no traceback.

    Every user-facing error class (config, data, judge, engine, run, placement, model store)
    derives from it, so the command line catches this one type.
    """


def regular_file(path: Path, error: type[GrmError] = GrmError) -> bool:
    """Whether ``path`` exists (following links), or ``error`` when it is not a regular file.

    Checked before anything opens it: reading a FIFO blocks until a writer comes, and a device
    such as /dev/zero never ends.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise error(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise error(f"{path}: not a regular file (a FIFO, socket or device); give a file")
    return True


def regular_file_bytes(
    path: Path, error: type[GrmError] = GrmError, limit: int | None = None, *, own: bool = False
) -> bytes | None:
    """The bytes of ``path`` (None when it does not exist); ``error`` when it is not a regular file
    or, with ``limit``, holds more than ``limit`` bytes. ``own``: a file grm wrote into one of its
    directories (an eval's results, a run's recorded config): a symbolic link there was planted,
    and is refused rather than followed to a file outside.

    The file is opened without blocking and checked on the open descriptor, so a FIFO or device
    that takes a file's place between a check and the read is still refused, never read.
    """
    if own and Path(path).is_symlink():
        raise error(f"{path}: is a symbolic link; grm reads the files of its own directories only as it wrote them")
    if not regular_file(Path(path), error):  # a device is never opened (a tape rewinds, a tty is taken)
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (os.O_NOFOLLOW if own else 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO since the check
            raise error(f"{path}: not a regular file (a FIFO, socket or device); give a file")
        os.set_blocking(fd, True)
        if limit is not None and st.st_size > limit:
            raise error(f"{path}: {st.st_size} bytes, more than the {limit} this file may hold")
        try:
            raw = fh.read() if limit is None else fh.read(limit + 1)
        except OSError as e:
            raise error(f"{path}: cannot read ({e.strerror or e})") from None
        if limit is not None and len(raw) > limit:  # grew since the check
            raise error(f"{path}: more than the {limit} bytes this file may hold")
        return raw


def open_own(path: str | Path, flags: int, error: type[GrmError] = GrmError) -> int:
    """A descriptor of ``path``, a file in a directory grm writes (a run, an eval, a checkpoint),
    opened with ``flags`` (``os.O_WRONLY | os.O_APPEND | os.O_CREAT``, ``os.O_RDWR``, ...); ``error``
    naming it when it is a symbolic link, a directory, a FIFO or a device.

    grm never writes, appends to, cuts or locks a file through a link: a link planted in a
    directory (``report.md -> ~/.bashrc``) would have grm overwrite whatever it points at. Opened
    without blocking (a FIFO would wait for a reader) and checked on the descriptor, not the name.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise error(f"{path}: is a symbolic link; grm follows no link in its own directories: remove it") from None
        if e.errno == errno.EISDIR:
            raise error(f"{path}: is a directory, where grm keeps a file: remove or rename it") from None
        if e.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise error(f"{path}: not a regular file (a FIFO, socket or device): remove it") from None
        raise error(f"{path}: cannot open ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{path}: not a regular file (a FIFO, socket or device): remove it")
    os.set_blocking(fd, True)
    return fd


def make_dir(path: str | Path, error: type[GrmError] = GrmError, what: str = "the output directory") -> Path:
    """``mkdir -p path``, or ``error`` naming ``path`` and why (a file there, a read-only or virtual
    filesystem such as /proc, no permission) instead of an OSError traceback."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise error(f"{path}: exists and is not a directory; cannot create {what} there") from None
    except OSError as e:
        raise error(f"{path}: cannot create {what} ({e.strerror or e})") from None
    return path


# --------------------------------------------------------------------------- one writer a directory

LOCK_FILE = ".grm-writer.lock"


@contextmanager
def writer_lock(directory: str | Path, command: str, error: type[GrmError] = GrmError) -> Iterator[None]:
    """Hold ``directory`` for one writing ``command`` (``"grm eval"``), or raise ``error`` naming
    the command and pid that holds it.

    A second writer would repair (cut) the last line the first is still writing, and interleave
    its appends with the first's. The lock is an exclusive ``flock`` on ``DIR/.grm-writer.lock``,
    which the kernel drops when its process ends however it ends, so it is never stale.
    """
    import fcntl  # POSIX only, like the rest of a run; imported here so ``import grm`` needs none

    directory = Path(directory)
    fd = open_own(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, error)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "grm command (pid unknown)"
            raise error(f"{directory} is being written by a running {holder}; let it finish, or use another directory") from None
        except OSError:
            pass  # a filesystem without locks (some network mounts): run unguarded rather than not at all
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{command} (pid {os.getpid()})\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- atomic writes


def fsync_dir(path: str | Path) -> None:
    """Make the names created, renamed or removed in directory ``path`` durable: a file's own fsync
    does not cover its directory entry, so without this a power cut can undo a finished rename."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):  # a filesystem that cannot sync a directory
            raise
    finally:
        os.close(fd)


def _new_file_mode(path: Path) -> int:
    """The permissions ``open(path, "w")`` would give: the old file's, else 0o666 less the umask
    (``mkstemp`` makes its file 0o600, which would hide a run's files from the rest of a team)."""
    try:
        st = path.lstat()  # a link's target is not the file being replaced
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    try:  # Linux reports the umask; elsewhere reading it means setting it, briefly
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` by ``text``: a reader sees the old file or the new one, never a part, and once
    this returns the new one survives a power cut.

    Each call writes a temp file of its own beside ``path`` (two writers never share one; the last
    rename wins), fsyncs it, renames it over ``path`` and fsyncs the directory. A failure (a full
    disk) removes the temp file and leaves ``path`` as it was. A symbolic link at ``path`` is
    replaced, never written through; a directory there is a ``GrmError`` naming it.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """``atomic_write_text`` for bytes (a PNG, a safetensors header)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise GrmError(f"{path}: is a directory, where grm keeps a file: remove or rename it")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), _new_file_mode(path))
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


# A directory that ``atomic_dir`` writes is staged as ``.NAME.tmp`` and, while it replaces an older
# one, that older one waits as ``.NAME.old``; a directory being deleted is first renamed to
# ``.NAME.trash-*``, so no half-deleted directory ever sits under a name a reader looks at.
def _staged(path: Path, what: str) -> Path:
    return path.with_name(f".{path.name}.{what}")


def own_dir(path: str | Path, error: type[GrmError] = GrmError) -> Path:
    """``path``, a directory grm keeps inside a run or eval directory (``checkpoints``, ``gate/NAME``),
    or ``error`` when it is a symbolic link or a file: grm would read, write or delete what a link
    planted there points to. A missing ``path`` is fine (grm creates it)."""
    path = Path(path)
    if path.is_symlink():
        raise error(f"{path}: is a symbolic link; grm keeps its own directory here, never a link: remove it")
    if path.exists() and not path.is_dir():
        raise error(f"{path}: is a file where grm keeps a directory: remove or rename it")
    return path


def is_complete(path: str | Path) -> bool:
    """Whether ``path`` is a directory ``atomic_dir`` finished (its ``COMPLETE`` marker exists)."""
    return (Path(path) / "COMPLETE").is_file()


def discard_dir(path: str | Path) -> None:
    """Delete directory ``path`` (if it exists): one rename takes it out of sight, then it is removed;
    a crash midway leaves a ``.NAME.trash-*`` directory that ``settle_dir`` removes. A link or a
    file at ``path`` is removed itself, never what a link points to."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink(missing_ok=True)
        return
    trash = path.with_name(f".{path.name.lstrip('.')}.trash-{uuid.uuid4().hex[:12]}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def settle_dir(path: str | Path) -> None:
    """Finish or undo what a crash cut short in ``atomic_dir(path)``, so ``path`` is a complete
    directory whenever a complete version of it was on disk.

    Replacing a directory takes two renames (``path`` -> ``.old``, ``.tmp`` -> ``path``): after a
    crash between them ``path`` is missing, and the finished ``.tmp`` (else the ``.old``) takes its
    place. Leftovers go: an ``.old`` beside a present ``path``, any other ``.tmp``, trash. Only the
    directory's one writer may call this (it would take a ``.tmp`` another writer is filling).
    """
    path = Path(path)
    tmp, old = _staged(path, "tmp"), _staged(path, "old")
    if not path.exists():
        for candidate in (tmp, old):  # the newer whole version first; a link is not a version grm wrote
            if not candidate.is_symlink() and is_complete(candidate):
                os.rename(candidate, path)
                fsync_dir(path.parent)
                break
    if path.exists():
        discard_dir(old)
    discard_dir(tmp)  # unfinished, or finished before the swap began: the write did not happen
    for trash in path.parent.glob(f".{path.name}.*trash-*"):
        shutil.rmtree(trash, ignore_errors=True)


def _seal(tmp: Path) -> None:
    """fsync every file under ``tmp``, then the ``COMPLETE`` marker, then every directory: the marker
    is durable only once all it vouches for is."""
    dirs = [tmp]
    for p in tmp.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            dirs.append(p)
        elif p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    with open(tmp / "COMPLETE", "w") as fh:
        fh.write("ok\n")
        fh.flush()
        os.fsync(fh.fileno())
    for d in reversed(dirs):
        fsync_dir(d)


@contextmanager
def atomic_dir(path: str | Path, *, is_writer: bool = True) -> Iterator[Path]:
    """Yield a temp dir next to ``path``; on success it takes ``path``'s place, ``COMPLETE`` marked.

    A crash at any point leaves a complete version of ``path`` (the old one or the new one) for
    ``settle_dir`` to find: a half written directory never sits where a loader would look, and an
    old one is removed only after the new one is complete and in place. A failure inside the block
    removes the temp dir. ``is_writer=False`` (non-zero ranks) only yields the shared temp dir; the
    writer creates, seals and renames it.
    """
    path = Path(path)
    tmp, old = _staged(path, "tmp"), _staged(path, "old")
    if is_writer:
        path.parent.mkdir(parents=True, exist_ok=True)
        settle_dir(path)  # an earlier write a crash interrupted
        discard_dir(tmp)
        tmp.mkdir()
    try:
        yield tmp
        if not is_writer:
            return
        _seal(tmp)
    except BaseException:
        if is_writer:  # a failed write (disk full, a crash in the block) leaves no half directory behind
            with contextlib.suppress(OSError):
                discard_dir(tmp)
        raise
    try:
        if path.exists():
            os.rename(path, old)
        os.rename(tmp, path)
        fsync_dir(path.parent)
    except OSError:
        with contextlib.suppress(OSError):  # put a complete version back in place, if the disk lets us
            settle_dir(path)
        raise
    with contextlib.suppress(OSError):  # the new one is in place; a leftover is settled next time
        discard_dir(old)


def check_complete(path: str | Path) -> Path:
    """``path`` if it is a directory ``atomic_dir`` finished, else FileNotFoundError."""
    path = Path(path)
    if not is_complete(path):
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no COMPLETE marker)")
    return path
