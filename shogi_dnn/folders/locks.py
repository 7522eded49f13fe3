"""One writer at a time for a folder (a run directory, a dataset folder): an advisory lock file.

`train` holds its run directory's lock and `convert` its --out folder's while they run; a second writer
is refused in one line naming the holder. Readers of a run never look at that lock. A dataset's
readers (read_dataset) also hold DATASET/readers.lock shared, appending their Holder as one JSON line,
and its writers (replace_dataset) take it exclusively without waiting and empty it. Where the folder is
read-only or has no flock, a reader goes on without the lock (one log line).

The lock file (WRITER_LOCK in the folder: RUN/writer.lock, DATASET/writer.lock) holds one JSON object:

  key       meaning
  command   the writer ("train", "convert")
  pid       its process id
  host      socket.gethostname() of its machine
  started   when it took the lock, seconds since the epoch
  mode      "flock" or "exclusive" (how it holds the lock, below)

Two modes:
  flock      (default) fcntl.flock(LOCK_EX | LOCK_NB) on the file: the kernel drops the lock when its
             process dies, so a file left by a dead writer is taken over. The holder deletes the file.
  exclusive  where flock fails (ENOLCK, EOPNOTSUPP, ...) or SHOGI_DNN_LOCK_MODE=exclusive: O_CREAT |
             O_EXCL, the file's existence is the lock. A dead process's file of THIS host is taken over
             (pid checked); another host's is refused, naming the file to delete.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from shogi_dnn.errors import RunError

log = logging.getLogger(__name__)

MODE_ENV = "SHOGI_DNN_LOCK_MODE"          # "exclusive": the O_EXCL lock file even where flock works
FLOCK, EXCLUSIVE = "flock", "exclusive"
# flock's errors on file systems that do not support it (then the exclusive mode is used).
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS, errno.EBADF}


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lock: the lock file's JSON (module docstring)."""

    command: str
    pid: int
    host: str
    started: float
    mode: str = FLOCK

    @classmethod
    def me(cls, command: str, mode: str) -> Holder:
        return cls(command, os.getpid(), socket.gethostname(), time.time(), mode)

    def describe(self) -> str:
        """e.g. 'train, pid 1234 on host h since 12:03:04' (the date too when not today)."""
        when = time.localtime(self.started)
        fmt = ("%H:%M:%S" if time.strftime("%Y-%m-%d", when) == time.strftime("%Y-%m-%d")
               else "%Y-%m-%d %H:%M:%S")
        return f"{self.command}, pid {self.pid} on host {self.host} since {time.strftime(fmt, when)}"

    def alive(self) -> bool | None:
        """Whether the holder's process still runs: None when it is on another host (cannot tell)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:          # another user's process: it exists
            return True
        return True


class LockedError(RunError):
    """The folder has another writer (one line naming it)."""


class WriterLock:
    """A held lock: release() (or leaving the `with`) gives it back and deletes the lock file."""

    def __init__(self, path: Path, fd: int, holder: Holder) -> None:
        self.path, self.fd, self.holder = path, fd, holder

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            if _same_file(self.fd, self.path):      # deleted while held (flock): the file is ours
                self.path.unlink()
        except OSError:
            pass
        finally:
            os.close(self.fd)                       # closing drops the flock
            self.fd = -1

    def __enter__(self) -> WriterLock:  # noqa: PYI034 - Python 3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(folder: str | Path, name: str, command: str, *, instead: str) -> WriterLock:
    """Take `folder`/`name` for `command` (the folder is created if absent).

    `instead`: the way out a refusal names, e.g. "choose another --run-dir".
    Raises:
        LockedError: another live writer holds it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if os.environ.get(MODE_ENV, "").strip().lower() != EXCLUSIVE:
        try:
            return _acquire_flock(path, command, folder, instead)
        except _FlockUnsupported as exc:
            log.warning("%s: flock is not supported here (%s): using an exclusive lock file instead "
                        "(docs/runs-and-data.md)", path, exc)
    return _acquire_exclusive(path, command, folder, instead)


class _FlockUnsupported(Exception):
    pass


def _acquire_flock(path: Path, command: str, folder: Path, instead: str) -> WriterLock:
    import fcntl

    while True:
        try:
            fd, created = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), True
        except FileExistsError:
            try:
                fd, created = os.open(path, os.O_RDWR | os.O_CLOEXEC), False
            except FileNotFoundError:          # its holder released it just now: try again
                continue
        try:
            unsupported = _flock_now(fd, fcntl.LOCK_EX)
        except BlockingIOError:
            raise _refusal(folder, path, _read_holder(path), instead) from None
        if unsupported:
            if created:              # our empty file would read as a lock in the exclusive mode
                path.unlink(missing_ok=True)
            raise _FlockUnsupported(unsupported)
        if _same_file(fd, path):
            break
        os.close(fd)              # the holder deleted it between our open and flock: lock the new file
    previous = _read_fd(fd)
    if previous is not None and previous.mode == EXCLUSIVE and previous.alive() is not False:
        os.close(fd)              # an exclusive-mode writer (flock failed for it): its file is its lock
        raise _refusal(folder, path, previous, instead)
    if previous is not None:
        log.warning("%s: taking over the lock of %s (the process is gone)", folder, previous.describe())
    return _write_holder(path, fd, Holder.me(command, FLOCK))


