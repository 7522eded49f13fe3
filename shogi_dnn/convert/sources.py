"""Input files for `convert`: record files, folders (recursive) and archives, streamed one file at a time.

`iter_sources(inputs)` yields a `SourceFile(name, data)` for every record file, in a deterministic
order (inputs in the given order, folder entries and archive members sorted by name), and a
`KifuError` (yielded, not raised) for an input that cannot be read, so one unreadable archive never
stops a conversion. Only one file's bytes are held at a time (7z: a small bounded queue).

Names: a plain file keeps the path it was found under (`corpus/2024/game.csa`); an archive member
is named `archive.zip:member.csa` (`outer.zip:inner.tar.gz:member.csa` when nested), the form
KifuError and the games table use. A name that is not UTF-8 (a zip made on Windows in Japan stores
cp932 names without the UTF-8 flag; old disks hold Shift_JIS or EUC-JP names) is shown decoded
(kifu/names.py) and its bytes travel beside it (`SourceFile.raw_name`, the games table's `source_raw`).

Archives: .zip, .tar, .tar.gz/.tgz, .tar.bz2, .tar.xz and, when py7zr is installed (extra
`archives`), .7z. An archive inside an archive is read too, MAX_NESTING (3) archives deep at most:
its bytes are copied out with the caps of any member (below) into a temporary file (held in memory
up to SPOOL_BYTES) and its members read from there with the same caps. A deeper archive is skipped
with a reason (`skipped: an archive nested 4 deep`).

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
- nesting does not multiply the ratio: everything decompressed out of the archives nested in one input
  archive counts against MAX_RATIO times that input's size (_Budget, past RATIO_FLOOR_BYTES); past it
  the nested archive being read is left (`the rest of ... is not read`) and later ones are not opened;
- a symlink that loops or whose target is missing is skipped (`dangling symlink`, `symlink loop`), and
  so is a symlink to a folder inside an input folder (not followed: no loop, no file read twice).
- a tar member with a record's name that is a symbolic or hard link, a device or a FIFO is skipped
  with that reason (a link's target is read where it is stored; nothing outside the archive is read).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import queue
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path
from typing import IO, Any

from shogi_dnn.errors import KifuError, printable
from shogi_dnn.kifu import RECORD_SUFFIXES, names

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".7z")
# A folder or archive entry is a record file when its suffix is one of these (case-insensitive).
RECORD_FILE_SUFFIXES = (*RECORD_SUFFIXES, ".hcpe", ".psv", ".bin")   # and the position files (dataset/packed)
_7Z_QUEUE = 8          # members decompressed ahead of the consumer (bounds memory for .7z)
MAX_MEMBER_BYTES = 256 << 20     # an archive member decompressing to more is skipped (module docstring)
MAX_RATIO = 100                  # ... or to more than this many times its compressed size
RATIO_FLOOR_BYTES = 1 << 20      # the ratio is checked once a member's output passes this
_BLOCK = 1 << 20                 # members are read in blocks of this size
MAX_NESTING = 3                  # archive levels read: an input archive, one in it, one in that
SPOOL_BYTES = 16 << 20           # a nested archive is held in memory up to this, then in a temporary file


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


def _read_capped(stream: IO[bytes], compressed: int | None, budget: _Budget | None = None) -> bytes:
    """A member's bytes read in blocks, stopping (_TooLarge) as soon as a cap is passed."""
    parts: list[bytes] = []
    _copy_capped(stream, parts, compressed, budget)
    return b"".join(parts)


def _copy_capped(stream: IO[bytes], out: IO[bytes] | list[bytes], compressed: int | None,
                 budget: _Budget | None) -> int:
    """Copy a member to `out` in blocks (its size), stopping (_TooLarge) as soon as a cap is passed:
    the member's (_check_size) or, in a nested archive, its input's _Budget."""
    size = 0
    while True:
        block = stream.read(_BLOCK)
        if not block:
            return size
        size += len(block)
        _check_size(size, compressed)
        if budget is not None:
            budget.spend(len(block))
        if isinstance(out, list):
            out.append(block)
        else:
            out.write(block)


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """One record file's bytes. `name` is a path or `archive:member`, readable (kifu/names.py)."""

    name: str
    data: bytes
    raw_name: bytes = b""        # the name's bytes when they are not `name` in UTF-8 (names.Name.raw)


