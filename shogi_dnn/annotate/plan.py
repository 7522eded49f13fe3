"""What annotate does, decided before any engine starts: the settings, the chunks and the off-path draw.

The plan depends only on the source dataset (its manifest) and the settings, never on the worker
count, so a seed gives the same positions, the same random moves and (a fresh engine searching each
chunk after one `usinewgame`, Threads 1, at a fixed node budget) the same labels:

  eval chunks       every source shard of every split (manifest order), cut in runs of chunk_positions
                    rows; a chunk searches the rows of its run whose `eval` is features.EVAL_NONE
  off-path chunks   `off_path` training positions drawn without replacement (numpy default_rng
                    ([seed, 1])), in dataset order (manifest order of the train shards, then row), cut
                    in runs of chunk_positions; each is the start of a walk of `plies` random legal moves
                    (default_rng([seed, 2, row]) picks among the moves sorted as USI strings)

Only the train split is drawn from: an off-path position next to a validation or test game would leak
that game into training. The chunk is the unit of work (one engine process each) and of resume.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np

from shogi_dnn.dataset import identity, shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.rules import Position, new_position

PLAN_VERSION = 2          # bump when a chunk's result would change for the same settings (2: the hash sized
                          # to the node budget, usi_client.sized_options; one usinewgame per chunk)
EVAL_CHUNK, OFF_PATH_CHUNK = "eval", "off_path"


@dataclasses.dataclass(frozen=True)
class AnnotateSettings:
    """What annotate does (the manifest records it; a rerun must give the same to resume)."""

    nodes: int = 1000                              # engine node budget per position (`go nodes N`)
    evals: bool = True                             # fill `eval` where it is EVAL_NONE, in every split
    off_path: int = 0                              # off-path positions to make from training positions
    plies: int = 1                                 # random legal moves from the game position
    seed: int = 1                                  # the off-path draw and the random moves
    timeout: float = 30.0                          # seconds a position may take before the engine is killed
    options: tuple[tuple[str, str], ...] = ()      # extra engine options (NAME, VALUE), after the defaults
    chunk_positions: int = 512                     # positions of a chunk: the unit of work and of resume
    shard_size: int = 100_000                      # positions per off-path shard

    def check(self) -> None:
        """Raises ConfigError naming the first bad value."""
        if self.nodes < 1:
            raise ConfigError(f"--nodes must be at least 1 (got {self.nodes})")
        if self.off_path < 0:
            raise ConfigError(f"--off-path must be 0 or more (got {self.off_path})")
        if self.plies < 1:
            raise ConfigError(f"--plies must be at least 1 (got {self.plies})")
        if not self.timeout > 0:
            raise ConfigError(f"--timeout must be positive (got {self.timeout})")
        if self.chunk_positions < 1 or self.shard_size < 1:
            raise ConfigError("chunk_positions and shard_size must be at least 1")
        if not self.evals and not self.off_path:
            raise ConfigError("nothing to do: --no-evals and no --off-path positions")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["options"] = [list(pair) for pair in self.options]
        return data


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One unit of work. `kind` EVAL_CHUNK: rows [start, stop) of source shard `shard` (index in
    manifest.shards); OFF_PATH_CHUNK: entries [start, stop) of Plan.off_path_rows."""

    index: int
    kind: str
    shard: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class Plan:
    """The chunks of one annotate job and where the off-path positions start.

    Attributes:
        off_path_rows: [M] int64 sorted global rows of the train split (train shards in manifest order).
        train_offsets: [T + 1] int64 first global row of each train shard, then the split's size.
    """

    manifest: shards.Manifest
    settings: AnnotateSettings
    chunks: tuple[Chunk, ...]
    off_path_rows: np.ndarray
    train_offsets: np.ndarray

    @property
    def train_shards(self) -> tuple[shards.ShardInfo, ...]:
        return self.manifest.split("train")

    def locate(self, rows: np.ndarray) -> list[tuple[shards.ShardInfo, np.ndarray]]:
        """Global train rows (sorted) as (train shard, its rows [k] int64), shard by shard."""
        which = np.searchsorted(self.train_offsets, rows, side="right") - 1
        return [(self.train_shards[i], rows[which == i] - self.train_offsets[i]) for i in np.unique(which)]


def make_plan(manifest: shards.Manifest, settings: AnnotateSettings) -> Plan:
    """The plan of an annotate job (module docstring). Reads only the manifest."""
    chunks: list[Chunk] = []
    step = settings.chunk_positions
    if settings.evals:
        for index, info in enumerate(manifest.shards):
            for start in range(0, info.positions, step):
                chunks.append(Chunk(len(chunks), EVAL_CHUNK, index, start, min(start + step, info.positions)))
    sizes = [info.positions for info in manifest.split("train")]
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    rows = draw_off_path(int(offsets[-1]), settings.off_path, settings.seed)
    for start in range(0, len(rows), step):
        chunks.append(Chunk(len(chunks), OFF_PATH_CHUNK, -1, start, min(start + step, len(rows))))
    return Plan(manifest, settings, tuple(chunks), rows, offsets)


def draw_off_path(total: int, count: int, seed: int) -> np.ndarray:
    """[min(count, total)] int64: training rows drawn without replacement, sorted."""
    count = min(count, total)
    if count <= 0:
        return np.zeros(0, np.int64)
    return np.sort(np.random.default_rng([seed, 1]).choice(total, size=count, replace=False)).astype(np.int64)


def random_walk(sfen: str, plies: int, seed: int, row: int) -> Position | None:
    """The position `plies` random legal moves after `sfen` (global train row `row`'s walk), or None when
    a position on the way has no legal move (the game's final, mated position)."""
    rng = np.random.default_rng([seed, 2, row])
    position = new_position(sfen)
    for _ in range(plies):
        moves = sorted(position.legal_usi())
        if not moves:
            return None
        position.push_usi(moves[int(rng.integers(len(moves)))])
    return position


def fingerprint(plan: Plan, engine: str, engine_name: str) -> str:
    """What a rerun must share with an interrupted run to reuse its chunks: the source shards (manifest
    digest), the settings but the timeout, the engine (its path and `id name`) and PLAN_VERSION."""
    settings = {k: v for k, v in plan.settings.to_dict().items() if k != "timeout"}
    data = {"source": identity.manifest_digest(plan.manifest), "settings": settings, "engine": engine,
            "engine_name": engine_name, "version": PLAN_VERSION, "schema_version": shards.SCHEMA_VERSION}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
