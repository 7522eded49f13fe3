"""Input files for `convert`: record files, folders (recursive) and archives, streamed one file at a time.

`iter_sources(inputs)` yields a `SourceFile(name, data)` for every record file, in a deterministic
order (inputs in the given order, folder entries and archive members sorted by name), and a
`KifuError` (yielded, not raised) for an input that cannot be read, so one unreadable archive never
stops a conversion. Only one file's bytes are held at a time (7z: a small bounded queue).

Names: a plain file keeps the path it was found under (`corpus/2024/game.csa`); an archive member
is named `archive.zip:member.csa`, the form KifuError and the games table use.

Archives: .zip, .tar, .tar.gz/.tgz, .tar.bz2, .tar.xz and, when py7zr is installed (extra
`archives`), .7z. Nested archives are not opened (they are reported as skipped).

Hostile inputs cost bounded memory and time, and are skipped with a reason (a KifuError, listed in
convert-report.json) while the rest converts:

- members are streamed in 1 MiB blocks and a member is skipped once it decompresses to more than
  MAX_MEMBER_BYTES (256 MiB; a record file is a few KiB, a year of a server's games a few tens of MiB);
  a zip member whose header declares more is skipped without decompressing anything;
- a member is skipped when it decompresses to more than MAX_RATIO (100) times its compressed size
  (zip: per member; tar.gz/.bz2/.xz and 7z: the whole archive's size, and the rest of such an archive
  is not read, since reaching the next member would mean decompressing the bomb). Text records
  compress 5-20x; the ratio is checked only past RATIO_FLOOR_BYTES (1 MiB) of output. A 1 MB zip
  holding a 1 GiB member (the classic bomb, ~1000x) is skipped after at most 1 MiB of output;
- a symlink that loops or whose target is missing is skipped (`dangling symlink`, `symlink loop`).
- a tar member with a record's name that is a symbolic or hard link, a device or a FIFO is skipped
  with that reason (a link's target is read where it is stored; nothing outside the archive is read).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import tarfile
import threading
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import RECORD_SUFFIXES

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".7z")
# A folder or archive entry is a record file when its suffix is one of these (case-insensitive).
RECORD_FILE_SUFFIXES = tuple(RECORD_SUFFIXES)
_7Z_QUEUE = 8          # members decompressed ahead of the consumer (bounds memory for .7z)
MAX_MEMBER_BYTES = 256 << 20     # an archive member decompressing to more is skipped (module docstring)
MAX_RATIO = 100                  # ... or to more than this many times its compressed size
RATIO_FLOOR_BYTES = 1 << 20      # the ratio is checked once a member's output passes this
_BLOCK = 1 << 20                 # members are read in blocks of this size


class _TooLarge(Exception):
    """A member over MAX_MEMBER_BYTES or MAX_RATIO: the reason, for the report."""


def _check_size(size: int, compressed: int | None) -> None:
    """Raise _TooLarge when `size` decompressed bytes (from `compressed`, when known) exceed a cap."""
    if size > MAX_MEMBER_BYTES:
        raise _TooLarge(f"skipped: decompresses to more than {MAX_MEMBER_BYTES:,} bytes "
                        "(sources.MAX_MEMBER_BYTES)")
    if compressed is not None and size > RATIO_FLOOR_BYTES and size > MAX_RATIO * max(compressed, 1):
        raise _TooLarge(f"skipped: decompresses to more than {MAX_RATIO} times its compressed size "
                        f"({compressed:,} bytes; sources.MAX_RATIO), a decompression bomb?")


def _read_capped(stream, compressed: int | None) -> bytes:
    """A member's bytes read in blocks, stopping (_TooLarge) as soon as a cap is passed."""
    parts, size = [], 0
    while True:
        block = stream.read(_BLOCK)
        if not block:
            return b"".join(parts)
        size += len(block)
        _check_size(size, compressed)
        parts.append(block)


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """One record file's bytes. `name` is a path or `archive:member`."""

    name: str
    data: bytes


