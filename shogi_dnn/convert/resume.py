"""Resume checkpoints of `convert`: a rerun after an interruption skips, unread, every piece (file, or
piece of a big multi-game file) whose games are all in finished shards or saved as pending.

After a piece during which a shard was written (at most every CHECKPOINT_SECONDS, so that saving the
pending games costs under 1% however small the shards), and when interrupted (Ctrl-C, SIGTERM) between
pieces, the parent saves a checkpoint, at a piece boundary:

  DIR/convert-dedup.bin            the dedup keys of every kept game so far, in order: 8 bytes each
                                   (big-endian, filters.Deduplicator), append-only; the checkpoint
                                   says how many are valid (a kill mid-append leaves extra bytes)
  DIR/convert-checkpoint-NNNNN.npz the checkpoint's payload (PAYLOAD_SCHEMA): the games kept but not
                                   yet in a shard (every split's buffer), the report's counters and the
                                   finished shards' manifest entries
  DIR/convert-state.json           "checkpoint": {number, pieces, last_piece, dedup_keys, file, sha256,
                                   code}: written last (atomically), so it names only complete files

A rerun with the same fingerprint (inputs, settings, schema) uses the checkpoint only when it is
whole: the same converter code (`code`: a digest of the package's sources), the payload's sha256,
enough dedup keys, every finished shard intact (its sha256), and the piece at `pieces - 1` being the
same piece (`last_piece`: its name and first line). Otherwise it says why and converts from the start,
still reusing every intact finished shard (writer.ConvertState). Restored, the writer, dedup and report
are exactly what the interrupted run had after that piece, so the shards are byte-identical to an
uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import logging
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.convert.filters import Deduplicator
from shogi_dnn.convert.worker import ConvertedGame
from shogi_dnn.convert.writer import ConvertReport, ConvertState, DatasetWriter
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import EncodedGame
from shogi_dnn.errors import disk_full, is_disk_full
from shogi_dnn.folders import run_files

log = logging.getLogger(__name__)

DEDUP_NAME = "convert-dedup.bin"
CHECKPOINT_PATTERN = re.compile(r"^convert-checkpoint-\d{5}\.npz(\.tmp)?$")
KEY_BYTES = 8                   # bytes of a dedup key kept (filters.Deduplicator)
CHECKPOINT_VERSION = 1
CHECKPOINT_SECONDS = 10.0       # at most one checkpoint per this many seconds (a kill -9 loses no more)

# The payload of convert-checkpoint-NNNNN.npz (numpy .npz, uncompressed): name -> (shape, dtype, meaning).
# G: pending games, P: their positions in all (in game-id order). `pos_<field>` for every EncodedGame field.
PAYLOAD_SCHEMA: dict[str, tuple[str, str, str]] = {
    "version": ("[]", "int64", "CHECKPOINT_VERSION"),
    "game_id": ("[G]", "int64", "the pending games' ids"),
    "split": ("[G]", "uint8", "index in shards.SPLITS"),
    "length": ("[G]", "int64", "positions of each game"),
    "key": ("[G, 20]", "uint8", "filters.game_key (sha1)"),
    "rows": ("[bytes]", "uint8", "JSON: each game's games-table row (writer: without game_id)"),
    "report": ("[bytes]", "uint8", "JSON: ConvertReport.to_dict() at the checkpoint"),
    "written": ("[bytes]", "uint8", "JSON: the finished shards' ShardInfo, in writing order"),
    **{f"pos_{f.name}": ("[P, ...]", "as EncodedGame", f"EncodedGame.{f.name}, the games concatenated")
       for f in dataclasses.fields(EncodedGame) if f.default is dataclasses.MISSING},
}


# The EncodedGame fields a checkpoint keeps: the derived, optional ones (pieces, promoted) are left out
# (a restored game has them None; the writer then packs board and hands: the same bytes).
_FIELDS = tuple(f.name for f in dataclasses.fields(EncodedGame) if f.default is dataclasses.MISSING)


class CheckpointUnusable(Exception):
    """Why a checkpoint cannot be used (the run then starts from the first piece)."""


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of the package's Python and C sources: a checkpoint is used only by the code that wrote it."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".c") and path.is_file():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclasses.dataclass
class Resumed:
    """A checkpoint read back: what run_convert restores before converting the rest."""

    pieces: int
    last_piece: list
    next_game_id: int
    pending: list[tuple[int, ConvertedGame]]
    report: dict[str, Any]
    written: list[shards.ShardInfo]
    keys: np.ndarray               # [K] uint64 dedup keys


class Checkpointer:
    """Saves checkpoints of one conversion (the parent, in input order) and reads the last one back."""

    def __init__(self, out: Path, state: ConvertState) -> None:
        self.out, self.state = out, state
        entry = state.checkpoint or {}
        self.number = int(entry.get("number", 0))
        self.keys_saved = int(entry.get("dedup_keys", 0))
        self.saved_at = -math.inf

    def due(self) -> bool:
        """Whether CHECKPOINT_SECONDS have passed since this run's last checkpoint (or there was none)."""
        return time.monotonic() - self.saved_at >= CHECKPOINT_SECONDS

    def save(self, pieces: int, last_piece: tuple[str, int], writer: DatasetWriter, dedup: Deduplicator,
             report: ConvertReport) -> None:
        """Checkpoint after `pieces` pieces (the last one `last_piece`: name, first line) were added."""
        keys = self._append_keys(dedup)
        self.number += 1
        name = f"convert-checkpoint-{self.number:05d}.npz"
        digest = _write_atomic(self.out / name, _payload(writer, report))
        old = self.state.checkpoint
        self.state.checkpoint = {"number": self.number, "pieces": pieces, "last_piece": list(last_piece),
                                 "next_game_id": writer.next_game_id, "dedup_keys": keys, "file": name,
                                 "sha256": digest, "code": code_digest(), "version": CHECKPOINT_VERSION}
        self.state.save()
        if old and old.get("file") != name:
            (self.out / old["file"]).unlink(missing_ok=True)
        self.saved_at = time.monotonic()

    def _append_keys(self, dedup: Deduplicator) -> int:
        """Append the keys remembered since the last checkpoint (after cutting what a kill left)."""
        new = dedup.take_new()
        path = self.out / DEDUP_NAME
        try:
            with open(path, "r+b" if path.exists() else "wb") as f:
                f.truncate(self.keys_saved * KEY_BYTES)
                f.seek(self.keys_saved * KEY_BYTES)
                f.write(np.asarray(new, ">u8").tobytes())
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(path, len(new) * KEY_BYTES) from None
            raise
        self.keys_saved += len(new)
        return self.keys_saved

    def load(self) -> Resumed:
        """The last checkpoint, checked whole (module docstring).

        Raises:
            CheckpointUnusable: no checkpoint, or one that cannot be trusted (the reason).
        """
        entry = self.state.checkpoint
        if not entry:
            raise CheckpointUnusable("no checkpoint")
        if entry.get("version") != CHECKPOINT_VERSION or entry.get("code") != code_digest():
            raise CheckpointUnusable("written by another version of the converter")
        path = self.out / str(entry.get("file"))
        try:
            data = path.read_bytes()
            keys = np.fromfile(self.out / DEDUP_NAME, ">u8", count=int(entry["dedup_keys"])).astype(np.uint64)
        except OSError as exc:
            raise CheckpointUnusable(f"cannot read it ({exc})") from None
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise CheckpointUnusable(f"{path.name} is damaged (sha256)")
        if len(keys) != int(entry["dedup_keys"]):
            raise CheckpointUnusable(f"{DEDUP_NAME} is cut short")
        try:
            resumed = _read_payload(data, entry)
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointUnusable(f"{path.name} is unreadable ({exc})") from None
        for info in resumed.written:
            shard = self.out / info.path
            if not shard.is_file() or shards.file_sha256(shard) != info.sha256:
                raise CheckpointUnusable(f"the finished shard {info.path} is missing or changed")
        resumed.keys = keys
        self.keys_saved = len(keys)
        return resumed


