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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError, ShardFormatError
from shogi_dnn.wording import plural

# Stream-independent seed streams: chunk order, per-buffer permutation/mirroring, group order, stage seeds.
SEED_CHUNK_ORDER, SEED_BUFFER, SEED_GROUP_ORDER, SEED_STAGE = 0, 1, 2, 3
# The datasets a pass reads (board and hands are stored packed); their layouts must agree. `eval` is
# optional in a shard (shards.OPTIONAL_SCHEMA): a shard without it streams features.EVAL_NONE.
STREAM_KEYS = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN, shards.KEY_PLY, shards.KEY_EVAL)
STORED_KEYS = shards.stored_keys(STREAM_KEYS)
KEY_POLICY = "policy"                  # a batch's move labels [B] int32 (a model with a policy head)


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


@dataclasses.dataclass(frozen=True)
class Group:
    """One sample group: rows [rows[0], rows[1]) of its `shards` concatenated in manifest order
    (the shards it touches; the first and last may be shared with the neighbouring groups)."""

    shards: tuple[shards.ShardInfo, ...]
    rows: tuple[int, int]

    @property
    def positions(self) -> int:
        return self.rows[1] - self.rows[0]


def split_groups(shard_infos: Sequence[shards.ShardInfo], num_groups: int) -> list[Group]:
    """Cut the training split (its shards concatenated in order) into `num_groups` contiguous groups of
    equal size (+-1 row), by rows: group k holds rows [k*N//G, (k+1)*N//G) of the N positions, whatever
    the number of shards. A group boundary inside an HDF5 chunk only makes the two groups read that
    chunk each (pipeline.py reads chunk slices).

    Raises:
        ConfigError: num_groups < 1 or more groups than positions.
    """
    total = sum(s.positions for s in shard_infos)
    if num_groups < 1 or num_groups > total:
        raise ConfigError(f"data.num_groups = {num_groups}, but the training split has "
                          f"{plural(total, 'position')} (need 1 <= groups <= positions)")
    offsets = np.concatenate([[0], np.cumsum([s.positions for s in shard_infos])]).astype(np.int64)
    groups = []
    for k in range(num_groups):
        start, stop = k * total // num_groups, (k + 1) * total // num_groups
        first = int(np.searchsorted(offsets, start, side="right") - 1)
        last = int(np.searchsorted(offsets, stop, side="left"))        # shards [first, last) overlap
        groups.append(Group(tuple(shard_infos[first:last]),
                            (start - int(offsets[first]), stop - int(offsets[first]))))
    return groups


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


def list_chunks(paths: Sequence[Path], rows: tuple[int, int] | None = None) -> list[Chunk]:
    """Every chunk of every shard, in file order; with `rows` = (start, stop), only rows [start, stop) of
    the shards concatenated (a sample group): the chunks inside them, and the parts of the two at its ends."""
    chunks, offset = [], 0
    lo, hi = rows if rows is not None else (0, None)
    for i, (shard_rows, chunk_rows) in enumerate(shard_layouts(paths)):
        for start in range(0, shard_rows, chunk_rows):
            stop = min(start + chunk_rows, shard_rows)
            a, b = max(start, lo - offset), stop if hi is None else min(stop, hi - offset)
            if a < b:
                chunks.append(Chunk(i, a, b))
        offset += shard_rows
    if rows is not None and not 0 <= rows[0] <= rows[1] <= offset:     # (lo, hi) = rows
        raise ConfigError(f"rows [{lo}, {hi}) are outside the {offset} positions of the shards")
    return chunks


def plan_buffers(paths: Sequence[Path], seed: int, shuffle_buffer: int,
                 rows: tuple[int, int] | None = None) -> list[tuple[Chunk, ...]]:
    """The shuffle buffers of one pass (over `rows` of the shards, default all): the seeded chunk
    permutation cut into groups of chunks holding at least `shuffle_buffer` rows each (the last may
    hold fewer)."""
    return cut_buffers(list_chunks(paths, rows), seed, shuffle_buffer)


def cut_buffers(chunks: Sequence[Chunk], seed: int, shuffle_buffer: int) -> list[tuple[Chunk, ...]]:
    """plan_buffers of a chunk list already listed (list_chunks): no shard is opened."""
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
        raise ConfigError(f"{lanes} read lanes (data.read_lanes) are not a multiple of the "
                          f"{num_workers} workers")
    if global_batch % lanes:
        raise ConfigError(f"global_batch = {global_batch} is not divisible by {lanes} read lanes "
                          "(data.read_lanes)")
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


def count_positions(paths: Sequence[Path], rows: tuple[int, int] | None = None) -> int:
    """Positions in the shards (from their metadata), or in `rows` of them."""
    if rows is not None:
        return sum(len(c) for c in list_chunks([Path(p) for p in paths], rows))
    return sum(n for n, _ in shard_layouts([Path(p) for p in paths]))


def count_batches(paths: Sequence[Path], global_batch: int, skip_samples: int = 0, *, lanes: int = 1,
                  seed: int = 0, shuffle_buffer: int = 0, rows: tuple[int, int] | None = None) -> int:
    """Training steps (full global batches) in one pass after skipping `skip_samples` positions, with
    `lanes` read lanes (from the shard metadata and, for lanes > 1, the stream's seed and shuffle buffer;
    no data is read). Also right for an update of micro-batches: pass global batch x micro-batches."""
    if global_batch < 1:
        raise ConfigError(f"global_batch = {global_batch} must be positive")
    lanes = resolve_lanes(lanes, 1, global_batch, skip_samples)
    if lanes == 1:
        total = count_positions(paths, rows)
        check_skip(skip_samples, total)
        return (total - skip_samples) // global_batch
    per_lane = lane_rows(plan_buffers([Path(p) for p in paths], check_seed(seed), shuffle_buffer, rows),
                         lanes)
    check_skip(skip_samples, sum(per_lane))
    return full_batches(per_lane, global_batch, skip_samples)
