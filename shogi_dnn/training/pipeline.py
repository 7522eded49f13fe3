"""tf.data input pipeline over HDF5 shards: whole-chunk reads, seeded shuffles, numpy batching.

The plan (sample groups, chunks, shuffle buffers, read lanes, batch counts) is schedule.py's; this
module streams it. The training *sample stream* of one pass over a sample group is a pure function of
(paths, seed, shuffle_buffer, mirror), never of the global batch, the number of towers or workers:

  1. every shard is cut into its HDF5 chunks (shards.CHUNK_ROWS rows); the chunk list of all shards
     is permuted with the seed (shuffle across shards);
  2. consecutive permuted chunks are grouped into *buffers* of at least `shuffle_buffer` rows; each
     buffer is read (whole compressed chunks, never a whole dataset), its rows are permuted with a
     generator seeded by (seed, buffer index), and with `mirror` a seeded coin flips each board
     left-right (features.mirror_board);
  3. the buffers are dealt round-robin to L *read lanes* (data.read_lanes; buffer i goes to lane
     i % L, keeping its global index i for its seed); a lane's rows are the concatenation of its
     buffers. Global batch s (B = global_batch rows, B % L == 0) is the concatenation, in lane order,
     of rows [s*B/L, (s+1)*B/L) of every lane. With L = 1 the stream is simply the buffers concatenated.
     `skip_samples` (a multiple of L) drops a prefix of the stream: each lane skips skip/L rows (exact
     resume: whole buffers before the resume point are not even read). A pass has
     min over lanes of floor((lane rows - skip/L) / (B/L)) full batches (the rest is dropped), a number
     count_batches computes from the shard metadata and the seed, without reading data.

The stream depends on L (not on the number of towers or workers): keep L fixed to keep the data order.

Policy labels (`policy=True`, a model with a policy head): each row also carries `policy` [int32], the
label of the move played (dataset/policy.py: policy.move_labels of the shards' `move` column, -1 where
there is none), mirrored with its board (policy.mirror_labels) when the mirror coin flips the row. The
column is read only then; it draws no random numbers, so the stream (rows, order, mirror coins) is the
same with and without it.

Batches are cut in numpy and a Python generator yields *whole batches*, never samples (per-sample
generators manage a few thousand positions/s): one call yields the stack of every whole batch a shuffle
buffer completes, [k, batch, ...], which tf.data unbatches into k batch elements in C++; then prefetch.
Batches stay compact (uint8 codes); the model expands them into planes on the device.

Distribution: without an input context each element is a global batch, to be split across towers by
`strategy.experimental_distribute_dataset` (contiguous slices, tower 0 first). With an input context
(`strategy.distribute_datasets_from_function`, one machine or several) worker w of W (L % W == 0)
reads *only* lanes [w*L/W, (w+1)*L/W) (the chunks of the other lanes are never read) and yields, for
each global batch, its share of it (rows [w*B/W, (w+1)*B/W)) as consecutive per-replica batches,
so the towers of the whole cluster together see exactly the stream one machine would see with the
same L. Every worker still opens every shard of the group for its metadata (chunk layout), to plan
the buffers and count the batches. Validation (make_eval_dataset with an input context) likewise gives
worker w only rows [w*N/W, (w+1)*N/W) of the split, in per-replica batches.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
from pathlib import Path

import h5py
import numpy as np
import tensorflow as tf

from shogi_dnn.dataset import features, policy, shards
from shogi_dnn.errors import ConfigError, ShardFormatError
from shogi_dnn.rules import NUM_SQUARES
from shogi_dnn.training import schedule
from shogi_dnn.training.schedule import KEY_POLICY, Chunk

# Datasets read for training/evaluation, and the element signature of a batch.
KEYS = schedule.STREAM_KEYS
POLICY_KEYS = KEYS + (KEY_POLICY,)
_STORED_KEYS = schedule.STORED_KEYS    # the datasets read for them (board and hands are stored packed)
_ROW_SHAPES = {shards.KEY_BOARD: (NUM_SQUARES,), shards.KEY_HANDS: (features.HAND_SIZE,),
               shards.KEY_WIN: (), shards.KEY_PLY: (), shards.KEY_EVAL: ()}
MAX_OPEN_SHARDS = 64                 # HDF5 files a reader keeps open at once

Batch = dict[str, np.ndarray]


class ReadErrors:
    """The shard read errors of the datasets made with it, kept where tf.data cannot carry them.

    A generator's exception reaches the consumer as a TensorFlow error with a traceback in its text (and
    in TensorFlow's log); a dataset given a ReadErrors records the one-line ShardFormatError here and
    ends early instead, and its consumer takes the error when the dataset ends or fails. A dataset made
    without one raises the error through tf.data.
    """

    def __init__(self) -> None:
        self._errors: collections.deque[ShardFormatError] = collections.deque(maxlen=16)

    def record(self, error: ShardFormatError) -> None:
        self._errors.append(error)      # from tf.data's generator thread: deque appends are atomic

    def take(self) -> ShardFormatError | None:
        """The first error recorded since the last call (None: none), clearing the record."""
        first = self._errors[0] if self._errors else None
        self._errors.clear()
        return first


# ----------------------------------------------------------------------------------------------------
# Reading shards


class ShardReader:
    """Reads chunks from shards, keeping up to MAX_OPEN_SHARDS files open (least recently used closed:
    the chunk order visits shards at random, and a group may hold more shards than file handles)."""

    def __init__(self, paths: Sequence[Path], policy_labels: bool = False) -> None:
        self._paths = list(paths)
        self._files: collections.OrderedDict[int, h5py.File] = collections.OrderedDict()
        self._policy = policy_labels
        self._stored = _STORED_KEYS + ((shards.KEY_MOVE,) if policy_labels else ())

    def read(self, chunks: Sequence[Chunk]) -> Batch:
        """The rows of `chunks`, concatenated in order: arrays keyed as KEYS (POLICY_KEYS with policy
        labels: `policy` [n] int32)."""
        parts: dict[str, list[np.ndarray]] = {key: [] for key in self._stored}
        for chunk in chunks:
            f = self._file(chunk.shard)
            for key in self._stored:
                try:
                    parts[key].append(shards.read_stored(f, key, chunk.start, chunk.stop))
                except (OSError, RuntimeError, ValueError, KeyError) as exc:   # a chunk's checksum or filter
                    raise shards.read_error(self._paths[chunk.shard], key, chunk.start, chunk.stop, exc,
                                            _chunk_rows(f, key)) from None
        stored = {key: np.concatenate(arrays) for key, arrays in parts.items()}
        rows = shards.unpack_rows(stored, KEYS)
        if self._policy:
            rows[KEY_POLICY] = policy.move_labels(stored[shards.KEY_MOVE]).astype(np.int32)
        return rows

    def _file(self, index: int) -> h5py.File:
        if index in self._files:
            self._files.move_to_end(index)
        else:
            if len(self._files) >= MAX_OPEN_SHARDS:
                self._files.popitem(last=False)[1].close()
            self._files[index] = shards.open_shard(self._paths[index])
        return self._files[index]

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def _chunk_rows(f: h5py.File, key: str) -> int:
    try:
        return int(f[key].chunks[0])
    except Exception:   # noqa: BLE001 - only for the message
        return shards.CHUNK_ROWS


# ----------------------------------------------------------------------------------------------------
# The training stream


def _shuffle_buffer(rows: Batch, seed: int, index: int, mirror: bool) -> Batch:
    """Permute a buffer's rows (and mirror a seeded half of the boards) with a generator of (seed, index)."""
    rng = np.random.default_rng([seed, schedule.SEED_BUFFER, index])
    n = len(rows[shards.KEY_WIN])
    perm = rng.permutation(n)
    out = {key: value[perm] for key, value in rows.items()}
    if mirror:
        flip = rng.random(n) < 0.5
        out[shards.KEY_BOARD][flip] = features.mirror_board(out[shards.KEY_BOARD][flip])
        if KEY_POLICY in out:       # the move mirrored with its board
            out[KEY_POLICY][flip] = policy.mirror_labels(out[KEY_POLICY][flip])
    return out