def restore(resumed: Resumed, writer: DatasetWriter, dedup: Deduplicator, report: ConvertReport) -> None:
    """Put the writer, dedup and report back where the checkpoint left them (this run's timings kept)."""
    counters = ConvertReport.from_dict(resumed.report)
    for f in dataclasses.fields(ConvertReport):
        if f.name not in ("backend", "workers", "timings", "worker_cpu", "resumed"):
            setattr(report, f.name, getattr(counters, f.name))
    report.shards_reused = len(resumed.written)        # shards this run did not write
    report.resumed = {"pieces": resumed.pieces, "games": counters.converted,
                      "positions": sum(counters.positions.values())
                      + sum(len(g.positions) for _, g in resumed.pending)}
    writer.restore(resumed.next_game_id, resumed.pending, resumed.written)
    dedup.restore(int(k) for k in resumed.keys)


def remove_files(out: Path) -> None:
    """The checkpoint files (a finished conversion needs none)."""
    for path in out.iterdir():
        if path.name == DEDUP_NAME or CHECKPOINT_PATTERN.match(path.name):
            path.unlink()


def is_checkpoint_file(name: str) -> bool:
    return name == DEDUP_NAME or CHECKPOINT_PATTERN.match(name) is not None


def _payload(writer: DatasetWriter, report: ConvertReport) -> dict[str, np.ndarray]:
    pending = writer.pending()
    games = [g for _, g in pending]
    arrays = {"version": np.int64(CHECKPOINT_VERSION),
              "game_id": np.array([i for i, _ in pending], np.int64),
              "split": np.array([shards.SPLITS.index(g.split) for g in games], np.uint8),
              "length": np.array([len(g.positions) for g in games], np.int64),
              "key": np.array([np.frombuffer(g.key, np.uint8) for g in games],
                              np.uint8).reshape(len(games), 20),
              "rows": _json_bytes([list(g.row) for g in games]),
              "report": _json_bytes(report.to_dict()),
              "written": _json_bytes([dataclasses.asdict(s) for s in writer.written])}
    for name in _FIELDS:
        parts = [getattr(g.positions, name) for g in games]
        arrays[f"pos_{name}"] = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return arrays