def _acquire_exclusive(path: Path, command: str, folder: Path, instead: str) -> WriterLock:
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            holder = _read_holder(path)
            if holder is None or holder.alive() is not False:
                raise _refusal(folder, path, holder, instead) from None
            log.warning("%s: taking over the lock of %s (the process is gone)", folder, holder.describe())
            path.unlink(missing_ok=True)
            continue
        return _write_holder(path, fd, Holder.me(command, EXCLUSIVE))
    raise _refusal(folder, path, _read_holder(path), instead)


def _refusal(folder: Path, path: Path, holder: Holder | None, instead: str) -> LockedError:
    if holder is None:
        return LockedError(f"{folder} is being written by another process (lock file {path}, unreadable); "
                           f"wait for it or {instead} (delete {path} if no shogi-dnn process writes there)")
    gone = ""
    if holder.mode == EXCLUSIVE and holder.alive() is None:
        gone = f" (if that process is gone, delete {path})"
    return LockedError(f"{folder} is being written by {holder.describe()}; wait for it or {instead}{gone}")


def _write_holder(path: Path, fd: int, holder: Holder) -> WriterLock:
    data = json.dumps(dataclasses.asdict(holder)).encode("utf-8")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return WriterLock(path, fd, holder)


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read_fd(fd: int) -> Holder | None:
    return _parse(os.pread(fd, 1 << 16, 0))


def _read_holder(path: Path) -> Holder | None:
    """The holder named in a lock file (None: absent, empty or not a holder)."""
    try:
        return _parse(path.read_bytes())
    except OSError:
        return None


def _parse(data: bytes) -> Holder | None:
    try:
        raw: Any = json.loads(data.decode("utf-8"))
        return Holder(str(raw["command"]), int(raw["pid"]), str(raw["host"]), float(raw["started"]),
                      str(raw.get("mode", FLOCK)))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None



# ----------------------------------------------------------------------------------------------------
# A dataset's readers and its writer (module docstring)

WRITER_LOCK = "writer.lock"         # in a run or dataset folder: its one writer's lock
READERS_LOCK = "readers.lock"       # in a dataset folder: its readers' shared lock and their names
LOCK_FILES = (WRITER_LOCK, READERS_LOCK)


class ReaderLock:
    """A held shared lock on a dataset (None fd: held without a lock, see read_dataset)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)                       # closing drops the flock
            self.fd = -1

    def __enter__(self) -> ReaderLock:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_dataset(folder: str | Path, command: str) -> ReaderLock:
    """Hold `folder`/readers.lock shared for `command`. Raises LockedError while it is written."""
    import fcntl

    folder = Path(folder)
    path = folder / READERS_LOCK
    try:
        fd, named = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644), True
    except OSError:
        try:                            # a read-only dataset: locked all the same where the file exists
            fd, named = os.open(path, os.O_RDONLY | os.O_CLOEXEC), False
        except OSError as exc:          # ... and else unlockable (or a missing folder: the caller says so)
            log.debug("%s: no readers' lock (%s)", folder, exc.strerror)
            return ReaderLock(-1)
    try:
        unsupported = _flock_now(fd, fcntl.LOCK_SH)
    except BlockingIOError:
        writer = _read_holder(folder / WRITER_LOCK)
        who = writer.describe() if writer is not None else "another process"
        raise LockedError(f"{folder} is being written by {who}; wait for it to finish") from None
    if unsupported:
        log.info("%s: flock is not supported here (%s): reading without the readers' lock", folder,
                 unsupported)
        return ReaderLock(-1)
    line = json.dumps(dataclasses.asdict(Holder.me(command, FLOCK))) + "\n"
    try:
        if named:
            os.write(fd, line.encode("utf-8"))      # one O_APPEND write: whole lines, whatever the others do
    except OSError:
        pass                                        # the lock holds; only the refusal's wording is poorer
    return ReaderLock(fd)



def replace_dataset(folder: str | Path, command: str) -> ReaderLock:
    """Hold `folder`/readers.lock exclusively for `command`; empty it. Raises LockedError while it is read."""
    import fcntl

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / READERS_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        unsupported = _flock_now(fd, fcntl.LOCK_EX)
    except BlockingIOError:
        raise _readers_refusal(folder, path) from None
    if unsupported:
        log.warning("%s: flock is not supported here (%s): its readers cannot be checked", folder,
                    unsupported)
        return ReaderLock(-1)
    os.ftruncate(fd, 0)                             # no reader holds it: their names are stale
    return ReaderLock(fd)


def _flock_now(fd: int, operation: int) -> str:
    """flock(`fd`, `operation`) without waiting: '' when held, else why this file system has no flock (`fd`
    closed). Raises BlockingIOError (`fd` closed) when another holder has it, OSError else.
    """
    import fcntl

    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, BlockingIOError) or exc.errno not in _NO_FLOCK:
            raise
        return os.strerror(exc.errno)
    return ""


def _readers_refusal(folder: Path, path: Path) -> LockedError:
    readers = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        lines = []
    for data in lines:
        holder = _parse(data)
        if holder is not None and holder.alive() is not False:
            readers.append(holder)
    if not readers:
        return LockedError(f"{folder} is being read by another process (it holds {path}); wait for it to "
                           f"end, or choose another --out")
    newest, more = readers[-1], len(readers) - 1
    others = f" (and {more} more reader{'s' if more > 1 else ''})" if more else ""
    return LockedError(f"{folder} is being read by {newest.describe()}{others}; wait for it to end (or "
                       f"stop it), or choose another --out")