def iter_stream(paths: Sequence[Path], *, seed: int, shuffle_buffer: int, mirror: bool,
                skip_samples: int = 0, lanes: int = 1, lane: int = 0,
                rows: tuple[int, int] | None = None, policy_labels: bool = False) -> Iterator[Batch]:
    """The rows of read lane `lane` of `lanes` (with lanes = 1: the sample stream of one pass; see the
    module docstring), as consecutive blocks of rows.

    Yields:
        dicts keyed as KEYS: board [n, 81] uint8, hands [n, 14] uint8, win [n] float32, ply [n] int16,
        eval [n] int16 (features.EVAL_NONE where none), with policy_labels policy [n] int32; their
        concatenation is the lane's rows without their first `skip_samples`.
    """
    buffers = schedule.plan_buffers(paths, seed, shuffle_buffer, rows)
    schedule.check_skip(skip_samples, schedule.lane_rows(buffers, lanes)[lane])
    reader = ShardReader(paths, policy_labels)
    try:
        yield from _iter_lane(reader, buffers, lanes, lane, seed=seed, mirror=mirror, skip=skip_samples)
    finally:
        reader.close()


def _iter_lane(reader: ShardReader, buffers: Sequence[tuple[Chunk, ...]], lanes: int, lane: int, *,
               seed: int, mirror: bool, skip: int) -> Iterator[Batch]:
    """Blocks of rows of one lane without its first `skip` rows; buffers before them are not read."""
    indices = range(lane, len(buffers), lanes)
    sizes = np.asarray([sum(len(c) for c in buffers[i]) for i in indices], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    first = int(np.searchsorted(starts, skip, side="right") - 1)   # == len(indices) past the lane's end
    for position in range(first, len(indices)):
        index = indices[position]
        rows = _shuffle_buffer(reader.read(buffers[index]), seed, index, mirror)
        offset = skip - int(starts[position]) if position == first else 0
        yield {key: value[offset:] for key, value in rows.items()} if offset else rows


def _stack_batches(blocks: Iterator[Batch], batch: int, keep_partial: bool) -> Iterator[Batch]:
    """Cut a stream of row blocks into whole batches, carrying the remainder over to the next block.

    Yields stacks of k >= 1 consecutive batches, [k, batch, ...] (tf.data unbatches them in C++: one
    Python call per block, not per batch), and with keep_partial a final [1, r, ...] stack of r < batch.
    """
    carry: Batch | None = None
    for block in blocks:
        if carry is not None:
            block = {key: np.concatenate([carry[key], block[key]]) for key in block}
        n = len(block[shards.KEY_WIN])
        k = n // batch
        if k:
            yield {key: value[:k * batch].reshape((k, batch, *value.shape[1:]))
                   for key, value in block.items()}
        carry = {key: value[k * batch:] for key, value in block.items()} if k * batch < n else None
    if keep_partial and carry is not None:
        yield {key: value[None] for key, value in carry.items()}


def _merge_lanes(lanes: list[Iterator[Batch]], lane_batch: int, limit: int) -> Iterator[Batch]:
    """Read lanes in lockstep into batch stacks [k, len(lanes) * lane_batch, ...]: batch s is the
    concatenation, in lane order, of rows [s * lane_batch, (s + 1) * lane_batch) of every lane.
    Stops after `limit` batches (nothing more is read) or when a lane runs out."""
    pending: list[Batch | None] = [None] * len(lanes)
    done = 0
    while done < limit:
        ready: list[Batch] = []
        for i, blocks in enumerate(lanes):
            lane = pending[i]
            while lane is None or len(lane[shards.KEY_WIN]) < lane_batch:
                block = next(blocks, None)
                if block is None:
                    return
                lane = block if lane is None else {
                    key: np.concatenate([lane[key], block[key]]) for key in block}
            pending[i] = lane
            ready.append(lane)
        k = min(min(len(p[shards.KEY_WIN]) for p in ready) // lane_batch, limit - done)
        yield {key: np.concatenate([p[key][:k * lane_batch].reshape((k, lane_batch, *p[key].shape[1:]))
                                    for p in ready], axis=1) for key in ready[0]}
        pending = [{key: value[k * lane_batch:] for key, value in p.items()} for p in ready]
        done += k


def _from_stacks(generate, batch: int | None, policy_labels: bool = False) -> tf.data.Dataset:
    """Dataset of batches from a generator of batch stacks [k, batch, ...]; then prefetch."""
    dtypes = {key: tf.as_dtype(shards.POSITION_SCHEMA[key][1]) for key in KEYS}
    signature = {key: tf.TensorSpec((None, batch, *_ROW_SHAPES[key]), dtypes[key], name=key) for key in KEYS}
    if policy_labels:
        signature[KEY_POLICY] = tf.TensorSpec((None, batch), tf.int32, name=KEY_POLICY)
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return dataset.unbatch().prefetch(tf.data.AUTOTUNE)


def make_train_dataset(paths: Sequence[Path], *, global_batch: int, seed: int, shuffle_buffer: int,
                       mirror: bool, skip_samples: int = 0, lanes: int = 0,
                       input_context: tf.distribute.InputContext | None = None,
                       rows: tuple[int, int] | None = None, policy_labels: bool = False,
                       errors: ReadErrors | None = None) -> tf.data.Dataset:
    """One shuffled pass over a sample group's shards, in global batches (drop_remainder).

    Args:
        paths: the group's shard files, in manifest order.
        global_batch: positions per batch over all towers (and workers).
        seed: the stream seed (e.g. stage_seed(run seed, epoch, group)); must be >= 0.
        shuffle_buffer: rows per shuffle buffer (rounded up to whole chunks).
        mirror: flip a seeded half of the boards left-right.
        skip_samples: drop this prefix of the stream (resume; any multiple of the lanes, not only
            whole batches).
        lanes: read lanes L (data.read_lanes); 0 = one per worker (input pipeline), 1 without a context.
        input_context: from distribute_datasets_from_function: read only this worker's lanes and yield
            its per-replica slices.
        rows: (start, stop): only these rows of the shards concatenated (a sample group); default all.
        policy_labels: add the `policy` labels (module docstring); the stream is the same.
        errors: where a shard read error goes (the dataset then ends early); None: raised through tf.data.
    Returns:
        Dataset of dicts: board [B, 81] uint8, hands [B, 14] uint8, win [B] float32, ply [B] int16,
        eval [B] int16 (the record's evaluation, side to move's view; features.EVAL_NONE where none),
        with policy_labels policy [B] int32 (-1: no move),
        B = global_batch (or the per-replica batch with an input context).
    Raises:
        ConfigError: bad batch, lanes or skip; ShardFormatError: a shard is unreadable.
    """
    _check_batch(global_batch, input_context)
    workers, worker = (1, 0) if input_context is None else (input_context.num_input_pipelines,
                                                            input_context.input_pipeline_id)
    lanes = schedule.resolve_lanes(lanes, workers, global_batch, skip_samples)
    paths = [Path(p) for p in paths]
    schedule.check_seed(seed)
    buffers = schedule.plan_buffers(paths, seed, shuffle_buffer, rows)       # shard metadata only
    lane_rows = schedule.lane_rows(buffers, lanes)
    schedule.check_skip(skip_samples, sum(lane_rows))
    batches = schedule.full_batches(lane_rows, global_batch, skip_samples)  # the same on every worker
    mine = range(worker * lanes // workers, (worker + 1) * lanes // workers)
    batch = global_batch if input_context is None else input_context.get_per_replica_batch_size(global_batch)

    def generate() -> Iterator[Batch]:
        reader = ShardReader(paths, policy_labels)
        try:
            streams = [_iter_lane(reader, buffers, lanes, lane, seed=seed, mirror=mirror,
                                  skip=skip_samples // lanes) for lane in mine]
            for stack in _merge_lanes(streams, global_batch // lanes, batches):
                # this worker's share [k, global_batch / workers] -> consecutive per-replica batches
                yield {key: value.reshape((-1, batch, *value.shape[2:])) for key, value in stack.items()}
        except ShardFormatError as exc:
            _end_on(exc, errors)
        finally:
            reader.close()

    return _from_stacks(generate, batch, policy_labels)


def _end_on(error: ShardFormatError, errors: ReadErrors | None) -> None:
    """A generator's read error: recorded in `errors` (the consumer sees the data end and reports it), or
    raised without one."""
    if errors is None:
        raise error
    errors.record(error)


def _check_batch(global_batch: int, input_context: tf.distribute.InputContext | None) -> None:
    if global_batch < 1:
        raise ConfigError(f"global_batch = {global_batch} must be positive")
    if input_context is not None and global_batch % input_context.num_replicas_in_sync:
        raise ConfigError(f"global_batch = {global_batch} is not divisible by "
                          f"{input_context.num_replicas_in_sync} replicas")


# ----------------------------------------------------------------------------------------------------
# Evaluation and counting


def iter_sequential(paths: Sequence[Path], start: int, stop: int,
                    policy_labels: bool = False) -> Iterator[Batch]:
    """Rows [start, stop) of the shards in file order, chunk by chunk; chunks outside them are not read
    (with policy_labels, also the `policy` column)."""
    reader = ShardReader(paths, policy_labels)
    first = 0                                   # stream index of the chunk's first row
    try:
        for chunk in schedule.list_chunks(paths):
            lo, hi = max(start - first, 0), min(stop - first, len(chunk))
            first += len(chunk)
            if lo < hi:
                yield {key: value[lo:hi] for key, value in reader.read([chunk]).items()}
            if first >= stop:
                return
    finally:
        reader.close()


def make_eval_dataset(paths: Sequence[Path], *, global_batch: int, max_positions: int = 0,
                      input_context: tf.distribute.InputContext | None = None,
                      policy_labels: bool = False, errors: ReadErrors | None = None) -> tf.data.Dataset:
    """All rows of the shards in file order (no shuffle), in batches; the last may be partial.

    Args:
        max_positions: only the first this many rows (0 = all), e.g. DataConfig.validation_positions.
        input_context: from distribute_datasets_from_function: worker w of W reads only rows
            [w*N/W, (w+1)*N/W) of the N rows and yields them in per-replica batches (the last partial;
            a worker or tower that runs out first gets empty batches from tf.distribute, so every row
            is evaluated once and the towers' sums add up to the whole split).
        policy_labels: add the `policy` labels (as make_train_dataset).
        errors: where a shard read error goes (as make_train_dataset).
    Returns:
        Dataset of dicts as make_train_dataset's, batch dimension None (global batches without an input
        context, per-replica batches with one).
    """
    _check_batch(global_batch, input_context)
    paths = [Path(p) for p in paths]
    total = schedule.count_positions(paths)   # fail now, with the file name, rather than inside the iterator
    total = min(total, max_positions) if max_positions > 0 else total
    workers, worker = (1, 0) if input_context is None else (input_context.num_input_pipelines,
                                                            input_context.input_pipeline_id)
    start, stop = worker * total // workers, (worker + 1) * total // workers
    batch = global_batch if input_context is None else input_context.get_per_replica_batch_size(global_batch)

    def generate() -> Iterator[Batch]:
        try:
            yield from _stack_batches(iter_sequential(paths, start, stop, policy_labels), batch,
                                      keep_partial=True)
        except ShardFormatError as exc:
            _end_on(exc, errors)

    return _from_stacks(generate, None, policy_labels)


