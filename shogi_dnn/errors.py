"""Error types. Every error a user can cause is a subclass of ShogiDnnError, so the CLI prints
it as one line (no traceback). Each names the file, line or key it is about."""

from __future__ import annotations


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
        where = f"{self.path}:{self.line}"
        super().__init__(f"{where}: {reason}" + (f" (ply {self.ply})" if self.ply else ""))


class ShardFormatError(ShogiDnnError, ValueError):
    """An HDF5 shard or a dataset manifest is missing, corrupt or of another schema version."""


class ConfigError(ShogiDnnError, ValueError):
    """A training/evaluation configuration is invalid (unknown key, bad value, bad combination)."""


class RunError(ShogiDnnError, RuntimeError):
    """A run directory or checkpoint is missing, corrupt or inconsistent with the request."""
