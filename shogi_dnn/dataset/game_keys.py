"""Which games a run trained on, recognisable in any dataset: one content key per game. TensorFlow-free.

A game's key is the first 8 bytes (big-endian uint64) of

    sha1(start_sfen + "\\n" + the shard's `move` codes of the game's positions in ply order, uint16 LE)

independent of folder, file name, split, shard settings and game id (collision odds about n^2 / 2^65).
Off-path shards (manifest `no_result`) hold no games and are left out. `train` writes its training
split's keys to RUN/trained-games.npz (on `--resume --data-changed`, the union), for `evaluate --data`:

  array       shape  dtype    meaning
  keys        [G]    uint64   game keys (above) of every game the run trained on, sorted, unique
  manifests   [M]    str      identity.manifest_digest of every dataset whose training split is in `keys`
  version     []     int32    KEY_VERSION: how the keys were computed (a reader refuses another)
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.dataset import features, identity, shards
from shogi_dnn.errors import RunError, ShardFormatError
from shogi_dnn.folders import run_files

KEY_VERSION = 1
KEY_KEYS, KEY_MANIFESTS, KEY_VERSION_NAME = "keys", "manifests", "version"


@dataclasses.dataclass(frozen=True)
class SplitKeys:
    """The games of one or more splits of a dataset: their keys and positions, in the same order.

    keys: [G] uint64 (game_key's). positions: [G] int64, the positions of each game.
    """

    keys: np.ndarray
    positions: np.ndarray

    @property
    def games(self) -> int:
        return int(self.keys.shape[0])


def game_key(start_sfen: str, moves: np.ndarray) -> int:
    """The key of one game: `moves` [P] uint16, the move codes of its positions in ply order."""
    payload = start_sfen.encode("utf-8") + b"\n" + np.ascontiguousarray(moves, dtype="<u2").tobytes()
    return int.from_bytes(hashlib.sha1(payload).digest()[:8], "big")


def record_key(start_sfen: str, moves: Sequence[str], turns: Sequence[int]) -> int:
    """The key of a game from its USI `moves` and the side to move before each (`turns`)."""
    codes = [features.encode_move(move, int(turn)) for move, turn in zip(moves, turns)]
    return game_key(start_sfen, np.asarray([*codes, features.MOVE_NONE], np.uint16))


def shard_keys(path: Path) -> SplitKeys:
    """The key and position count of every game of one shard, in games-table order.

    Raises:
        ShardFormatError: the shard cannot be read.
    """
    table = shards.read_games(path)
    with shards.open_shard(path) as f:
        game = shards.read_stored(f, shards.KEY_GAME, 0, None)
        ply = shards.read_stored(f, shards.KEY_PLY, 0, None)
        move = shards.read_stored(f, shards.KEY_MOVE, 0, None)
    order = np.lexsort((ply, game))             # rows by game, then ply (a shuffled shard too)
    game, move = game[order], move[order]
    ids = np.asarray(table["game_id"])
    starts = np.searchsorted(game, ids, side="left")
    stops = np.searchsorted(game, ids, side="right")
    keys = np.array([game_key(sfen, move[a:b]) for sfen, a, b in zip(table["start_sfen"], starts, stops)],
                    dtype=np.uint64)
    return SplitKeys(keys, (stops - starts).astype(np.int64))


def split_keys(manifest: shards.Manifest, splits: Iterable[str]) -> SplitKeys:
    """The keys of every game of `splits` of a dataset (off-path shards left out)."""
    parts = [shard_keys(manifest.shard_path(info)) for name in splits for info in manifest.split(name)
             if not info.no_result]
    if not parts:
        return SplitKeys(np.zeros(0, np.uint64), np.zeros(0, np.int64))
    return SplitKeys(np.concatenate([p.keys for p in parts]), np.concatenate([p.positions for p in parts]))


@dataclasses.dataclass(frozen=True)
class TrainedGames:
    """RUN/trained-games.npz as read back (the module docstring's table)."""

    keys: np.ndarray              # [G] uint64, sorted, unique
    manifests: tuple[str, ...]

    @property
    def games(self) -> int:
        return int(self.keys.shape[0])

    def digest(self) -> str:
        """sha256 of the keys."""
        return hashlib.sha256(np.ascontiguousarray(self.keys, dtype="<u8").tobytes()).hexdigest()


def trained_games_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / run_files.TRAINED_GAMES


def read_trained_games(run_dir: str | Path) -> TrainedGames | None:
    """RUN/trained-games.npz, or None when the run has none.

    Raises:
        RunError: a file that is not one.
    """
    path = trained_games_path(run_dir)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            version = int(data[KEY_VERSION_NAME])
            keys = np.asarray(data[KEY_KEYS])
            manifests = tuple(str(m) for m in data[KEY_MANIFESTS])
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise RunError(f"{path}: not a trained-games file ({type(exc).__name__}: {exc}); delete it to "
                       "check by dataset identity instead") from exc
    if version != KEY_VERSION or keys.dtype != np.uint64 or keys.ndim != 1:
        raise RunError(f"{path}: version {version} keys {keys.dtype} {keys.shape}, this version reads "
                       f"version {KEY_VERSION} uint64 [G]")
    return TrainedGames(keys, manifests)


def write_trained_games(run_dir: str | Path, manifest: shards.Manifest) -> TrainedGames:
    """Add the training split of `manifest` to RUN/trained-games.npz; no write when it is already covered."""
    before = read_trained_games(run_dir)
    digest = identity.manifest_digest(manifest)
    if before is not None and digest in before.manifests:
        return before
    keys = split_keys(manifest, ("train",)).keys
    if before is not None:
        keys = np.concatenate([before.keys, keys])
    trained = TrainedGames(np.unique(keys), (*(before.manifests if before else ()), digest))
    buffer = io.BytesIO()
    np.savez(buffer, **{KEY_KEYS: trained.keys, KEY_MANIFESTS: np.array(trained.manifests, dtype=str),
                        KEY_VERSION_NAME: np.int32(KEY_VERSION)})
    run_files.write_atomic(trained_games_path(run_dir), buffer.getvalue())
    return trained


def trained_games_from_datasets(identities: Sequence[Any]) -> TrainedGames | None:
    """The trained games of a run without RUN/trained-games.npz, read from the datasets it trained on
    (run.json "dataset" and its history) when each is unchanged (same manifest digest); None otherwise.
    """
    keys, manifests = [], []
    for recorded in identities:
        try:
            before = identity.DatasetIdentity.from_dict(recorded)
            manifest = shards.read_manifest(before.data_dir)
        except (ValueError, ShardFormatError):
            return None
        if identity.manifest_digest(manifest) != before.manifest:
            return None
        keys.append(split_keys(manifest, ("train",)).keys)
        manifests.append(before.manifest)
    if not keys:
        return None
    return TrainedGames(np.unique(np.concatenate(keys)), tuple(manifests))


@dataclasses.dataclass(frozen=True)
class Overlap:
    """How many of the scored games (and their positions) the run trained on."""

    games: int                # scored games
    positions: int            # their positions
    trained_games: int        # of them, games the run trained on
    trained_positions: int    # and their positions

    def text(self) -> str:
        """'3 of the 8 games (312 of 820 positions)'."""
        return (f"{self.trained_games:,} of the {self.games:,} games ({self.trained_positions:,} of "
                f"{self.positions:,} positions)")


def overlap(scored: SplitKeys, trained: TrainedGames) -> Overlap:
    """The scored games that are among the run's trained games."""
    hit = np.isin(scored.keys, trained.keys)
    return Overlap(scored.games, int(scored.positions.sum()), int(hit.sum()),
                   int(scored.positions[hit].sum()))
