"""The data plan of a training run, without TensorFlow: sample groups, stage seeds, the chunk and
shuffle-buffer plan of a pass, read lanes, and the batch counts that follow from them.

Everything here is computed from the manifest and the shards' metadata (rows and chunk sizes), never from
their data, so stages.StagePlan can size a whole run before TensorFlow starts, and pipeline.py streams
exactly what this plan says (see pipeline.py for the stream itself).

Read lanes (data.read_lanes) are resolved and checked against the workers, the batch and the resume
position in one function, resolve_lanes; config.py only checks that the field is >= 0.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shogi_dnn import shards
from shogi_dnn.errors import ConfigError, ShardFormatError

# Stream-independent seed streams: chunk order, per-buffer permutation/mirroring, group order, stage seeds.
SEED_CHUNK_ORDER, SEED_BUFFER, SEED_GROUP_ORDER, SEED_STAGE = 0, 1, 2, 3
# The datasets a pass reads (board and hands are stored packed); their layouts must agree. `eval` is
# optional in a shard (shards.OPTIONAL_SCHEMA): a shard without it streams features.EVAL_NONE.
STREAM_KEYS = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN, shards.KEY_PLY, shards.KEY_EVAL)
STORED_KEYS = shards.stored_keys(STREAM_KEYS)


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Rows [start, stop) of shard number `shard` (one HDF5 chunk)."""

    shard: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


# ----------------------------------------------------------------------------------------------------
# Sample groups and seeds


def split_groups(shard_infos: Sequence[shards.ShardInfo], num_groups: int) -> list[tuple[shards.ShardInfo, ...]]:
    """Cut shards (in order) into `num_groups` contiguous, non-empty groups balanced by positions.

    Raises:
        ConfigError: num_groups < 1 or more groups than shards.
    """
    if num_groups < 1 or num_groups > len(shard_infos):
        raise ConfigError(f"data.num_groups = {num_groups}, but the training split has "
                          f"{len(shard_infos)} shards (need 1 <= groups <= shards)")
    ends = np.cumsum([s.positions for s in shard_infos])
    total = int(ends[-1])
    cuts = [0]
    for k in range(1, num_groups):
        # Shard boundary nearest to k/G of the positions, leaving room for the remaining groups.
        lo, hi = cuts[-1] + 1, len(shard_infos) - (num_groups - k)
        candidates = np.arange(lo, hi + 1)
        cuts.append(int(candidates[np.argmin(np.abs(ends[candidates - 1] - k * total / num_groups))]))
    cuts.append(len(shard_infos))
    return [tuple(shard_infos[a:b]) for a, b in itertools.pairwise(cuts)]


def group_order(seed: int, epoch: int, num_groups: int) -> list[int]:
    """The order in which an epoch visits the sample groups: a permutation seeded by (seed, epoch)."""
    rng = np.random.default_rng([check_seed(seed), SEED_GROUP_ORDER, epoch])
    return [int(g) for g in rng.permutation(num_groups)]


def stage_seed(seed: int, epoch: int, group: int) -> int:
    """Seed of one stage's sample stream (make_train_dataset), derived from the run seed."""
    state = np.random.SeedSequence([check_seed(seed), SEED_STAGE, epoch, group]).generate_state(1)
    return int(state[0])


def check_seed(seed: int) -> int:
    if seed < 0:
        raise ConfigError(f"seed = {seed} must be >= 0")
    return int(seed)


# ----------------------------------------------------------------------------------------------------
# Chunks, shuffle buffers and read lanes


def shard_layouts(paths: Sequence[Path]) -> list[tuple[int, int]]:
    """(rows, chunk rows) of each shard, from its metadata (no data read)."""
    layouts = []
    for path in paths:
        with shards.open_shard(path) as f:
            rows = int(f[shards.KEY_WIN].shape[0])
            chunk_rows = f[shards.KEY_PIECES].chunks[0] if f[shards.KEY_PIECES].chunks else max(rows, 1)
            for key in STORED_KEYS:
                if key in shards.OPTIONAL_SCHEMA and key not in f:
                    continue                    # read as its absent value, any layout will do
                if f[key].shape[0] != rows or (f[key].chunks and f[key].chunks[0] != chunk_rows):
                    raise ShardFormatError(f"{path}: dataset {key!r} has {f[key].shape[0]} rows or chunks "
                                           f"{f[key].chunks}, expected {rows} rows in chunks of {chunk_rows}")
        layouts.append((rows, int(chunk_rows)))
    return layouts