# Why an input or member was not read, as convert-report.json counts them (`inputs_skipped`): skip_kind.
SKIP_NESTED_TOO_DEEP = "nested_too_deep"          # an archive more than MAX_NESTING deep
SKIP_TOO_LARGE = "too_large"                      # a member over MAX_MEMBER_BYTES
SKIP_BOMB = "decompression_bomb"                  # over MAX_RATIO (a member, an archive, nested archives)
SKIP_SYMLINK = "bad_symlink"                      # dangling, looping, or to a folder inside an input
SKIP_UNREADABLE = "unreadable"                    # missing, corrupt, truncated, no py7zr, an I/O error
_SKIP_WORDS = (("sources.MAX_NESTING", SKIP_NESTED_TOO_DEEP), ("sources.MAX_MEMBER_BYTES", SKIP_TOO_LARGE),
               ("sources.MAX_RATIO", SKIP_BOMB), ("symlink", SKIP_SYMLINK))


def skip_kind(error: KifuError) -> str:
    """The kind (SKIP_*) of an input or member this module yielded as a KifuError."""
    return next((kind for words, kind in _SKIP_WORDS if words in error.reason), SKIP_UNREADABLE)


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
                    yield KifuError(names.from_path(file).text, 0, problem)
                else:
                    yield from _iter_path(file)
        elif _link_problem(path):
            yield KifuError(names.from_path(path).text, 0, _link_problem(path))
        elif path.exists():
            yield from _iter_path(path)
        else:
            yield KifuError(names.from_path(path).text, 0, "no such file or folder")


