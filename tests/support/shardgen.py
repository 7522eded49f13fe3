"""Synthetic shard datasets for tests (reusable by any test module).

    from tests.support.shardgen import make_dataset
    manifest = make_dataset(tmp_path, train=[300, 200], validation=[100], chunk_rows=64)

Rows are shogi_dnn.bench.synthetic positions; `ply` is each row's index within its split (splits of
fewer than 2**15 rows), so a test can tell exactly which rows a pipeline delivered.
"""

from __future__ import annotations

from pathlib import Path

from shogi_dnn.dataset import shards
from shogi_dnn.bench.synthetic import write_synthetic_dataset


def make_dataset(root: Path, *, train: list[int], validation: list[int] = (), test: list[int] = (),
                 chunk_rows: int = 64, seed: int = 0) -> shards.Manifest:
    """Write shards of the given sizes per split (small chunks so tiny shards have several) and a manifest."""
    sizes = {name: list(counts) for name, counts in (("train", train), ("validation", validation),
                                                      ("test", test)) if counts}
    return write_synthetic_dataset(root, sizes, seed=seed, chunk_rows=chunk_rows)


def split_paths(manifest: shards.Manifest, split: str) -> list[Path]:
    """Absolute shard paths of one split."""
    return [manifest.shard_path(s) for s in manifest.split(split)]