def is_archive(name: str) -> bool:
    """True when the name ends with a supported archive suffix (case-insensitive)."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def is_record_name(name: str) -> bool:
    """True when the name ends with a record suffix (.csa .kif .kifu .ki2 .ki2u .sfen .usi)."""
    return name.lower().endswith(RECORD_FILE_SUFFIXES)


def iter_sources(inputs: Sequence[str | os.PathLike[str]]) -> Iterator[SourceFile | KifuError]:
    """Yield every record file of the inputs, in order (see the module docstring).

    A file given explicitly is read whatever its suffix (the reader detects the format); inside
    folders and archives only record and archive suffixes are taken, so README files are ignored.
    """
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            for file in _walk(path):
                problem = _link_problem(file)
                if problem:
                    yield KifuError(str(file), 0, problem)
                else:
                    yield from _iter_path(file)
        elif _link_problem(path):
            yield KifuError(str(path), 0, _link_problem(path))
        elif path.exists():
            yield from _iter_path(path)
        else:
            yield KifuError(str(path), 0, "no such file or folder")


def list_files(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The files (records and archives) `iter_sources` will open, for a progress total."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        files.extend(_walk(path) if path.is_dir() else [path])
    return [file for file in files if not _link_problem(file)]    # skipped, with a reason, by iter_sources


def _link_problem(path: Path) -> str:
    """Why a symlink cannot be read ('' when `path` is no symlink or a good one)."""
    if not path.is_symlink():
        return ""
    try:
        path.resolve(strict=True)
    except FileNotFoundError:
        return f"skipped: dangling symlink (its target {os.readlink(path)!r} does not exist)"
    except (RuntimeError, OSError) as exc:   # Python < 3.13: RuntimeError; then OSError(ELOOP)
        return f"skipped: symlink loop ({type(exc).__name__}: {exc})"
    return ""


def _walk(folder: Path) -> list[Path]:
    """Record and archive files under a folder, recursively, sorted by relative path."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in files:
            if is_record_name(name) or is_archive(name):
                found.append(Path(root) / name)
    return sorted(found, key=lambda p: p.relative_to(folder).parts)


def _iter_path(path: Path) -> Iterator[SourceFile | KifuError]:
    name = str(path)
    try:
        if name.lower().endswith(".zip"):
            yield from _iter_zip(path)
        elif name.lower().endswith(".7z"):
            yield from _iter_7z(path)
        elif is_archive(name):
            yield from _iter_tar(path)
        else:
            yield SourceFile(name, path.read_bytes())
    except OSError as exc:
        yield KifuError(name, 0, f"cannot read: {exc.strerror or exc}")


def _iter_zip(path: Path) -> Iterator[SourceFile | KifuError]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        yield KifuError(str(path), 0, f"not a readable zip archive ({exc})")
        return
    with archive:
        members = sorted((m for m in archive.infolist() if not m.is_dir()), key=lambda m: m.filename)
        for member in members:
            name = f"{path}:{member.filename}"
            if not _wanted_member(member.filename):
                continue
            try:
                _check_size(member.file_size, member.compress_size)      # as declared: nothing read yet
                with archive.open(member) as stream:
                    yield SourceFile(name, _read_capped(stream, member.compress_size))
            except _TooLarge as exc:
                yield KifuError(name, 0, str(exc))
            # NotImplementedError: zipfile's answer to a compression method it lacks (e.g. Deflate64)
            except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
                yield KifuError(name, 0, f"cannot extract ({exc})")


def _iter_tar(path: Path) -> Iterator[SourceFile | KifuError]:
    """Tar members in archive order (streamed: a compressed tar can only be read front to back)."""
    try:
        archive = tarfile.open(path, "r:*")  # noqa: SIM115 - closed by the `with` below
    except (tarfile.TarError, OSError, EOFError) as exc:
        yield KifuError(str(path), 0, f"not a readable tar archive ({exc})")
        return
    compressed = not name_is_plain_tar(path)
    archive_size = path.stat().st_size
    with archive:
        while True:
            try:
                member = archive.next()
            except (tarfile.TarError, OSError, EOFError) as exc:
                yield KifuError(str(path), 0, f"archive is corrupt or truncated ({exc})")
                return
            if member is None:
                return
            if member.isdir() or not _wanted_member(member.name):
                continue
            name = f"{path}:{member.name}"
            if not member.isfile():
                yield KifuError(name, 0, f"skipped: {_special_member(member)}, not a regular file")
                continue
            try:
                # a member's data must be decompressed to reach the next one: past the ratio, stop here
                _check_size(member.size, archive_size if compressed else None)
                handle = archive.extractfile(member)
                data = (_read_capped(handle, archive_size if compressed else None) if handle is not None
                        else b"")
            except _TooLarge as exc:
                if compressed and member.size > MAX_RATIO * max(archive_size, 1):
                    yield KifuError(name, 0, f"{exc}; the rest of the archive is not read")
                    return
                yield KifuError(name, 0, str(exc))
                continue
            except (tarfile.TarError, OSError, EOFError) as exc:
                yield KifuError(name, 0, f"cannot extract ({exc})")
                return
            yield SourceFile(name, data)