def list_files(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The files (records and archives) `iter_sources` will open, for a progress total."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        files.extend(_walk(path) if path.is_dir() else [path])
    return [file for file in files if not _link_problem(file)]    # skipped, with a reason, by iter_sources


def _link_problem(path: Path) -> str:
    """Why a symlink is not read ('' when `path` is no symlink or a good one to a file): dangling, a loop,
    or a folder (inside an input folder: not followed)."""
    if not path.is_symlink():
        return ""
    try:
        target = path.resolve(strict=True)
    except FileNotFoundError:
        return f"skipped: dangling symlink (its target {os.readlink(path)!r} does not exist)"
    except (RuntimeError, OSError) as exc:   # Python < 3.13: RuntimeError; then OSError(ELOOP)
        return f"skipped: symlink loop ({type(exc).__name__}: {exc})"
    if target.is_dir():
        return (f"skipped: a symlink to a folder ({target}), not followed; give the folder as an input to "
                "convert it")
    return ""


def _walk(folder: Path) -> list[Path]:
    """Record and archive files under a folder, recursively, sorted by relative path, and the symlinks to
    folders found there (not followed: _link_problem says so)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found += [Path(root) / name for name in dirs if (Path(root) / name).is_symlink()]
        for name in files:
            if is_record_name(name) or is_archive(name):
                found.append(Path(root) / name)
    return sorted(found, key=lambda p: p.relative_to(folder).parts)


def _iter_path(path: Path) -> Iterator[SourceFile | KifuError]:
    name = names.from_path(path)
    try:
        if is_archive(str(path)):
            size = path.stat().st_size
            yield from _iter_archive(path, size, _Level(name, 1, _Budget(name, size)))
        else:
            yield SourceFile(name.text, path.read_bytes(), name.raw)
    except OSError as exc:
        yield KifuError(name.text, 0, f"cannot read: {exc.strerror or exc}")


@dataclasses.dataclass(frozen=True)
class _Level:
    """An archive being read: its name, how deep it is nested (1: an input) and its input's budget."""

    name: names.Name
    depth: int
    budget: _Budget

    def counted(self) -> _Budget | None:
        """The budget its members' bytes count against: those of nested archives (depth 2 on)."""
        return self.budget if self.depth > 1 else None


class _Budget:
    """The bytes decompressed out of the archives nested in one input archive: at most MAX_RATIO times
    the input's size (checked past RATIO_FLOOR_BYTES), however deep, so that nesting does not multiply
    the per-member ratio cap (42.zip)."""

    def __init__(self, top: names.Name, size: int) -> None:
        self.top, self.size, self.used, self.spent = top, size, 0, False

    def spend(self, count: int) -> None:
        """Count `count` bytes; _BudgetSpent once past the cap (and for every later call)."""
        self.used += count
        if self.spent or (self.used > RATIO_FLOOR_BYTES and self.used > MAX_RATIO * max(self.size, 1)):
            self.spent = True
            raise _BudgetSpent(self.reason())

    def reason(self) -> str:
        return (f"skipped: the archives nested in {printable(self.top.text)} decompress to more than "
                f"{MAX_RATIO} times its size ({self.size:,} bytes; sources.MAX_RATIO), a decompression bomb?")


class _BudgetSpent(_TooLarge):
    """A nested archive's member passed its input's _Budget: the rest of that nested archive is not read."""


def _iter_archive(source: Path | IO[bytes], size: int, level: _Level) -> Iterator[SourceFile | KifuError]:
    """The members of the archive `source` (a file, or a nested archive spooled by _nested) of `size`
    bytes, by the suffix of its name."""
    lower = level.name.text.lower()
    if lower.endswith(".zip"):
        yield from _iter_zip(source, level)
    elif lower.endswith(".7z"):
        yield from _iter_7z(source, size, level)
    else:
        yield from _iter_tar(source, size, level)


def _nested(level: _Level, name: names.Name, open_member: Callable[[], ContextManager[IO[bytes]]],
            compressed: int | None) -> Iterator[SourceFile | KifuError]:
    """A member of `level` that is itself an archive: its bytes copied (with the caps of any member)
    to a temporary file, spooled in memory up to SPOOL_BYTES, and its members yielded, MAX_NESTING
    archives deep at most. Caps and I/O errors while copying are raised (the caller names the member)."""
    if level.depth >= MAX_NESTING:
        yield KifuError(name.text, 0, f"skipped: an archive nested {level.depth + 1} deep "
                                      f"(sources.MAX_NESTING is {MAX_NESTING})")
        return
    if level.budget.spent:
        yield KifuError(name.text, 0, f"{level.budget.reason()}; not read")
        return
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        with open_member() as stream:
            size = _copy_capped(stream, spool, compressed, level.counted())
        spool.seek(0)
        yield from _iter_archive(spool, size, _Level(name, level.depth + 1, level.budget))


def _iter_zip(source: Path | IO[bytes], level: _Level) -> Iterator[SourceFile | KifuError]:
    try:
        archive = zipfile.ZipFile(source)
    # UnicodeDecodeError: a name flagged UTF-8 (bit 11) that is not, which zipfile cannot list at all
    except (zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError) as exc:
        yield KifuError(level.name.text, 0, f"not a readable zip archive ({exc})")
        return
    with archive:
        members = sorted((m for m in archive.infolist() if not m.is_dir()), key=lambda m: m.filename)
        for member in members:
            if not _wanted_member(member.filename):
                continue
            name = level.name.join(names.from_zip(member))
            try:
                _check_size(member.file_size, member.compress_size)      # as declared: nothing read yet
                if is_archive(member.filename):
                    opener = functools.partial(archive.open, member)
                    yield from _nested(level, name, opener, member.compress_size)
                    continue
                with archive.open(member) as stream:
                    data = _read_capped(stream, member.compress_size, level.counted())
                yield SourceFile(name.text, data, name.raw)
            except _BudgetSpent as exc:
                yield KifuError(name.text, 0, f"{exc}; the rest of {printable(level.name.text)} is not read")
                return
            except _TooLarge as exc:
                yield KifuError(name.text, 0, str(exc))
            # NotImplementedError: zipfile's answer to a compression method it lacks (e.g. Deflate64)
            except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
                yield KifuError(name.text, 0, f"cannot extract ({exc})")


def _iter_tar(source: Path | IO[bytes], size: int, level: _Level) -> Iterator[SourceFile | KifuError]:
    """Tar members in archive order (streamed: a compressed tar can only be read front to back)."""
    try:
        # closed by the `with` below
        archive = (tarfile.open(source, "r:*") if isinstance(source, Path)  # noqa: SIM115
                   else tarfile.open(fileobj=source, mode="r:*"))  # noqa: SIM115
    except (tarfile.TarError, OSError, EOFError) as exc:
        yield KifuError(level.name.text, 0, f"not a readable tar archive ({exc})")
        return
    compressed = None if name_is_plain_tar(Path(level.name.text)) else size    # the ratio's denominator
    with archive:
        while True:
            try:
                member = archive.next()
            except (tarfile.TarError, OSError, EOFError) as exc:
                yield KifuError(level.name.text, 0, f"archive is corrupt or truncated ({exc})")
                return
            if member is None:
                return
            if member.isdir() or not _wanted_member(member.name):
                continue
            name = level.name.join(names.from_str(member.name))
            if not member.isfile():
                yield KifuError(name.text, 0, f"skipped: {_special_member(member)}, not a regular file")
                continue
            try:
                # a member's data must be decompressed to reach the next one: past the ratio, stop here
                _check_size(member.size, compressed)
                if is_archive(member.name):
                    opener = functools.partial(_tar_member, archive, member)
                    yield from _nested(level, name, opener, compressed)
                    continue
                with _tar_member(archive, member) as handle:
                    data = _read_capped(handle, compressed, level.counted())
            except _BudgetSpent as exc:
                yield KifuError(name.text, 0, f"{exc}; the rest of {printable(level.name.text)} is not read")
                return
            except _TooLarge as exc:
                if compressed is not None and member.size > MAX_RATIO * max(compressed, 1):
                    yield KifuError(name.text, 0, f"{exc}; the rest of the archive is not read")
                    return
                yield KifuError(name.text, 0, str(exc))
                continue
            except (tarfile.TarError, OSError, EOFError) as exc:
                yield KifuError(name.text, 0, f"cannot extract ({exc})")
                return
            yield SourceFile(name.text, data, name.raw)


def _tar_member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> ContextManager[IO[bytes]]:
    """A tar member's stream (an empty one for a member without data)."""
    handle = archive.extractfile(member)
    return handle if handle is not None else io.BytesIO(b"")


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
    """Records and nested archives (_nested reads them); README files and the like are passed over."""
    return is_record_name(name) or is_archive(name)


def _iter_7z(source: Path | IO[bytes], size: int, level: _Level) -> Iterator[SourceFile | KifuError]:
    """7z members, in archive order, via py7zr (optional dependency, extra `archives`)."""
    try:
        import py7zr
    except ImportError:
        yield KifuError(level.name.text, 0, "reading .7z needs py7zr (pip install 'shogi-dnn[archives]')")
        return
    try:
        archive = py7zr.SevenZipFile(source, mode="r")
    except (py7zr.exceptions.ArchiveError, OSError, EOFError) as exc:
        yield KifuError(level.name.text, 0, f"not a readable 7z archive ({exc})")
        return
    yield from _drain_7z(archive, size, level)


@dataclasses.dataclass
class _Spooled:
    """A 7z member that is an archive, handed from the extraction thread: read by the consumer."""

    name: names.Name
    spool: IO[bytes]
    size: int


def _drain_7z(archive: Any, archive_size: int, level: _Level) -> Iterator[SourceFile | KifuError]:
    """Run py7zr's push-style extraction in a thread, handing members over through a bounded queue."""
    import py7zr.io

    handoff: queue.Queue = queue.Queue(maxsize=_7Z_QUEUE)
    stop = threading.Event()
    done = object()

    class _Member(py7zr.io.Py7zIO):
        def __init__(self, name: str) -> None:
            self.parts: list[bytes] = []
            self.name, self.length, self.too_large = name, 0, ""
            self.full = level.name.join(names.from_str(name))
            self.nested = is_archive(name) and level.depth < MAX_NESTING and not level.budget.spent
            # closed by the consumer once read (_drain_7z), or by _close_spools
            self.spool = (tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
                          if self.nested else None)

        def write(self, s: bytes | bytearray) -> int:
            if stop.is_set():
                raise _Stopped()
            self.length += len(s)
            if not self.too_large:
                try:
                    _check_size(self.length, None)
                    self._keep(bytes(s))
                except _TooLarge as exc:        # memory bounded: the member's bytes are dropped
                    self.too_large, self.parts = str(exc), []
                    if self.spool is not None:
                        self.spool.close()
            if self.length > RATIO_FLOOR_BYTES and self.length > MAX_RATIO * max(archive_size, 1):
                # time bounded: past the ratio the archive is abandoned
                raise _Bomb(self.full.text,
                            f"skipped: decompresses to more than {MAX_RATIO} times the "
                            f"archive's size ({archive_size:,} bytes; sources.MAX_RATIO), a decompression "
                            "bomb?; the rest of the archive is not read")
            budget = level.counted()
            if budget is not None:
                try:
                    budget.spend(len(s))
                except _BudgetSpent as exc:
                    rest = printable(level.name.text)
                    raise _Bomb(self.full.text, f"{exc}; the rest of {rest} is not read") from None
            return len(s)

        def _keep(self, block: bytes) -> None:
            if self.spool is not None:
                self.spool.write(block)
            elif is_record_name(self.name):
                self.parts.append(block)

        def read(self, size: int | None = None) -> bytes:
            return b""

        def seek(self, offset: int, whence: int = 0) -> int:
            return 0

        def flush(self) -> None:
            return None

        def size(self) -> int:
            return self.length

        def close(self) -> None:
            if not _wanted_member(self.name):
                return
            if self.too_large:
                _put(KifuError(self.full.text, 0, self.too_large))
            elif self.spool is not None:
                self.spool.seek(0)
                _put(_Spooled(self.full, self.spool, self.length))
            elif is_archive(self.name):
                _put(next(_nested(level, self.full, _no_member, None)))     # too deep, or budget spent
            else:
                _put(SourceFile(self.full.text, b"".join(self.parts), self.full.raw))
            self.parts, self.spool = [], None

    class _Factory(py7zr.io.WriterFactory):
        def create(self, filename: str) -> py7zr.io.Py7zIO:
            return _Member(filename)

    def _put(item: Any) -> None:
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
            _put_final(KifuError(level.name.text, 0, f"7z archive is corrupt or truncated ({exc})"))
        _put_final(done)

    def _put_final(item: Any) -> None:
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
            if isinstance(item, _Spooled):
                with item.spool:
                    yield from _iter_archive(item.spool, item.size, _Level(item.name, level.depth + 1,
                                                                           level.budget))
                continue
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)
        _close_spools(handoff)


def _close_spools(handoff: queue.Queue) -> None:
    """Close the spooled nested archives left in the queue (the consumer stopped early)."""
    while True:
        try:
            item = handoff.get_nowait()
        except queue.Empty:
            return
        if isinstance(item, _Spooled):
            item.spool.close()


def _no_member() -> ContextManager[IO[bytes]]:
    """For _nested when it only says why a member is not read (never opened)."""
    raise AssertionError("not opened")


class _Bomb(Exception):
    """Raised inside the 7z extraction thread: (member name, reason) of a member past MAX_RATIO."""


class _Stopped(Exception):
    """Raised inside the 7z extraction thread when the consumer went away."""