def _read_payload(data: bytes, entry: dict[str, Any]) -> Resumed:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    if int(arrays["version"]) != CHECKPOINT_VERSION:
        raise ValueError(f"payload version {int(arrays['version'])}")
    rows = json.loads(arrays["rows"].tobytes())
    lengths = arrays["length"]
    ends = np.cumsum(lengths)
    if len(lengths) and int(ends[-1]) != len(arrays["pos_win"]):
        raise ValueError("positions do not add up to the games' lengths")
    pending = []
    for i, game_id in enumerate(arrays["game_id"].tolist()):
        rows_of = slice(int(ends[i] - lengths[i]), int(ends[i]))
        positions = EncodedGame(**{name: arrays[f"pos_{name}"][rows_of] for name in _FIELDS})
        game = ConvertedGame(shards.SPLITS[int(arrays["split"][i])], tuple(rows[i]), positions,
                             arrays["key"][i].tobytes())
        pending.append((game_id, game))
    written = [shards.ShardInfo(**s) for s in json.loads(arrays["written"].tobytes())]
    return Resumed(int(entry["pieces"]), list(entry["last_piece"]), int(entry["next_game_id"]), pending,
                   json.loads(arrays["report"].tobytes()), written, np.zeros(0, np.uint64))


def _json_bytes(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode("utf-8"), np.uint8)


def _write_atomic(path: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write the .npz through a temp file; its sha256."""
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=True, **arrays)     # numpy's default, named so **arrays types as arrays
    data = buffer.getvalue()
    run_files.write_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