def _special_member(member: tarfile.TarInfo) -> str:
    """What a tar member that is neither a file nor a folder is, in words (the reason it is skipped)."""
    if member.issym():
        return f"a symbolic link to {member.linkname!r} in the archive"
    if member.islnk():
        return f"a hard link to {member.linkname!r} in the archive (read there, if a record)"
    if member.ischr() or member.isblk():
        return f"a {'character' if member.ischr() else 'block'} device in the archive"
    if member.isfifo():
        return "a FIFO (named pipe) in the archive"
    return f"a tar member of type {member.type!r}"


def name_is_plain_tar(path: Path) -> bool:
    """True for an uncompressed .tar (its members' sizes are their sizes on disk)."""
    return path.name.lower().endswith(".tar")


def _wanted_member(name: str) -> bool:
    return is_record_name(name)


def _iter_7z(path: Path) -> Iterator[SourceFile | KifuError]:
    """7z members, in archive order, via py7zr (optional dependency, extra `archives`)."""
    try:
        import py7zr
    except ImportError:
        yield KifuError(str(path), 0, "reading .7z needs py7zr (pip install 'shogi-dnn[archives]')")
        return
    try:
        archive = py7zr.SevenZipFile(path, mode="r")
    except (py7zr.exceptions.ArchiveError, OSError, EOFError) as exc:
        yield KifuError(str(path), 0, f"not a readable 7z archive ({exc})")
        return
    yield from _drain_7z(archive, path)


def _drain_7z(archive, path: Path) -> Iterator[SourceFile | KifuError]:
    """Run py7zr's push-style extraction in a thread, handing members over through a bounded queue."""
    import py7zr.io

    handoff: queue.Queue = queue.Queue(maxsize=_7Z_QUEUE)
    archive_size = path.stat().st_size
    stop = threading.Event()
    done = object()

    class _Member(py7zr.io.Py7zIO):
        def __init__(self, name: str) -> None:
            self.name, self.parts, self.length, self.too_large = name, [], 0, ""

        def write(self, s: bytes | bytearray) -> int:
            if stop.is_set():
                raise _Stopped()
            self.length += len(s)
            if not self.too_large:
                try:
                    _check_size(self.length, None)
                    self.parts.append(bytes(s))
                except _TooLarge as exc:        # memory bounded: the member's bytes are dropped
                    self.too_large, self.parts = str(exc), []
            if self.length > RATIO_FLOOR_BYTES and self.length > MAX_RATIO * max(archive_size, 1):
                # time bounded: past the ratio the archive is abandoned
                raise _Bomb(f"{path}:{self.name}",
                            f"skipped: decompresses to more than {MAX_RATIO} times the "
                            f"archive's size ({archive_size:,} bytes; sources.MAX_RATIO), a decompression "
                            "bomb?; the rest of the archive is not read")
            return len(s)

        def read(self, size: int | None = None) -> bytes:
            return b""

        def seek(self, offset: int, whence: int = 0) -> int:
            return 0

        def flush(self) -> None:
            return None

        def size(self) -> int:
            return self.length

        def close(self) -> None:
            if self.too_large and _wanted_member(self.name):
                _put(KifuError(f"{path}:{self.name}", 0, self.too_large))
            elif _wanted_member(self.name):
                _put(SourceFile(f"{path}:{self.name}", b"".join(self.parts)))
            self.parts = []

    class _Factory(py7zr.io.WriterFactory):
        def create(self, filename: str) -> py7zr.io.Py7zIO:
            return _Member(filename)

    def _put(item) -> None:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped()

    def _extract() -> None:
        try:
            with archive:
                archive.extract(factory=_Factory())
        except _Stopped:
            return
        except _Bomb as exc:
            _put_final(KifuError(exc.args[0], 0, exc.args[1]))
        except Exception as exc:   # noqa: BLE001 - py7zr raises many types; reported, not raised
            _put_final(KifuError(str(path), 0, f"7z archive is corrupt or truncated ({exc})"))
        _put_final(done)

    def _put_final(item) -> None:
        try:
            _put(item)
        except _Stopped:
            pass

    worker = threading.Thread(target=_extract, name="7z-extract", daemon=True)
    worker.start()
    try:
        while True:
            item = handoff.get()
            if item is done:
                return
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)


class _Bomb(Exception):
    """Raised inside the 7z extraction thread: (member name, reason) of a member past MAX_RATIO."""


class _Stopped(Exception):
    """Raised inside the 7z extraction thread when the consumer went away."""
