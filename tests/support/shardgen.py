"""Synthetic shard datasets for tests (reusable by any test module).

    from tests.support.shardgen import make_dataset
    manifest = make_dataset(tmp_path, train=[300, 200], validation=[100], chunk_rows=64)

Rows are shogi_dnn.bench.synthetic positions; `ply` is each row's index within its split (splits of
fewer than 2**15 rows), so a test can tell exactly which rows a pipeline delivered.

make_policy_dataset writes the same with a `move` column of random move codes (every code a move of the
side to move's view, policy.move_labels maps it; a tenth MOVE_NONE; not legal in the position: the
pipeline does not ask) and optionally train shards of positions without a result (win NaN, engine
evaluations, as annotate's off-path shards).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from shogi_dnn.bench.synthetic import _games_table, random_positions, write_synthetic_dataset
from shogi_dnn.dataset import features, policy, shards


def make_dataset(root: Path, *, train: list[int], validation: list[int] = (), test: list[int] = (),
                 chunk_rows: int = 64, seed: int = 0) -> shards.Manifest:
    """Write shards of the given sizes per split (small chunks so tiny shards have several) and a manifest."""
    sizes = {name: list(counts) for name, counts in (("train", train), ("validation", validation),
                                                      ("test", test)) if counts}
    return write_synthetic_dataset(root, sizes, seed=seed, chunk_rows=chunk_rows)


def split_paths(manifest: shards.Manifest, split: str) -> list[Path]:
    """Absolute shard paths of one split."""
    return [manifest.shard_path(s) for s in manifest.split(split)]


def random_moves(count: int, rng: np.random.Generator) -> np.ndarray:
    """[count] uint16 move codes: random codes that policy.move_labels accepts, a tenth MOVE_NONE."""
    valid = np.flatnonzero(policy._CODE_LABEL >= 0)           # every code of a move (and MOVE_NONE)
    codes = rng.choice(valid, count).astype(np.uint16)
    codes[rng.random(count) < 0.1] = features.MOVE_NONE
    return codes


def make_policy_dataset(root: Path, *, train: list[int], validation: list[int] = (), no_result: int = 0,
                        chunk_rows: int = 64, seed: int = 0) -> shards.Manifest:
    """Shards with random moves (random_moves) per split, plus with no_result > 0 one more train shard
    `offpath-00000.h5` of that many positions without a result (win NaN, eval in -600..600 cp), its
    manifest entry counting them in `no_result`."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    infos, totals, first_game = [], {}, 0      # totals: rows so far per split (ply = row index in it)
    plan = [("train", f"train-{i:05d}.h5", n, False) for i, n in enumerate(train)]
    plan += [("validation", f"validation-{i:05d}.h5", n, False) for i, n in enumerate(validation)]
    plan += [("train", "offpath-00000.h5", no_result, True)] if no_result else []
    for split, name, size, offpath in plan:
        positions = random_positions(size, rng, totals.get(split, 0))
        positions[shards.KEY_MOVE] = random_moves(size, rng)
        game = positions[shards.KEY_GAME]
        positions[shards.KEY_GAME] = game - game.min() + first_game
        if offpath:
            positions[shards.KEY_WIN] = np.full(size, np.nan, np.float32)
            positions[shards.KEY_EVAL] = rng.integers(-600, 600, size).astype(np.int16)
        games = _games_table(positions[shards.KEY_GAME])
        first_game = int(positions[shards.KEY_GAME].max()) + 1
        digest = shards.write_shard(root / name, split, positions, games, chunk_rows=chunk_rows)
        info = shards.shard_info(root / name, split, size, len(games["game_id"]), digest, games["game_id"])
        infos.append(dataclasses.replace(info, no_result=size if offpath else 0))
        totals[split] = totals.get(split, 0) + size
    shards.write_manifest(root, infos, {"synthetic": True, "seed": seed}, totals)
    return shards.read_manifest(root)
