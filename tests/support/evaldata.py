"""Datasets with a planted material signal, for baseline and evaluation tests.

    from tests.support.evaldata import material_dataset
    manifest = material_dataset(tmp_path, {"train": (400, 0.9, False), "validation": (200, 0.5, True)})

Each position has both kings, a few random pawns per side, and one extra rook for one side. In a split
given (n, rook_share, reversed): `rook_share` of the positions give the side to move the extra rook; the
side with the extra rook wins (or loses, when `reversed`). Every game (10 positions) has ratings.

With `eval_share` (split -> share), that share of each split's positions carries an engine evaluation
(shards.KEY_EVAL, side to move's view): 50..899 cp for the side that wins in 80% of them, against it in the
rest (an informative, imperfect engine); the others have none. Without it no shard has an eval dataset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import EVAL_NONE, LABEL_DRAW, MOVE_NONE

OWN_KING, OPP_KING, OWN_ROOK, OPP_ROOK, OWN_PAWN, OPP_PAWN = 8, 22, 7, 21, 1, 15
POSITIONS_PER_GAME = 10


def material_positions(n: int, rook_share: float, reversed_labels: bool, rng: np.random.Generator,
                       first_game: int = 0, eval_share: float = 0.0) -> dict[str, np.ndarray]:
    """Positions keyed as shards.POSITION_SCHEMA (see the module docstring)."""
    board = np.zeros((n, 81), np.uint8)
    board[:, 4], board[:, 76] = OPP_KING, OWN_KING
    own_rook = np.arange(n) < round(rook_share * n)
    rng.shuffle(own_rook)
    board[:, 40] = np.where(own_rook, OWN_ROOK, OPP_ROOK)
    for row in range(n):                       # random pawns, same expected count for both sides
        squares = rng.choice([s for s in range(9, 72) if s != 40], size=6, replace=False)
        board[row, squares] = rng.choice([OWN_PAWN, OPP_PAWN], size=6)
    hands = np.zeros((n, 14), np.uint8)
    hands[:, 0] = rng.integers(0, 3, n)
    hands[:, 7] = rng.integers(0, 3, n)
    win = (own_rook != reversed_labels).astype(np.float32)
    index = np.arange(n)
    evals = {}
    if eval_share > 0:          # drawn after everything else: datasets without evaluations are unchanged
        toward_winner = np.where(rng.random(n) < 0.8, 1, -1) * np.where(win == 1, 1, -1)
        values = toward_winner * rng.integers(50, 900, n)
        evals[shards.KEY_EVAL] = np.where(rng.random(n) < eval_share, values, EVAL_NONE).astype(np.int16)
    return {**evals, shards.KEY_BOARD: board, shards.KEY_HANDS: hands, shards.KEY_TURN: (index % 2).astype(np.uint8),
            shards.KEY_PLY: (index * 7 % 160).astype(np.int16),
            shards.KEY_MOVE: np.full(n, MOVE_NONE, np.uint16), shards.KEY_WIN: win,
            shards.KEY_GAME: (first_game + index // POSITIONS_PER_GAME).astype(np.int32)}


def games_table(game_ids: np.ndarray) -> dict[str, list]:
    """A games table with ratings 1200, 1700, ... cycling by game id."""
    ids = np.unique(game_ids)
    ratings = [1200.0 + 500.0 * (int(g) % 4) for g in ids]
    g = len(ids)
    return {"game_id": ids, "source": ["planted"] * g, "line": [1] * g, "black": ["b"] * g, "white": ["w"] * g,
            "black_rating": ratings, "white_rating": ratings, "winner": ["black"] * g, "ending": ["resign"] * g,
            "num_moves": [POSITIONS_PER_GAME] * g, "start_sfen": [""] * g}


def material_dataset(root: Path, splits: dict[str, tuple[int, float, bool]], seed: int = 0,
                     shards_per_split: int = 2, eval_share: dict[str, float] | None = None,
                     draw_splits: tuple[str, ...] = ()) -> shards.Manifest:
    """Write the planted dataset (each split cut into `shards_per_split` shards) and its manifest; every
    position of a split in `draw_splits` is labelled a draw."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    infos, first_game = [], 0
    for split, (n, share, reversed_labels) in splits.items():
        positions = material_positions(n, share, reversed_labels, rng, first_game,
                                       (eval_share or {}).get(split, 0.0))
        if split in draw_splits:
            positions[shards.KEY_WIN] = np.full(n, LABEL_DRAW, np.float32)
        first_game += n // POSITIONS_PER_GAME + 1
        for i, rows in enumerate(np.array_split(np.arange(n), shards_per_split)):
            part = {k: v[rows] for k, v in positions.items()}
            name = f"{split}-{i:05d}.h5"
            digest = shards.write_shard(root / name, split, part, games_table(part[shards.KEY_GAME]),
                                        chunk_rows=64)
            table = games_table(part[shards.KEY_GAME])
            infos.append(shards.shard_info(root / name, split, len(rows), len(table["game_id"]), digest,
                                           table["game_id"]))
    shards.write_manifest(root, infos, {"planted": True}, {})
    return shards.read_manifest(root)


def split_paths(manifest: shards.Manifest, split: str) -> list[Path]:
    """Absolute shard paths of one split."""
    return [manifest.shard_path(s) for s in manifest.split(split)]
