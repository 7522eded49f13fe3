"""Synthetic shard datasets for benchmarks and tests (numpy + h5py only, no TensorFlow).

Positions are "legal-ish": one shogi set of pieces, each on a random square or in a random hand, a king
per side on the board. They are not reachable positions;
they have the shape, dtypes and roughly the compressibility of real shards, which is what throughput
measurements and pipeline tests need. `ply` is the row's index in its split modulo 2**15, so small test
datasets can identify every row they read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from shogi_dnn.dataset import features, shards
from shogi_dnn.rules import NUM_SQUARES

ON_BOARD = (0.5, 1.0)             # range of the share of a set's pieces on the board (the rest in hand)
POSITIONS_PER_GAME = 100          # synthetic games: consecutive rows share a game id


def random_positions(count: int, rng: np.random.Generator, first_row: int = 0) -> dict[str, np.ndarray]:
    """`count` synthetic positions keyed as shards.POSITION_SCHEMA.

    Returns:
        board [count, 81] uint8, hands [count, 14] uint8, turn/ply/move/win/game [count].
    """
    # Packed form first (features.pack_positions): each piece of a set on a distinct random square or in
    # a random hand; kings (the last two slots) on the board, one a side; a tenth of the rest promoted.
    squares = np.argsort(rng.random((count, NUM_SQUARES)), axis=1)[:, :features.NUM_SLOTS].astype(np.uint8)
    owner = rng.integers(0, 2, size=(count, features.NUM_SLOTS)).astype(np.uint8) * features.SLOT_OPPONENT
    owner[:, -2:] = (0, features.SLOT_OPPONENT)
    on_board = rng.random((count, features.NUM_SLOTS)) < rng.uniform(*ON_BOARD, size=(count, 1))
    on_board[:, -2:] = True
    pieces = np.where(on_board, squares, features.SLOT_IN_HAND).astype(np.uint8) | owner
    promotable = np.isin(features.SLOT_TYPE, (1, 2, 3, 4, 6, 7))
    flags = (rng.random((count, features.NUM_SLOTS)) < 0.1) & on_board & promotable
    board, hands = features.unpack_positions(pieces, np.packbits(flags, axis=1, bitorder="little"))
    index = first_row + np.arange(count)
    return {
        shards.KEY_BOARD: board, shards.KEY_HANDS: hands,
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
            infos.append(shards.shard_info(root / name, split, size, len(games["game_id"]), digest,
                                           games["game_id"]))
    totals = {split: sum(sizes) for split, sizes in shard_sizes.items()}
    shards.write_manifest(root, infos, {"synthetic": True, "seed": seed}, totals)
    return shards.read_manifest(root)
