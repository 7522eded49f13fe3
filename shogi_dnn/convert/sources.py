"""Input files for `convert`: record files, folders (recursive) and archives, streamed one file at a time.

`iter_sources(inputs)` yields a `SourceFile(name, data)` for every record file, in a deterministic
order (inputs in the given order, folder entries and archive members sorted by name), and a
`KifuError` (yielded, not raised) for an input that cannot be read, so one unreadable archive never
stops a conversion. Only one file's bytes are held at a time (7z: a small bounded queue).

Names: a plain file keeps the path it was found under (`corpus/2024/game.csa`); an archive member
is named `archive.zip:member.csa`, the form KifuError and the games table use.

Archives: .zip, .tar, .tar.gz/.tgz, .tar.bz2, .tar.xz and, when py7zr is installed (extra
`archives`), .7z. Nested archives are not opened (they are reported as skipped).
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
                yield from _iter_path(file)
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
    return files


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
                yield SourceFile(name, archive.read(member))
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
    with archive:
        while True:
            try:
                member = archive.next()
            except (tarfile.TarError, OSError, EOFError) as exc:
                yield KifuError(str(path), 0, f"archive is corrupt or truncated ({exc})")
                return
            if member is None:
                return
            if not member.isfile() or not _wanted_member(member.name):
                continue
            name = f"{path}:{member.name}"
            try:
                handle = archive.extractfile(member)
                data = handle.read() if handle is not None else b""
            except (tarfile.TarError, OSError, EOFError) as exc:
                yield KifuError(name, 0, f"cannot extract ({exc})")
                return
            yield SourceFile(name, data)


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
    stop = threading.Event()
    done = object()

    class _Member(py7zr.io.Py7zIO):
        def __init__(self, name: str) -> None:
            self.name, self.parts, self.length = name, [], 0

        def write(self, s: bytes | bytearray) -> int:
            if stop.is_set():
                raise _Stopped()
            self.parts.append(bytes(s))
            self.length += len(s)
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
            if _wanted_member(self.name):
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


class _Stopped(Exception):
    """Raised inside the 7z extraction thread when the consumer went away."""
