"""Input pipeline: the sample stream depends on (paths, seed) only; resume, mirroring, groups, eval."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from shogi_dnn.dataset import features, shards
from shogi_dnn.errors import ConfigError, ShardFormatError
from shogi_dnn.training import pipeline, schedule
from shogi_dnn.training.devices import make_strategy
from tests.support.shardgen import make_dataset, split_paths

TRAIN_SIZES = [300, 200, 250]        # 750 rows, chunks of 64 rows: 13 chunks across 3 shards
TOTAL = sum(TRAIN_SIZES)
BUFFER = 128                         # two chunks per shuffle buffer


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> shards.Manifest:
    return make_dataset(tmp_path_factory.mktemp("shards"), train=TRAIN_SIZES, validation=[130], chunk_rows=64)


@pytest.fixture(scope="module")
def paths(dataset: shards.Manifest) -> list:
    return split_paths(dataset, "train")


def _concat(blocks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([b[key] for b in blocks]) if blocks else np.zeros(0) for key in pipeline.KEYS}


def _stream(paths, seed=1, mirror=False, skip=0) -> dict[str, np.ndarray]:
    return _concat(list(pipeline.iter_stream(paths, seed=seed, shuffle_buffer=BUFFER, mirror=mirror,
                                             skip_samples=skip)))


def _collect(dataset: tf.data.Dataset) -> dict[str, np.ndarray]:
    return _concat(list(dataset.as_numpy_iterator()))


def _train(paths, batch, seed=1, mirror=False, skip=0, **kwargs) -> tf.data.Dataset:
    return pipeline.make_train_dataset(paths, global_batch=batch, seed=seed, shuffle_buffer=BUFFER,
                                       mirror=mirror, skip_samples=skip, **kwargs)


def _originals(dataset: shards.Manifest) -> dict[str, np.ndarray]:
    data = [shards.read_positions(p).arrays for p in split_paths(dataset, "train")]
    return {key: np.concatenate([d[key] for d in data]) for key in pipeline.KEYS}


def test_every_row_exactly_once_per_pass_and_shuffled(paths):
    stream = _stream(paths)
    assert len(stream["ply"]) == TOTAL
    np.testing.assert_array_equal(np.sort(stream["ply"]), np.arange(TOTAL))
    # Shuffled across shards: the first buffer already mixes rows of different chunks, out of order.
    assert not np.array_equal(stream["ply"], np.arange(TOTAL))
    first = stream["ply"][:BUFFER]
    assert np.ptp(first) > 64 and not np.all(np.diff(first) > 0)


def test_rows_arrive_intact(dataset, paths):
    original = _originals(dataset)
    stream = _stream(paths)
    for key in pipeline.KEYS:
        np.testing.assert_array_equal(stream[key], original[key][stream["ply"]])


def test_reader_bounds_open_files(paths, monkeypatch):
    expected = _stream(paths)
    monkeypatch.setattr(pipeline, "MAX_OPEN_SHARDS", 1)
    reader = pipeline.ShardReader(paths)
    rows = reader.read([pipeline.Chunk(0, 0, 10), pipeline.Chunk(2, 5, 9), pipeline.Chunk(0, 64, 70)])
    assert len(reader._files) == 1
    reader.close()
    np.testing.assert_array_equal(rows["ply"], np.r_[0:10, 505:509, 64:70])
    np.testing.assert_array_equal(_stream(paths)["board"], expected["board"])


@pytest.mark.parametrize("compression", ["gzip", "lzf", "none"])
def test_the_stream_is_the_same_with_any_compression(paths, tmp_path, compression):
    """The shards rewritten with `convert --compression gzip|lzf|none`: the same stream as zstd's (the
    default)."""
    copies = []
    for path in paths:
        with shards.open_shard(path) as f:
            stored = {key: shards.read_stored(f, key, 0, None)
                      for key in (*shards.STORED_SCHEMA, shards.KEY_EVAL)}
        copies.append(tmp_path / os.path.basename(path))
        shards.write_shard(copies[-1], "train", stored, shards.read_games(path), chunk_rows=64,
                           compression=compression)
        with shards.open_shard(copies[-1]) as f:
            assert shards.shard_compression(f) == compression
    expected, got = _stream(paths), _stream(copies)
    for key in pipeline.KEYS:
        np.testing.assert_array_equal(got[key], expected[key])


def test_same_seed_same_stream_other_seed_other_stream(paths):
    a, b, c = _stream(paths, seed=5), _stream(paths, seed=5), _stream(paths, seed=6)
    np.testing.assert_array_equal(a["ply"], b["ply"])
    assert not np.array_equal(a["ply"], c["ply"])


@pytest.mark.parametrize("batch", [1, 16, 50, 128, 300])   # 300: a batch spans several buffers
def test_batches_follow_the_stream_whatever_the_batch(paths, batch):
    stream = _stream(paths)
    got = _collect(_train(paths, batch))
    full = TOTAL - TOTAL % batch            # drop_remainder
    assert len(got["ply"]) == full == schedule.count_batches(paths, batch) * batch
    for key in pipeline.KEYS:
        np.testing.assert_array_equal(got[key], stream[key][:full])


def test_element_spec(paths):
    spec = _train(paths, 32).element_spec
    assert spec["board"].shape == (32, 81) and spec["board"].dtype == tf.uint8
    assert spec["hands"].shape == (32, features.HAND_SIZE) and spec["hands"].dtype == tf.uint8
    assert spec["win"].shape == (32,) and spec["win"].dtype == tf.float32
    assert spec["ply"].shape == (32,) and spec["ply"].dtype == tf.int16


@pytest.mark.parametrize("skip", [0, 1, 37, 64, 128, 300, 749, 750])
def test_skip_samples_gives_exactly_the_suffix(paths, skip):
    stream = _stream(paths)
    np.testing.assert_array_equal(_stream(paths, skip=skip)["ply"], stream["ply"][skip:])
    batch = 25
    got = _collect(_train(paths, batch, skip=skip))
    expected = stream["ply"][skip:][:(TOTAL - skip) // batch * batch]
    np.testing.assert_array_equal(got["ply"], expected)
    assert schedule.count_batches(paths, batch, skip) == (TOTAL - skip) // batch


def test_resume_with_another_batch_continues_the_stream(paths):
    """Resuming after 3 batches of 40 with batches of 30 (say, fewer GPUs) sees the same sample order."""
    stream = _stream(paths)
    first = _collect(_train(paths, 40).take(3))["ply"]
    rest = _collect(_train(paths, 30, skip=120))["ply"]
    np.testing.assert_array_equal(np.concatenate([first, rest]), stream["ply"][:120 + len(rest)])


def test_skip_out_of_range_is_a_config_error(paths):
    with pytest.raises(ConfigError, match="skip_samples = 751"):
        _train(paths, 10, skip=TOTAL + 1)
    with pytest.raises(ConfigError, match="global_batch"):
        _train(paths, 0)


def test_mirror_is_deterministic_and_correct(dataset, paths):
    original = _originals(dataset)
    plain, a, b = _stream(paths), _stream(paths, mirror=True), _stream(paths, mirror=True)
    for key in pipeline.KEYS:
        np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_array_equal(a["ply"], plain["ply"])     # mirroring does not change the order
    board = original["board"][a["ply"]]
    mirrored = features.mirror_board(board)
    flipped = np.all(a["board"] == mirrored, axis=1) & ~np.all(a["board"] == board, axis=1)
    kept = np.all(a["board"] == board, axis=1)
    assert np.all(flipped | kept)
    assert 0.35 * TOTAL < flipped.sum() < 0.65 * TOTAL
    np.testing.assert_array_equal(a["hands"], original["hands"][a["ply"]])
    np.testing.assert_array_equal(a["win"], original["win"][a["ply"]])
    # After a resume the same boards are mirrored.
    np.testing.assert_array_equal(_stream(paths, mirror=True, skip=100)["board"], a["board"][100:])


@pytest.mark.parametrize("replicas", [2, 4])
def test_towers_see_the_same_stream_as_one_device(paths, replicas):
    strategy, batch = make_strategy(simulate_devices=replicas), 40
    assert strategy.num_replicas_in_sync == replicas
    expected = _stream(paths)["ply"][:TOTAL // batch * batch].reshape(-1, batch)
    by_rebatch = strategy.experimental_distribute_dataset(_train(paths, batch))
    by_context = strategy.distribute_datasets_from_function(
        lambda ctx: _train(paths, batch, input_context=ctx))
    for distributed in (by_rebatch, by_context):
        steps = [np.concatenate([t.numpy() for t in strategy.experimental_local_results(x["ply"])])
                 for x in distributed]
        np.testing.assert_array_equal(np.stack(steps), expected)


def _lane_reference(paths, lanes, batch, seed=1, mirror=False, skip=0) -> np.ndarray:
    """The global batches [n, batch] of `ply` with `lanes` read lanes, built from the one-lane stream:
    its buffers dealt round-robin to the lanes, batch s = rows [s*B/L, (s+1)*B/L) of every lane."""
    stream = _stream(paths, seed=seed, mirror=mirror)["ply"]
    sizes = [sum(len(c) for c in b) for b in schedule.plan_buffers(paths, seed, BUFFER)]
    blocks = np.split(stream, np.cumsum(sizes)[:-1])
    rows = [np.concatenate(blocks[lane::lanes] or [stream[:0]])[skip // lanes:] for lane in range(lanes)]
    width = batch // lanes
    n = min(len(r) for r in rows) // width
    return np.concatenate([r[:n * width].reshape(n, width) for r in rows], axis=1)


def _chunk_of_row(paths) -> dict[int, pipeline.Chunk]:
    """Global row number (the test data's ply) -> the chunk holding it."""
    chunks = schedule.list_chunks(paths)
    offsets = np.concatenate([[0], np.cumsum(TRAIN_SIZES)])
    return {int(offsets[c.shard]) + row: c for c in chunks for row in range(c.start, c.stop)}


def test_one_lane_is_the_plain_stream(paths):
    whole = _stream(paths)["ply"][:TOTAL // 40 * 40]
    np.testing.assert_array_equal(_collect(_train(paths, 40, lanes=1))["ply"], whole)
    np.testing.assert_array_equal(_lane_reference(paths, 1, 40), whole.reshape(-1, 40))


@pytest.mark.parametrize(("lanes", "workers", "skip"),
                         [(2, 2, 0), (2, 1, 0), (4, 2, 12), (4, 4, 0), (8, 2, 0), (2, 2, 100)])
def test_workers_read_only_their_lanes_and_together_see_the_one_machine_batches(paths, monkeypatch, lanes,
                                                                                workers, skip):
    """W workers with two towers each: worker w reads only the chunks of lanes [wL/W, (w+1)L/W) and
    yields rows [40w/W, 40(w+1)/W) of each global batch of 40, the batches of one machine with L lanes."""
    batch, reads = 40, []
    expected = _lane_reference(paths, lanes, batch, skip=skip)
    original_read = pipeline.ShardReader.read
    monkeypatch.setattr(pipeline.ShardReader, "read", lambda self, chunks: reads[-1].update(chunks) or
                        original_read(self, chunks))
    reads.append(set())
    one_machine = _collect(_train(paths, batch, skip=skip, lanes=lanes))["ply"].reshape(-1, batch)
    np.testing.assert_array_equal(one_machine, expected)
    counted = schedule.count_batches(paths, batch, skip, lanes=lanes, seed=1, shuffle_buffer=BUFFER)
    assert counted == len(expected)
    buffers = schedule.plan_buffers(paths, 1, BUFFER)
    shares = []
    reads.clear()
    for worker in range(workers):
        reads.append(set())
        ctx = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=worker,
                                         num_replicas_in_sync=2 * workers)
        shares.append(_collect(_train(paths, batch, skip=skip, lanes=lanes, input_context=ctx))["ply"]
                      .reshape(-1, batch // workers))
        own = {c for lane in range(worker * lanes // workers, (worker + 1) * lanes // workers)
               for b in buffers[lane::lanes] for c in b}
        assert reads[-1] <= own, f"worker {worker} read chunks of another worker's lanes"
    np.testing.assert_array_equal(np.concatenate(shares, axis=1), expected)
    assert all(not a & b for i, a in enumerate(reads) for b in reads[i + 1:])         # disjoint
    chunk_of = _chunk_of_row(paths)
    assert {chunk_of[int(p)] for p in expected.ravel()} <= set().union(*reads)      # cover what the pass uses
    if skip == 0 and lanes == 2:
        assert set().union(*reads) == set(schedule.list_chunks(paths))


@pytest.mark.parametrize("lanes", [1, 2, 4, 5])
@pytest.mark.parametrize("skip", [0, 20, 100, 400, 740])
def test_count_batches_with_lanes_matches_the_batches_yielded(paths, lanes, skip):
    for batch in (20, 40, 100):
        got = len(list(_train(paths, batch, skip=skip, lanes=lanes).as_numpy_iterator()))
        assert schedule.count_batches(paths, batch, skip, lanes=lanes, seed=1, shuffle_buffer=BUFFER) == got
        assert got == len(_lane_reference(paths, lanes, batch, skip=skip))


def test_stage_plan_counts_updates_with_lanes(dataset):
    from shogi_dnn.config import from_dict
    from shogi_dnn.training.stages import StagePlan

    config = from_dict({"data": {"num_groups": 1, "shuffle_buffer": BUFFER}})
    assert StagePlan(dataset, config, 40).lanes == 1
    assert StagePlan(dataset, config, 40, num_workers=2).lanes == 2
    four = from_dict({"data": {"num_groups": 1, "shuffle_buffer": BUFFER, "read_lanes": 4}})
    plan = StagePlan(dataset, four, 40, num_workers=2)
    stage = plan.stage(0, 0)
    assert plan.lanes == stage.lanes == 4
    for position in (0, 80, 400):
        got = len(list(pipeline.make_train_dataset(stage.paths, global_batch=40, seed=stage.seed, lanes=4,
                                                   shuffle_buffer=BUFFER, mirror=False,
                                                   skip_samples=position).as_numpy_iterator()))
        assert stage.remaining(position) == got
    assert stage.updates == stage.remaining(0) < TOTAL // 40          # uneven lanes: fewer full batches
    with pytest.raises(ConfigError,
                       match=r"3 read lanes \(data.read_lanes\) are not a multiple of the 2 workers"):
        StagePlan(dataset, from_dict({"data": {"num_groups": 1, "read_lanes": 3}}), 40, num_workers=2)


def test_lane_errors_name_the_numbers(paths):
    with pytest.raises(ConfigError, match="global_batch = 30 is not divisible by 4 read lanes"):
        _train(paths, 30, lanes=4)
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0, num_replicas_in_sync=2)
    with pytest.raises(ConfigError, match="3 read lanes .* not a multiple of the 2 workers"):
        _train(paths, 30, lanes=3, input_context=ctx)
    with pytest.raises(ConfigError, match="skip_samples = 10 is not a multiple of the 4 read lanes"):
        _train(paths, 40, lanes=4, skip=10)
    with pytest.raises(ConfigError, match="skip_samples = 10 is not a multiple of the 4 read lanes"):
        schedule.count_batches(paths, 40, 10, lanes=4, seed=1, shuffle_buffer=BUFFER)
    with pytest.raises(ConfigError, match="read_lanes = -1"):
        _train(paths, 40, lanes=-1)


@pytest.mark.parametrize("rows", [(0, TOTAL), (100, 400), (250, 251), (64, 128), (37, 700)])
def test_a_row_span_streams_exactly_its_rows_seeded_and_resumable(paths, rows):
    """A sample group is a row span of the shards (cut anywhere, even inside a chunk): its stream holds
    each of its rows once, is a function of the seed, and a resume continues it exactly."""
    def stream(seed=1, skip=0):
        return _concat(list(pipeline.iter_stream(paths, seed=seed, shuffle_buffer=BUFFER, mirror=False,
                                                 skip_samples=skip, rows=rows)))["ply"]
    start, stop = rows
    whole = stream()
    np.testing.assert_array_equal(np.sort(whole), np.arange(start, stop))
    np.testing.assert_array_equal(stream(), whole)
    assert schedule.count_positions(paths, rows) == stop - start
    for skip in (0, 1, (stop - start) // 2, stop - start):
        np.testing.assert_array_equal(stream(skip=skip), whole[skip:])
    batch = 20
    got = _collect(_train(paths, batch, rows=rows))["ply"]
    np.testing.assert_array_equal(got, whole[:(stop - start) // batch * batch])
    assert schedule.count_batches(paths, batch, rows=rows) == len(got) // batch
    if stop - start == TOTAL:                 # the whole span is the plain stream
        np.testing.assert_array_equal(whole, _stream(paths)["ply"])


@pytest.mark.parametrize("lanes", [2, 4])
def test_a_row_span_with_lanes_counts_what_it_yields(paths, lanes):
    rows = (37, 700)
    for skip in (0, 40, 200):
        got = len(list(_train(paths, 40, skip=skip, lanes=lanes, rows=rows).as_numpy_iterator()))
        assert schedule.count_batches(paths, 40, skip, lanes=lanes, seed=1, shuffle_buffer=BUFFER,
                                      rows=rows) == got
        assert got > 0


def test_groups_of_a_stage_plan_cover_the_split_once(dataset):
    """Four groups on three shards (cut by rows): every training row in exactly one group's stream."""
    from shogi_dnn.config import from_dict
    from shogi_dnn.training.stages import StagePlan

    plan = StagePlan(dataset, from_dict({"data": {"num_groups": 4, "shuffle_buffer": BUFFER}}), 40)
    seen = []
    for index in range(4):
        stage = plan.stage(0, index)
        starts = np.concatenate([[0], np.cumsum(TRAIN_SIZES)])
        offsets = {p: int(o) for p, o in zip(paths_of(dataset), starts)}
        first = offsets[stage.paths[0]]
        rows = _concat(list(pipeline.iter_stream(stage.paths, seed=stage.seed, shuffle_buffer=BUFFER,
                                                 mirror=False, rows=stage.rows)))["ply"]
        assert len(rows) in (TOTAL // 4, TOTAL // 4 + 1) and rows.min() >= first
        seen.append(rows)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(TOTAL))


def paths_of(dataset: shards.Manifest) -> list:
    return split_paths(dataset, "train")


def test_eval_dataset_keeps_every_row_in_order(dataset):
    paths = split_paths(dataset, "validation")
    batches = list(pipeline.make_eval_dataset(paths, global_batch=64).as_numpy_iterator())
    assert [len(b["ply"]) for b in batches] == [64, 64, 2]
    np.testing.assert_array_equal(np.concatenate([b["ply"] for b in batches]), np.arange(130))
    capped = list(pipeline.make_eval_dataset(paths, global_batch=64, max_positions=100).as_numpy_iterator())
    assert [len(b["ply"]) for b in capped] == [64, 36]
    wide = list(pipeline.make_eval_dataset(paths, global_batch=100).as_numpy_iterator())   # > one chunk
    assert [len(b["ply"]) for b in wide] == [100, 30]
    np.testing.assert_array_equal(np.concatenate([b["ply"] for b in wide]), np.arange(130))


def test_eval_dataset_worker_reads_only_its_rows(dataset, monkeypatch):
    """With an input context, worker w of W yields rows [w*N/W, (w+1)*N/W) in per-replica batches and
    reads only the chunks holding them (130 validation rows, chunks of 64)."""
    paths = split_paths(dataset, "validation")
    read: list[tuple[int, int]] = []
    original = pipeline.ShardReader.read
    monkeypatch.setattr(pipeline.ShardReader, "read",
                        lambda self, chunks: read.extend((c.start, c.stop) for c in chunks)
                        or original(self, chunks))
    got = []
    for worker in range(2):
        read.clear()
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                         num_replicas_in_sync=4)
        eval_data = pipeline.make_eval_dataset(paths, global_batch=40, input_context=ctx)
        batches = list(eval_data.as_numpy_iterator())
        assert all(len(b["ply"]) <= 10 for b in batches)
        got.append(np.concatenate([b["ply"] for b in batches]))
        assert read == ([(0, 64), (64, 128)] if worker == 0 else [(64, 128), (128, 130)])
    np.testing.assert_array_equal(got[0], np.arange(65))
    np.testing.assert_array_equal(got[1], np.arange(65, 130))
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    capped = list(pipeline.make_eval_dataset(paths, global_batch=40, max_positions=100,
                                             input_context=ctx).as_numpy_iterator())
    np.testing.assert_array_equal(np.concatenate([b["ply"] for b in capped]), np.arange(50, 100))


def test_eval_dataset_from_function_evaluates_every_row_once(dataset):
    """Per-replica batches under 4 towers, 130 rows in batches of 8 (2 a tower): the last step has data
    for only some towers; tf.distribute gives the others empty batches and every row counts once."""
    strategy = make_strategy(simulate_devices=4)
    paths = split_paths(dataset, "validation")
    data = strategy.distribute_datasets_from_function(
        lambda ctx: pipeline.make_eval_dataset(paths, global_batch=8, input_context=ctx))
    plies = []
    for batch in data:
        plies.extend(np.concatenate([t.numpy() for t in strategy.experimental_local_results(batch["ply"])]))
    assert sorted(plies) == list(range(130))


def test_corrupt_shard_names_the_file(tmp_path):
    bad = tmp_path / "train-00000.h5"
    bad.write_bytes(b"not hdf5")
    with pytest.raises(ShardFormatError, match="train-00000.h5"):
        _train([bad], 10)


def test_a_read_error_belongs_to_the_dataset_that_met_it(tmp_path):
    """A damaged chunk ends its dataset early, recorded in that dataset's ReadErrors alone; a dataset made
    without one raises it through tf.data."""
    import h5py

    make_dataset(tmp_path, train=[128], validation=[128], chunk_rows=64)
    bad, good = tmp_path / "train-00000.h5", tmp_path / "validation-00000.h5"
    with h5py.File(bad, "r") as f:
        info = f["pieces"].id.get_chunk_info(1)                 # rows 64-127
    data = bytearray(bad.read_bytes())
    data[info.byte_offset + info.size // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    damaged, intact = pipeline.ReadErrors(), pipeline.ReadErrors()
    rows = pipeline.make_eval_dataset([bad], global_batch=32, errors=damaged).as_numpy_iterator()
    other = pipeline.make_eval_dataset([good], global_batch=32, errors=intact).as_numpy_iterator()
    assert len(list(rows)) == 2 and len(list(other)) == 4      # the damaged one ends after its first chunk
    assert intact.take() is None
    assert re.search(r"train-00000.h5: rows 64-127 \(chunk 1\) of dataset 'pieces'", str(damaged.take()))
    assert damaged.take() is None                               # taken: cleared
    with pytest.raises(tf.errors.OpError, match=r"train-00000.h5: rows 64-127"):
        list(pipeline.make_eval_dataset([bad], global_batch=32).as_numpy_iterator())


_WORKER = """
import json, os, sys
import numpy as np
import tensorflow as tf
from shogi_dnn.training import pipeline
paths, out, batch = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
dataset = strategy.distribute_datasets_from_function(
    lambda ctx: pipeline.make_train_dataset(paths, global_batch=batch, seed=1, shuffle_buffer=128,
                                            mirror=True, skip_samples=10, input_context=ctx))
steps = [np.concatenate([t.numpy() for t in strategy.experimental_local_results(x["ply"])]).tolist()
         for x in dataset]
validation = strategy.distribute_datasets_from_function(
    lambda ctx: pipeline.make_eval_dataset(json.loads(sys.argv[4]), global_batch=batch, max_positions=121,
                                           input_context=ctx))
evaluated = [np.concatenate([t.numpy() for t in strategy.experimental_local_results(x["ply"])]).tolist()
             for x in validation]
json.dump({"train": steps, "validation": evaluated}, open(out, "w"))
"""


@pytest.mark.slow
def test_two_worker_cluster_sees_the_one_machine_stream(dataset, paths, tmp_path):
    """Two MultiWorkerMirroredStrategy processes on 127.0.0.1: worker w's tower gets rows [20w, 20w+20)
    of every global batch of 40, reading only its read lane (auto: one per worker), so together they see
    exactly the single-machine stream with 2 lanes. Validation (121 of 130 rows): worker 0 reads rows
    0..59 (3 batches of 20), worker 1 rows 60..120 (4, the last of 1 row); for the 4th step worker 0's
    tower gets an empty batch, and every row is seen once."""
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    procs = []
    for index in range(2):
        task = {"type": "worker", "index": index}
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": task}),
               "PYTHONPATH": os.pathsep.join(sys.path)}
        procs.append(subprocess.Popen([sys.executable, str(script), json.dumps([str(p) for p in paths]),
                                       str(tmp_path / f"w{index}.json"), "40",
                                       json.dumps([str(p) for p in split_paths(dataset, "validation")])],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
    results = [json.loads((tmp_path / f"w{i}.json").read_text()) for i in range(2)]
    halves = [np.asarray(r["train"]) for r in results]
    assert [len(r["validation"]) for r in results] == [4, 4]
    assert [len(step) for step in results[0]["validation"]] == [20, 20, 20, 0]
    assert [len(step) for step in results[1]["validation"]] == [20, 20, 20, 1]
    assert sorted(v for r in results for step in r["validation"] for v in step) == list(range(121))
    expected = _lane_reference(paths, 2, 40, mirror=True, skip=10)
    assert len(expected) > 10
    np.testing.assert_array_equal(np.concatenate(halves, axis=1), expected)
