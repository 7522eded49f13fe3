"""Error types. Every error a user can cause is a subclass of ShogiDnnError, so the CLI prints
it as one line (no traceback). Each names the file, line or key it is about; a file name is shown
through printable(), so a name holding a line break or an escape sequence stays on its line."""

from __future__ import annotations

import unicodedata

# Characters a name shows escaped: control (line breaks, escape sequences), format (bidirectional
# overrides), line and paragraph separators, lone surrogates.
_ESCAPED_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def printable(text: str) -> str:
    """`text` with every control, format or line-separator character written as repr writes it (`\\n`,
    `\\x1b`, `\\u2028`), the rest unchanged: a file name shown in a message never starts a line of its own."""
    if text.isprintable():
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in text)


class ShogiDnnError(Exception):
    """Base class of errors caused by input or configuration (not by bugs)."""


class KifuError(ShogiDnnError, ValueError):
    """A game record cannot be read: names the file, the line and, where known, the ply.

    Attributes:
        path: the record's file name (or archive member, `archive.zip:member.csa`).
        line: 1-based line number where the problem is (0 when unknown).
        ply: 1-based ply of the offending move, or 0 when the problem is not a move.
        reason: the message without the location.
    """

    def __init__(self, path: str, line: int, reason: str, ply: int = 0) -> None:
        self.path = str(path)
        self.line = int(line)
        self.reason = reason
        self.ply = int(ply)
        where = f"{printable(self.path)}:{self.line}"
        super().__init__(f"{where}: {reason}" + (f" (ply {self.ply})" if self.ply else ""))


class ShardFormatError(ShogiDnnError, ValueError):
    """An HDF5 shard or a dataset manifest is missing, corrupt or of another schema version."""


class ConfigError(ShogiDnnError, ValueError):
    """A training/evaluation configuration is invalid (unknown key, bad value, bad combination)."""


class RunError(ShogiDnnError, RuntimeError):
    """A run directory or checkpoint is missing, corrupt or inconsistent with the request."""


class OutputError(ShogiDnnError, OSError):
    """An output folder cannot be written: read-only, not a folder, no permission
    (run_files.check_writable)."""


class DiskFullError(ShogiDnnError, OSError):
    """A write ran out of disk space (or quota): names the path and the space needed or free.
    The partial file is removed before this is raised, so nothing half-written looks valid."""


def is_disk_full(exc: BaseException) -> bool:
    """True when an exception (OSError, h5py's RuntimeError, TensorFlow's ResourceExhaustedError or
    OpError) reports a full disk or an exceeded quota."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc).lower()
    return "no space left" in text or "disk quota exceeded" in text or "errno = 28" in text


# What to lower when a command runs out of memory at run time (cli.py prints it after the error's first line).
OUT_OF_MEMORY_ADVICE = {
    "train": "lower train.per_replica_batch, or model.filters / model.blocks (a new run)",
    "bench": "lower the batch sizes or the model of the benchmark",
}
OUT_OF_MEMORY_DEFAULT = "free the device's memory (another process?) or use a machine with more memory"


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a run-time memory failure: Python's MemoryError, or TensorFlow's ResourceExhaustedError
    (OOM when allocating a tensor) that is not a full disk; recognised by name, so this module and the CLI
    never import TensorFlow."""
    if isinstance(exc, MemoryError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    text = str(exc)
    if "ResourceExhaustedError" in names:
        return not is_disk_full(exc)
    return "OOM when allocating" in text or "CUDA_ERROR_OUT_OF_MEMORY" in text


def out_of_memory_message(command: str, exc: BaseException) -> str:
    """One line for a run-time memory failure of `command`: the error's first line and what to lower."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    if len(first) > 200:
        first = first[:197] + "..."
    return f"out of memory ({first}); {OUT_OF_MEMORY_ADVICE.get(command, OUT_OF_MEMORY_DEFAULT)}"


def disk_full(path: object, needed: int | None = None) -> DiskFullError:
    """The one-line DiskFullError for a write of `path`: the space needed (an estimate) and free."""
    import shutil
    from pathlib import Path

    folder = Path(str(path)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = f"{_size(shutil.disk_usage(folder).free)} free"
    except OSError:
        free = "free space unknown"
    need = f"needs about {_size(needed)}, " if needed else ""
    return DiskFullError(f"{path}: disk full ({need}{free} on {folder}); free some space and run the "
                         "same command again")


def is_file_too_large(exc: BaseException) -> bool:
    """True when a write failed with EFBIG: the file passed the process's file size limit (`ulimit -f`,
    with SIGXFSZ ignored) or the largest file the file system holds (4 GiB on FAT32)."""
    import errno

    return isinstance(exc, OSError) and exc.errno == errno.EFBIG


def file_too_large(path: object, needed: int | None = None) -> OutputError:
    """The one-line error for a write of `path` refused with EFBIG (is_file_too_large)."""
    need = f"needs about {_size(needed)}; " if needed else ""
    return OutputError(f"{path}: file too large ({need}over this process's file size limit, `ulimit -f`, "
                       "or the file system's largest file); raise the limit or write elsewhere")


def _size(n: int) -> str:
    """Bytes for a message: KiB below a MiB, then MiB."""
    return f"{n / 2**10:,.1f} KiB" if n < 2**20 else f"{n / 2**20:,.1f} MiB"