def list_chunks(paths: Sequence[Path]) -> list[Chunk]:
    """Every chunk of every shard, in file order."""
    return [Chunk(i, start, min(start + chunk_rows, rows))
            for i, (rows, chunk_rows) in enumerate(shard_layouts(paths))
            for start in range(0, rows, chunk_rows)]


def plan_buffers(paths: Sequence[Path], seed: int, shuffle_buffer: int) -> list[tuple[Chunk, ...]]:
    """The shuffle buffers of one pass: the seeded chunk permutation cut into groups of chunks
    holding at least `shuffle_buffer` rows each (the last may hold fewer)."""
    chunks = list_chunks(paths)
    order = np.random.default_rng([check_seed(seed), SEED_CHUNK_ORDER]).permutation(len(chunks))
    buffers, current, rows = [], [], 0
    for index in order:
        current.append(chunks[index])
        rows += len(chunks[index])
        if rows >= shuffle_buffer:
            buffers.append(tuple(current))
            current, rows = [], 0
    if current:
        buffers.append(tuple(current))
    return buffers


def lane_rows(buffers: Sequence[tuple[Chunk, ...]], lanes: int) -> list[int]:
    """Rows of each read lane (buffer i belongs to lane i % lanes)."""
    return [sum(len(c) for b in buffers[lane::lanes] for c in b) for lane in range(lanes)]


def check_skip(skip_samples: int, total: int) -> None:
    if not 0 <= skip_samples <= total:
        raise ConfigError(f"skip_samples = {skip_samples} is outside the {total} positions of the group")


def resolve_lanes(read_lanes: int, num_workers: int, global_batch: int, skip_samples: int = 0) -> int:
    """The effective read lanes L: data.read_lanes if > 0, else one per worker; every check that ties L to
    the workers, the batch and the resume position is made here and nowhere else.

    Raises:
        ConfigError: read_lanes < 0, L not a multiple of the workers, global_batch not divisible by L,
            or skip_samples not a multiple of L (each lane skips skip_samples / L rows).
    """
    if read_lanes < 0:
        raise ConfigError(f"data.read_lanes = {read_lanes} must be >= 0 (0 = one lane per worker)")
    lanes = read_lanes or num_workers
    if lanes % num_workers:
        raise ConfigError(f"{lanes} read lanes (data.read_lanes) are not a multiple of the {num_workers} workers")
    if global_batch % lanes:
        raise ConfigError(f"global_batch = {global_batch} is not divisible by {lanes} read lanes (data.read_lanes)")
    if skip_samples % lanes:
        raise ConfigError(f"skip_samples = {skip_samples} is not a multiple of the {lanes} read lanes "
                          f"(each lane skips skip_samples / lanes rows)")
    return lanes


def full_batches(lane_rows: Sequence[int], global_batch: int, skip_samples: int) -> int:
    """Full global batches of a pass: min over lanes of floor((lane rows - skip/L) / (B/L))."""
    lanes = len(lane_rows)
    return max(0, min((rows - skip_samples // lanes) // (global_batch // lanes) for rows in lane_rows))


# ----------------------------------------------------------------------------------------------------
# Counting


def count_positions(paths: Sequence[Path]) -> int:
    """Positions in the shards (from their metadata)."""
    return sum(rows for rows, _ in shard_layouts([Path(p) for p in paths]))


def count_batches(paths: Sequence[Path], global_batch: int, skip_samples: int = 0, *, lanes: int = 1,
                  seed: int = 0, shuffle_buffer: int = 0) -> int:
    """Training steps (full global batches) in one pass after skipping `skip_samples` positions, with
    `lanes` read lanes (from the shard metadata and, for lanes > 1, the stream's seed and shuffle buffer;
    no data is read). Also right for an update of micro-batches: pass global batch x micro-batches."""
    if global_batch < 1:
        raise ConfigError(f"global_batch = {global_batch} must be positive")
    lanes = resolve_lanes(lanes, 1, global_batch, skip_samples)
    if lanes == 1:
        total = count_positions(paths)
        check_skip(skip_samples, total)
        return (total - skip_samples) // global_batch
    rows = lane_rows(plan_buffers([Path(p) for p in paths], check_seed(seed), shuffle_buffer), lanes)
    check_skip(skip_samples, sum(rows))
    return full_batches(rows, global_batch, skip_samples)
