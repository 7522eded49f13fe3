"""Synthetic shard datasets for benchmarks and tests (numpy + h5py only, no TensorFlow).

Positions are "legal-ish": each board holds a king per side and a random number of other pieces on
random squares, hands hold small counts within features.HAND_MAX. They are not reachable positions;
they have the shape, dtypes and roughly the compressibility of real shards, which is what throughput
measurements and pipeline tests need. `ply` is the row's index in its split modulo 2**15, so small test
datasets can identify every row they read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from shogi_dnn import features, shards
from shogi_dnn.rules import NUM_PIECE_TYPES, NUM_SQUARES

KING = 8                          # rules' piece type of the king
PIECES_PER_BOARD = (20, 40)       # range of pieces besides the two kings
POSITIONS_PER_GAME = 100          # synthetic games: consecutive rows share a game id


def random_positions(count: int, rng: np.random.Generator, first_row: int = 0) -> dict[str, np.ndarray]:
    """`count` synthetic positions keyed as shards.POSITION_SCHEMA.

    Returns:
        board [count, 81] uint8, hands [count, 14] uint8, turn/ply/move/win/game [count].
    """
    board = np.zeros((count, NUM_SQUARES), np.uint8)
    squares = np.argsort(rng.random((count, NUM_SQUARES)), axis=1)   # a random square order per row
    pieces = rng.integers(*PIECES_PER_BOARD, size=count)
    codes = rng.integers(1, 2 * NUM_PIECE_TYPES + 1, size=(count, NUM_SQUARES)).astype(np.uint8)
    codes[codes == KING] = 1
    codes[codes == KING + NUM_PIECE_TYPES] = 1 + NUM_PIECE_TYPES
    codes[:, 0], codes[:, 1] = KING, KING + NUM_PIECE_TYPES
    filled = np.arange(NUM_SQUARES)[None, :] < (pieces + 2)[:, None]
    rows = np.repeat(np.arange(count), NUM_SQUARES).reshape(count, NUM_SQUARES)
    board[rows[filled], squares[filled]] = codes[filled]
    limits = np.asarray(features.HAND_MAX * 2)
    hands = (rng.integers(0, limits + 1, size=(count, features.HAND_SIZE)) * (rng.random((count, 1)) < 0.5))
    index = first_row + np.arange(count)
    return {
        shards.KEY_BOARD: board, shards.KEY_HANDS: hands.astype(np.uint8),
        shards.KEY_TURN: (index % 2).astype(np.uint8), shards.KEY_PLY: (index % 2**15).astype(np.int16),
        shards.KEY_MOVE: np.full(count, features.MOVE_NONE, np.uint16),
        shards.KEY_WIN: rng.choice(np.asarray([features.LABEL_LOSS, features.LABEL_WIN, features.LABEL_DRAW],
                                              np.float32), size=count, p=[0.48, 0.48, 0.04]),
        shards.KEY_GAME: (index // POSITIONS_PER_GAME).astype(np.int32),
    }


def _games_table(game_ids: np.ndarray) -> dict[str, list]:
    ids = np.unique(game_ids)
    g = len(ids)
    return {"game_id": ids, "source": ["synthetic"] * g, "line": [1] * g, "black": [""] * g,
            "white": [""] * g, "black_rating": [np.nan] * g, "white_rating": [np.nan] * g,
            "winner": ["draw"] * g, "ending": ["draw"] * g, "num_moves": [POSITIONS_PER_GAME] * g,
            "start_sfen": [""] * g}


def write_synthetic_dataset(root: str | Path, shard_sizes: Mapping[str, list[int]], seed: int = 0,
                            chunk_rows: int = shards.CHUNK_ROWS) -> shards.Manifest:
    """Write a dataset folder of synthetic shards plus manifest.json.

    Args:
        root: the dataset folder (created).
        shard_sizes: split name -> positions of each of its shards, e.g. {"train": [5000, 3000]}.
        seed: seed of the random positions.
        chunk_rows: HDF5 chunk rows (small values let tiny test shards have several chunks).
    Returns:
        The manifest as read back from disk.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    infos = []
    for split, sizes in shard_sizes.items():
        first_row = 0
        for i, size in enumerate(sizes):
            positions = random_positions(size, rng, first_row)
            first_row += size
            name = f"{split}-{i:05d}.h5"
            games = _games_table(positions[shards.KEY_GAME])
            digest = shards.write_shard(root / name, split, positions, games, chunk_rows=chunk_rows)
            infos.append(shards.ShardInfo(name, split, size, len(games["game_id"]), digest))
    totals = {split: sum(sizes) for split, sizes in shard_sizes.items()}
    shards.write_manifest(root, infos, {"synthetic": True, "seed": seed}, totals)
    return shards.read_manifest(root)
