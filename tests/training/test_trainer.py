"""Staged trainer: stage/group bookkeeping, metrics and checkpoints on disk, tower-count independence,
accumulation, exact resume (after a kill and after a stop request, also on another tower count)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from shogi_dnn.config import Config, from_dict
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.training import checkpoints
from shogi_dnn.training.assembly import assemble_run
from shogi_dnn.training.devices import make_strategy
from shogi_dnn.training.model import load_model
from shogi_dnn.training.optimizer import build_optimizer
from shogi_dnn.training.resume import StartOptions
from shogi_dnn.training.stages import StagePlan, TrainState
from shogi_dnn.training.trainer import Trainer
from tests.support.shardgen import make_dataset


def tiny_config(**train: int | bool) -> Config:
    """A 1-block, 8-filter network without batch-norm; 2 groups; a few steps of global batch 32."""
    settings = {"global_batch": 32, "epochs": 1, "seed": 3, "log_every_steps": 2, "checkpoint_every_steps": 2,
                "keep_checkpoints": 20, "max_steps_per_stage": 4}
    settings.update(train)
    return from_dict({"model": {"blocks": 1, "filters": 8, "value_hidden": 8, "batch_norm": "none"},
                      "optim": {"lr": 0.05, "lr_scaling": "none", "base_global_batch": 32,
                                "warmup_samples": 64, "clip_global_norm": 5.0},
                      "data": {"num_groups": 2, "shuffle_buffer": 128, "validation_positions": 96},
                      "train": settings})


def make_trainer(config: Config, data: Path, run_dir: Path, devices: int = 1, *, verify_shards: bool = False,
                 **options: bool | str) -> Trainer:
    """A Trainer of the run assembled on `devices` simulated towers, started with StartOptions(**options)."""
    strategy = make_strategy(simulate_devices=devices)
    parts = assemble_run(config, data, run_dir, strategy, verify_shards=verify_shards)
    return Trainer(parts, StartOptions(**options))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    make_dataset(root, train=[200, 160, 180], validation=[100], chunk_rows=32)
    return root


def train(config: Config, data: Path, run_dir: Path, devices: int, resume: bool = False,
          stop_after: int = 0) -> tuple[Trainer, list[np.ndarray]]:
    trainer = make_trainer(config, data, run_dir, devices, resume=resume,
                      resume_command="shogi-dnn train ... --resume")
    if stop_after:                                  # a stop request (as SIGTERM sets) after N updates
        update, calls = trainer.update, []

        def counting_update(iterator):
            calls.append(1)
            if len(calls) == stop_after:
                trainer.stop.request("test")
            return update(iterator)
        trainer.update = counting_update
    trainer.run()
    return trainer, [v.numpy() for v in trainer.steps.model.weights]


@pytest.fixture
def deterministic():
    """Deterministic ops for exact-equality comparisons, switched off again after the test."""
    from tensorflow.python.framework import config as tf_config

    tf.config.experimental.enable_op_determinism()
    yield
    tf_config.disable_op_determinism()


def tb_steps(run_dir: Path, tag: str) -> list[int]:
    """The steps of every TensorBoard event of `tag` in RUN/tb, in file order."""
    return [event.step for event_file in sorted((run_dir / "tb").glob("events.*"))
            for event in tf.compat.v1.train.summary_iterator(str(event_file))
            for value in event.summary.value if value.tag == tag]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_stage_plan_bookkeeping(dataset: Path) -> None:
    from shogi_dnn.dataset.shards import read_manifest

    config = from_dict({"data": {"num_groups": 3},
                        "train": {"epochs": 2, "seed": 5, "max_steps_per_stage": 3}})
    plan = StagePlan(read_manifest(dataset), config, update_batch=32)
    state, visited = plan.initial_state(), []
    while not plan.finished(state):
        stage = plan.stage(state.epoch, state.stage)
        assert stage.group == state.group and stage.seed == state.stage_seed and state.position == 0
        assert stage.updates == 3 and stage.remaining(0) == 3 and stage.remaining(64) == 1
        visited.append((state.epoch, state.group))
        state = plan.next_stage(state.advance(3, 96))
    assert state.epoch == 2 and state.step == 18 and state.samples == 18 * 32
    for epoch in (0, 1):                            # every group once per epoch
        assert sorted(g for e, g in visited if e == epoch) == [0, 1, 2]
    # Groups are cut by rows: 4 groups on 3 shards train, 17 groups of one update (32) need 544 > 540 rows.
    assert StagePlan(read_manifest(dataset), from_dict({"data": {"num_groups": 4}}), 32).num_groups == 4
    with pytest.raises(ConfigError, match="data.num_groups = 17 .* set data.num_groups to at most 16"):
        StagePlan(read_manifest(dataset), from_dict({"data": {"num_groups": 17}}), 32)
    with pytest.raises(ConfigError, match="seed"):
        plan.check_resume(TrainState(seed=6))


@pytest.mark.slow
def test_run_writes_metrics_checkpoints_and_model(dataset: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer, weights = train(tiny_config(keep_checkpoints=3, time_towers=True), dataset, run, devices=2)
    assert trainer.update.experimental_get_tracing_count() == 1          # one trace for both stages
    records = read_metrics(run)
    kinds = [r["kind"] for r in records]
    assert kinds == ["train", "train", "validation"] * 2                 # 4 steps/stage, log every 2
    for r in records:
        assert {"kind", "step", "samples", "epoch", "stage", "group", "loss", "accuracy", "per_gpu"} <= set(r)
        assert len(r["per_gpu"]) == 2 and r["per_gpu"][0]["device"] == "CPU:0"
        assert r["per_gpu"][0]["loss"] != r["per_gpu"][1]["loss"]      # towers see different samples
        assert r["samples"] == r["step"] * 32
    train_lines = [r for r in records if r["kind"] == "train"]
    assert all(r["positions_per_s"] > 0 and "positions_per_s" in r["per_gpu"][1] for r in train_lines)
    for g in (g for r in train_lines for g in r["per_gpu"]):     # each tower's own compute time
        assert 0 < g["busy_s"] < 60
        assert g["compute_positions_per_s"] == pytest.approx(g["positions"] / g["busy_s"])
    assert all("busy_s" not in g for r in records if r["kind"] == "validation" for g in r["per_gpu"])
    validation_lines = [r for r in records if r["kind"] == "validation"]
    assert all(r["positions_per_s"] > 0 and r["per_gpu"][1]["positions_per_s"] > 0 for r in validation_lines)
    assert [r["stage"] for r in records] == [0, 0, 0, 1, 1, 1]
    assert records[0]["group"] != records[3]["group"]
    # keep the last 3 of the checkpoints at steps 2, 4 (stage end), 6, 8 (stage end)
    assert [p.name for p in checkpoints.list_checkpoints(run)] == ["ckpt-00000004", "ckpt-00000006",
                                                                  "ckpt-00000008"]
    state, saved_config = checkpoints.read_state(checkpoints.find_checkpoint(run))
    assert state.epoch == 1 and state.step == 8
    assert saved_config == tiny_config(keep_checkpoints=3, time_towers=True)
    assert from_dict(json.loads((run / "config.json").read_text())) == saved_config
    info = json.loads((run / "run.json").read_text())
    assert info["num_replicas"] == 2 and info["devices"] == ["CPU:0", "CPU:1"]
    assert Path(info["data_dir"]) == dataset.resolve()
    final = load_model(run / "model.keras")
    for a, b in zip(weights, [v.numpy() for v in final.weights]):
        np.testing.assert_array_equal(a, b)
    restored = checkpoints.restore_model(run, "6")
    assert not all(np.array_equal(a, b.numpy()) for a, b in zip(weights, restored.weights))
    tags = set()
    for event_file in (run / "tb").glob("events.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            tags.update(v.tag for v in event.summary.value)
    assert {"gpu0/loss", "gpu1/loss", "loss", "validation/gpu1/loss"} <= tags


@pytest.mark.slow
def test_cosine_lr_decay_spans_the_whole_run(dataset: Path, tmp_path: Path) -> None:
    config = tiny_config()
    config = dataclasses.replace(config, optim=dataclasses.replace(config.optim, lr_decay="cosine"))
    trainer, _ = train(config, dataset, tmp_path / "run", devices=1)
    assert trainer.steps.optimizer._learning_rate.total_steps == 8            # 2 stages x 4 steps
    lrs = [r["lr"] for r in read_metrics(tmp_path / "run") if r["kind"] == "train"]
    # No warm-up: optim.warmup_samples = 64 is 2 of the run's 8 updates, capped at 10% (0 updates).
    assert len(lrs) == 4 and lrs[0] == pytest.approx(0.05 * 0.5 * (1 + np.cos(np.pi * 2 / 8)))
    assert lrs[0] > lrs[1] > lrs[2] > lrs[3]
    assert lrs[-1] == pytest.approx(0.0, abs=1e-9)                        # decayed to 0 at the last update
    # train.time_towers is off by default: no per-tower timing (and none of its cost) in the step.
    assert not any("busy_s" in g for r in read_metrics(tmp_path / "run") for g in r["per_gpu"])


@pytest.mark.slow
def test_one_and_four_towers_reach_the_same_weights(dataset: Path, tmp_path: Path) -> None:
    _, one = train(tiny_config(), dataset, tmp_path / "one", devices=1)
    _, four = train(tiny_config(), dataset, tmp_path / "four", devices=4)
    for a, b in zip(one, four):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    four_loss = read_metrics(tmp_path / "four")[-1]["loss"]
    assert read_metrics(tmp_path / "one")[-1]["loss"] == pytest.approx(four_loss, rel=1e-4)


@pytest.mark.slow
def test_micro_batches_equal_a_larger_batch(dataset: Path, tmp_path: Path) -> None:
    _, big = train(tiny_config(global_batch=64), dataset, tmp_path / "big", devices=2)
    _, accumulated = train(tiny_config(global_batch=32, micro_batches=2), dataset, tmp_path / "acc",
                           devices=2)
    for a, b in zip(big, accumulated):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def straight_run(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """An uninterrupted deterministic 1-tower run (computed once, on first use, for the resume tests)."""
    return {}


@pytest.mark.slow
@pytest.mark.parametrize("killed_after, resume_devices, position", [
    (6, 1, (6, 1, 32)),          # in-stage checkpoint: stage 1, 1 update into its group
    (6, 2, (6, 1, 32)),          # ... resumed on another tower count
    (5, 1, (5, 1, 0)),           # stage-end checkpoint: the next stage, nothing consumed yet
])
def test_resume_after_kill_equals_uninterrupted(dataset: Path, tmp_path: Path, killed_after: int,
                                                 resume_devices: int, position: tuple[int, int, int],
                                                 deterministic: None, straight_run: dict) -> None:
    config = tiny_config(max_steps_per_stage=5)                 # checkpoints at 2, 4, 5 (end), 6, 8, 10 (end)
    if not straight_run:
        straight_run["dir"] = tmp_path / "straight"
        straight_run["weights"] = train(config, dataset, straight_run["dir"], devices=1)[1]
    straight_dir, straight = straight_run["dir"], straight_run["weights"]
    # A run killed just after the checkpoint at step `killed_after`:
    killed = tmp_path / "killed"
    shutil.copytree(straight_dir, killed)
    (killed / "model.keras").unlink()
    for path in checkpoints.list_checkpoints(killed):
        if int(path.name.split("-")[1]) > killed_after:
            shutil.rmtree(path)
    state, _ = checkpoints.read_state(checkpoints.find_checkpoint(killed))
    assert (state.step, state.stage, state.position) == position
    _, resumed = train(config, dataset, killed, devices=resume_devices, resume=True)
    for a, b in zip(straight, resumed):
        if resume_devices == 1:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    steps = [(r["kind"], r["step"]) for r in read_metrics(killed)]
    assert steps == [(r["kind"], r["step"]) for r in read_metrics(straight_dir)]   # no duplicates
    assert tb_steps(killed, "loss") == tb_steps(straight_dir, "loss")               # TensorBoard too


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile,precision", [(False, "none"), (True, "none"), (False, "auto")])
def test_stop_request_checkpoints_and_resumes_exactly(dataset: Path, tmp_path: Path, deterministic: None,
                                                      jit_compile: bool, precision: str) -> None:
    """Stopped after 3 updates and resumed: the uninterrupted run's weights bit for bit, XLA or not, and in
    the precision "auto" picks (bfloat16 on a CPU with AMX or AVX512-BF16), which the resumed run keeps."""
    config = tiny_config(checkpoint_every_steps=0, jit_compile=jit_compile)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, mixed_precision=precision))
    _, straight = train(config, dataset, tmp_path / "straight", devices=2)
    train(config, dataset, tmp_path / "stopped", devices=2, stop_after=3)
    state, _ = checkpoints.read_state(checkpoints.find_checkpoint(tmp_path / "stopped"))
    assert (state.step, state.stage, state.position) == (3, 0, 96)
    assert not (tmp_path / "stopped" / "model.keras").exists()
    _, resumed = train(config, dataset, tmp_path / "stopped", devices=2, resume=True)
    for a, b in zip(straight, resumed):
        np.testing.assert_array_equal(a, b)
    chosen = json.loads((tmp_path / "stopped" / "run.json").read_text())["precision"]
    saved = json.loads((tmp_path / "stopped" / "config.json").read_text())["model"]["mixed_precision"]
    assert saved == chosen["policy"] != "auto"
    if precision == "auto":
        assert chosen["why"] == "auto: the run's choice (RUN/config.json)"          # the resume kept it
    # Every update is logged once: the partial interval before the stop (step 3) is not lost.
    train_lines = [r for r in read_metrics(tmp_path / "stopped") if r["kind"] == "train"]
    assert [r["step"] for r in train_lines][:3] == [2, 3, 4]
    assert sum(g["positions"] for r in train_lines for g in r["per_gpu"]) == train_lines[-1]["samples"]


@pytest.mark.slow
def test_resume_with_other_read_lanes_warns(dataset: Path, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """A run resumed with other read lanes (e.g. on another number of machines with data.read_lanes = 0)
    continues at the same position of another sample order: it says so, and run.json records the new
    lanes. Resuming with the same lanes says nothing."""
    config = tiny_config(checkpoint_every_steps=0)
    run = tmp_path / "run"
    train(config, dataset, run, devices=2, stop_after=2)
    assert json.loads((run / "run.json").read_text())["read_lanes"] == 1
    train(config, dataset, run, devices=2, resume=True, stop_after=1)
    assert "read lanes change" not in caplog.text
    two_lanes = from_dict({**config.to_dict(), "data": {**config.to_dict()["data"], "read_lanes": 2}})
    with caplog.at_level("WARNING", logger="shogi_dnn.training.trainer"):
        trainer, _ = train(two_lanes, dataset, run, devices=2, resume=True)
    assert "the read lanes change from 1 to 2" in caplog.text
    assert json.loads((run / "run.json").read_text())["read_lanes"] == 2
    assert trainer.plan.lanes == 2 and (run / "model.keras").is_file()


@pytest.mark.slow
def test_run_dir_and_config_checks(dataset: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(tiny_config(max_steps_per_stage=1), dataset, run, devices=1)
    with pytest.raises(RunError, match="--resume"):
        make_trainer(tiny_config(), dataset, run, 1).run()
    other = from_dict({**tiny_config().to_dict(), "model": {"blocks": 2, "filters": 8, "value_hidden": 8}})
    with pytest.raises(ConfigError, match="model.blocks"):
        make_trainer(other, dataset, run, 1, resume=True).run()
    with pytest.raises(ConfigError, match="not divisible by 4 towers"):
        make_trainer(tiny_config(global_batch=30), dataset, tmp_path / "x", 4)


def test_checkpoints_atomic_keep_and_stale(tmp_path: Path) -> None:
    from shogi_dnn.config import ModelConfig
    from shogi_dnn.training.model import build_model

    strategy = make_strategy(simulate_devices=2)
    with strategy.scope():
        model = build_model(ModelConfig(blocks=0, filters=4, value_hidden=4), seed=1)
    optimizer = build_optimizer(tiny_config().optim, 32, strategy=strategy, model=model)
    (tmp_path / "checkpoints" / ".tmp-ckpt-00000009-123").mkdir(parents=True)     # a save cut by a kill
    (tmp_path / "checkpoints" / "ckpt-00000010").mkdir()                         # no state.json: incomplete
    manager = checkpoints.CheckpointManager(tmp_path, model, optimizer, keep=2)
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    for step in (1, 2, 3):
        manager.save(TrainState(step=step, samples=32 * step, seed=3), tiny_config())
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path)] == ["ckpt-00000002", "ckpt-00000003"]
    assert checkpoints.find_checkpoint(tmp_path, "2").name == "ckpt-00000002"
    with pytest.raises(RunError, match="have: ckpt-00000002, ckpt-00000003"):
        checkpoints.find_checkpoint(tmp_path, "1")
    kernel = model.trainable_variables[0]
    saved = kernel.numpy().copy()
    kernel.assign(np.zeros_like(saved))
    assert manager.restore(tmp_path / "checkpoints" / "ckpt-00000003").samples == 96
    np.testing.assert_array_equal(kernel.numpy(), saved)


def test_damaged_checkpoint_is_a_one_line_run_error(tmp_path: Path) -> None:
    from shogi_dnn.config import ModelConfig
    from shogi_dnn.training.model import build_model

    model = build_model(ModelConfig(blocks=0, filters=4, value_hidden=4), seed=1)
    optimizer = build_optimizer(tiny_config().optim, 32, model=model)
    manager = checkpoints.CheckpointManager(tmp_path, model, optimizer, keep=2)
    path = manager.save(TrainState(step=1, samples=32, seed=3), tiny_config())
    (data,) = path.glob("weights.data-*")
    with open(data, "r+b") as f:                      # a copy cut short: half the bytes
        f.truncate(data.stat().st_size // 2)
    for restore in (lambda: manager.restore(path), lambda: checkpoints.restore_model(tmp_path)):
        with pytest.raises(RunError, match="ckpt-00000001: cannot restore") as info:
            restore()
        assert "\n" not in str(info.value)
    good = json.loads((path / "state.json").read_text())
    for text in ("{not json", "[1, 2]", json.dumps({**good, "config": "x"}), '{"state": 5}'):
        (path / "state.json").write_text(text)
        with pytest.raises(RunError, match="ckpt-00000001/state.json: ") as info:
            checkpoints.read_state(path)
        assert "\n" not in str(info.value)
    (path / "state.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(RunError, match="unreadable checkpoint state"):
        checkpoints.restore_model(tmp_path)


def test_resume_falls_back_from_a_corrupt_newest_checkpoint(dataset: Path, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    config = tiny_config(checkpoint_every_steps=2)
    run = tmp_path / "run"
    train(config, dataset, run, devices=1, stop_after=4)              # checkpoints at steps 2 and 4
    newest = checkpoints.find_checkpoint(run)
    assert newest.name == "ckpt-00000004"
    (data,) = newest.glob("weights.data-*")
    with open(data, "r+b") as f:                                       # a copy cut short
        f.truncate(data.stat().st_size // 2)
    strict = make_trainer(config, dataset, run, 1, resume=True,
                     strict=True)
    with pytest.raises(RunError, match=r"ckpt-00000004: cannot restore .*--resume-strict"):
        strict.run()
    with caplog.at_level("WARNING", logger="shogi_dnn.training.trainer"):
        train(config, dataset, run, devices=1, resume=True)
    assert any("ckpt-00000004: cannot restore" in r.message
               and "previous checkpoint, ckpt-00000002" in r.message for r in caplog.records)
    assert (run / "model.keras").is_file()
    steps = [r["step"] for r in read_metrics(run) if r["kind"] == "train"]
    assert steps == sorted(set(steps))                                 # the log continues from step 2, once


def test_non_finite_loss_stops_before_saving(dataset: Path, tmp_path: Path) -> None:
    config = tiny_config(checkpoint_every_steps=2, log_every_steps=3)
    trainer = make_trainer(config, dataset, tmp_path / "run", 1)
    update, calls = trainer.update, []

    def diverging_update(iterator):          # from update 3 on the loss is NaN (as a too-high lr gives)
        calls.append(1)
        out = update(iterator)
        return {**out, "loss_sum": out["loss_sum"] * float("nan")} if len(calls) >= 3 else out
    trainer.update = diverging_update
    with pytest.raises(RunError, match=r"training loss is not finite by step [34] \(the last good "
                                       r"checkpoint is step 2;") as info:
        trainer.run()
    assert "\n" not in str(info.value)
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path / "run")] == ["ckpt-00000002"]
    assert not (tmp_path / "run" / "model.keras").exists()


def _flip_chunk_byte(path: Path, key: str = "pieces", chunk: int = 1) -> None:
    import h5py
    with h5py.File(path, "r") as f:
        info = f[key].id.get_chunk_info(chunk)
    data = bytearray(path.read_bytes())
    data[info.byte_offset + info.size // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_shards_are_checked_before_the_first_step(tmp_path: Path) -> None:
    """A missing or truncated validation shard, or a training shard of another dataset, is one line at
    start-up naming the shard (it used to surface after a whole stage, or never)."""
    from shogi_dnn.errors import ShardFormatError

    data = tmp_path / "data"
    make_dataset(data, train=[200, 160], validation=[100], chunk_rows=32)
    validation = data / "validation-00000.h5"
    keep = validation.read_bytes()
    validation.write_bytes(keep[:len(keep) // 2])
    with pytest.raises(ShardFormatError, match=r"validation-00000.h5 \(listed in .*\): \d+ bytes, the "
                                               r"manifest says \d+") as info:
        make_trainer(tiny_config(), data, tmp_path / "run", 1)
    assert "\n" not in str(info.value)
    validation.unlink()
    with pytest.raises(ShardFormatError, match="validation-00000.h5 .*: missing"):
        make_trainer(tiny_config(), data, tmp_path / "run", 1)
    validation.write_bytes(keep)
    _flip_chunk_byte(data / "train-00001.h5")
    make_trainer(tiny_config(), data, tmp_path / "run", 1)   # cheap: passes
    with pytest.raises(ShardFormatError, match="train-00001.h5 .*: sha256"):
        make_trainer(tiny_config(), data, tmp_path / "run", 1, verify_shards=True)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_damaged_chunk_stops_training_with_one_line_after_a_checkpoint(tmp_path: Path) -> None:
    """fletcher32: a flipped byte in a training chunk is one ShardFormatError naming the shard and rows
    (not a TensorFlow traceback), after a checkpoint of the last good step; resume works once it is fixed."""
    from shogi_dnn.errors import ShardFormatError

    data = tmp_path / "data"
    make_dataset(data, train=[200, 160, 180], validation=[100], chunk_rows=32)
    shard = data / "train-00000.h5"
    keep = shard.read_bytes()
    _flip_chunk_byte(shard, "pieces", 3)
    config = tiny_config(checkpoint_every_steps=100, max_steps_per_stage=6)
    trainer = make_trainer(config, data, tmp_path / "run", 1)
    with pytest.raises(ShardFormatError, match=r"train-00000.h5: rows 96-127 \(chunk 3\) of dataset "
                                               r"'pieces' cannot be read: .*; the last good checkpoint "
                                               r"is step \d+") as info:
        trainer.run()
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)
    saved = checkpoints.list_checkpoints(tmp_path / "run")
    assert saved and not list((tmp_path / "run" / "checkpoints").glob(".tmp-*"))
    shard.write_bytes(keep)
    resumed = make_trainer(config, data, tmp_path / "run", 1, resume=True).run()
    assert not resumed.interrupted and (tmp_path / "run" / "model.keras").is_file()


def test_a_shard_unreadable_when_a_stage_opens_it_names_the_last_good_checkpoint(tmp_path: Path) -> None:
    """A shard truncated between stages fails when the next stage opens it ("not a readable HDF5 shard"):
    the line names the last good checkpoint too (an acceptance check found it without), as a read error
    inside a stage does."""
    from shogi_dnn.errors import ShardFormatError

    data = tmp_path / "data"
    make_dataset(data, train=[200, 160, 180], validation=[100], chunk_rows=32)
    config = tiny_config(checkpoint_every_steps=0)                  # 2 stages of 4 updates
    trainer = make_trainer(config, data, tmp_path / "run", 1)
    validate = trainer._validate
    keep = {p: p.read_bytes() for p in data.glob("train-*.h5")}

    def validate_then_truncate(state):
        validate(state)
        for path in keep:
            path.write_bytes(keep[path][:100])
    trainer._validate = validate_then_truncate
    with pytest.raises(ShardFormatError, match=r"not a readable HDF5 shard .*; the last good checkpoint "
                                               r"is step 4$") as info:
        trainer.run()
    assert "\n" not in str(info.value)
    for path, content in keep.items():
        path.write_bytes(content)
    resumed = make_trainer(config, data, tmp_path / "run", 1, resume=True).run()
    assert not resumed.interrupted and resumed.state.step == 8

@pytest.mark.slow
def test_resume_after_a_shard_read_error_equals_an_uninterrupted_run(tmp_path: Path,
                                                                     deterministic: None) -> None:
    """A shard truncated under a running train (issue 31): the read error stops the run with one line
    after saving the last good step (off the checkpoint interval); with the shard restored, --resume ends
    with exactly the weights of an uninterrupted run (the failed update's weight decay and step count
    used to land in that checkpoint: metrics equal up to it, different after)."""
    from shogi_dnn.errors import ShardFormatError

    data = tmp_path / "data"
    make_dataset(data, train=[400, 400, 400], validation=[100], chunk_rows=32)
    config = tiny_config(checkpoint_every_steps=7, max_steps_per_stage=30, global_batch=16, log_every_steps=1)
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, num_groups=1))
    _, straight = train(config, data, tmp_path / "straight", devices=1)
    shard = data / "train-00001.h5"
    keep = shard.read_bytes()
    trainer = make_trainer(config, data, tmp_path / "run", 1)
    update, calls = trainer.update, []

    def truncate_at_step_5(iterator):
        calls.append(1)
        if len(calls) == 5:
            with open(shard, "r+b") as f:
                f.truncate(len(keep) // 2)
        return update(iterator)
    trainer.update = truncate_at_step_5
    last_good_line = r"train-00001.h5: .*; the last good checkpoint is step (\d+)$"
    with pytest.raises(ShardFormatError, match=last_good_line) as info:
        trainer.run()
    last_good = int(str(info.value).rsplit(" ", 1)[1])
    assert last_good % 7 and len(calls) == last_good + 1       # off the interval; the failed update
    shard.write_bytes(keep)
    _, resumed = train(config, data, tmp_path / "run", devices=1, resume=True)
    for a, b in zip(straight, resumed):
        np.testing.assert_array_equal(a, b)
    losses = [(r["kind"], r["step"], r["loss"]) for r in read_metrics(tmp_path / "run")]
    assert losses == [(r["kind"], r["step"], r["loss"]) for r in read_metrics(tmp_path / "straight")]


@pytest.mark.slow
def test_a_run_dir_deleted_or_a_dataset_replaced_under_the_run_is_one_line(tmp_path: Path) -> None:
    """Issue 31: a run directory deleted mid-train ended with "[Errno 2] No such file or directory:
    'r/metrics.jsonl'", a dataset converted again under it with "rows [0, 85007) are outside the 35783
    positions of the shards", naming neither; now one line says which and what is left."""
    data = tmp_path / "data"
    make_dataset(data, train=[200, 160, 180], validation=[100], chunk_rows=32)
    config = tiny_config(checkpoint_every_steps=2, log_every_steps=1)

    def run_doing(action, run_dir: Path) -> RunError:
        trainer = make_trainer(config, data, run_dir, 1)
        update, calls = trainer.update, []

        def update_then(iterator):
            calls.append(1)
            if len(calls) == 3:
                action()
            return update(iterator)
        trainer.update = update_then
        with pytest.raises(RunError) as info:
            trainer.run()
        assert "\n" not in str(info.value) and len(calls) <= 4          # noticed at once
        return info.value

    error = run_doing(lambda: shutil.rmtree(tmp_path / "run"), tmp_path / "run")
    assert str(error).startswith(f"{tmp_path / 'run'}: the run directory was deleted while this run wrote "
                                 f"to it (the last checkpoint, step 2, went with it)")
    assert not (tmp_path / "run").exists()                               # not made again by a save
    error = run_doing(lambda: make_dataset(data, train=[100, 64], validation=[100], chunk_rows=32),
                      tmp_path / "run2")
    assert str(error).startswith(f"{data.resolve()}: the dataset was replaced while this run read it "
                                 f"(its manifest.json no longer lists the shards the run started on; the "
                                 f"last good checkpoint is step ")


TEARDOWN_S = 20.0      # how long the training stream's teardown is made to take (the slow case seen: 50+ s)


@pytest.mark.slow
def test_sigint_at_a_stage_end_saves_without_waiting_for_the_input_teardown(
        dataset: Path, tmp_path: Path, deterministic: None, monkeypatch) -> None:
    """Ctrl-C as a stage's last update returns, with the stage's input stream slow to tear down (its
    generator's cleanup takes TEARDOWN_S): the run validates, saves the stage-end checkpoint and returns
    well before the teardown ends (it runs in the release thread), and the checkpoint resumes exactly."""
    import os
    import signal
    import threading
    import time

    from shogi_dnn.training import pipeline
    from shogi_dnn.training.interrupts import RELEASE_THREAD

    config = tiny_config(checkpoint_every_steps=0)                  # 2 stages of 4 updates
    _, straight = train(config, dataset, tmp_path / "straight", devices=1)
    merge = pipeline._merge_lanes                                    # the training stream only

    finished = threading.Event()                                     # set by the test once it has checked

    def slow_to_tear_down(*args, **kwargs):
        try:
            yield from merge(*args, **kwargs)
        finally:
            finished.wait(TEARDOWN_S)
    monkeypatch.setattr(pipeline, "_merge_lanes", slow_to_tear_down)
    trainer = make_trainer(config, dataset, tmp_path / "stopped", 1)
    update, calls = trainer.update, []

    def update_then_sigint(iterator):
        out = update(iterator)
        calls.append(1)
        if len(calls) == trainer.plan.stage(0, 0).updates:          # the stage's last update
            os.kill(os.getpid(), signal.SIGINT)
        return out
    trainer.update = update_then_sigint
    start = time.perf_counter()
    result = trainer.run()
    elapsed = time.perf_counter() - start
    assert result.interrupted and trainer.stop.signal_name == "SIGINT" and len(calls) == 4
    assert elapsed < TEARDOWN_S / 2, f"the interrupted run took {elapsed:.1f} s"
    state, _ = checkpoints.read_state(checkpoints.find_checkpoint(tmp_path / "stopped"))
    assert (state.step, state.stage, state.position) == (4, 1, 0)   # the stage-end checkpoint
    assert [r["kind"] for r in read_metrics(tmp_path / "stopped")] == ["train", "train", "validation"]
    releasing = [t for t in threading.enumerate() if t.name == RELEASE_THREAD]
    assert releasing and all(t.daemon for t in releasing)           # the teardown is still going on, aside
    monkeypatch.undo()
    _, resumed = train(config, dataset, tmp_path / "stopped", devices=1, resume=True)
    for a, b in zip(straight, resumed):
        np.testing.assert_array_equal(a, b)
    finished.set()                                                  # no need to wait out the teardown
    for thread in releasing:
        thread.join(timeout=2 * TEARDOWN_S)                        # leave no sleeping teardown behind
        assert not thread.is_alive()


@pytest.mark.slow
def test_weight_average_is_validated_saved_and_resumed_exactly(dataset: Path, tmp_path: Path,
                                                               deterministic: None) -> None:
    """optim.ema = m on 2 towers: the final model.keras is avg_1 = w_1, avg_t = m avg_{t-1} + (1 - m) w_t
    over the trained weights after each update (computed here by hand); validation swaps the average in
    and back out without changing training (the trained weights equal a run without the average); a run
    stopped and resumed ends with the same model."""
    m = 0.8
    config = tiny_config()
    averaged = dataclasses.replace(config, optim=dataclasses.replace(config.optim, ema=m))
    trainer = make_trainer(averaged, dataset, tmp_path / "ema", 2,
                      resume_command="shogi-dnn train ... --resume")
    update, seen = trainer.update, []

    def recording_update(iterator):
        out = update(iterator)
        seen.append([v.numpy() for v in trainer.steps.model.trainable_weights])
        return out
    trainer.update = recording_update
    trainer.run()
    expected = seen[0]
    for weights in seen[1:]:
        expected = [m * a + (1 - m) * w for a, w in zip(expected, weights)]
    saved = load_model(tmp_path / "ema" / "model.keras")
    for a, b in zip(expected, saved.trainable_weights):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(seen[-1][0], saved.trainable_weights[0].numpy())
    _, plain = train(config, dataset, tmp_path / "plain", devices=2)           # the same updates
    for a, b in zip(seen[-1], [w for w in plain[:len(seen[-1])]]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    losses = {r["kind"]: r["loss"] for r in read_metrics(tmp_path / "ema") if r["kind"] == "validation"}
    plain_losses = {r["kind"]: r["loss"] for r in read_metrics(tmp_path / "plain") if r["kind"] == "validation"}
    assert losses != plain_losses                                  # validation scored the average
    train(averaged, dataset, tmp_path / "stopped", devices=2, stop_after=3)
    _, resumed = train(averaged, dataset, tmp_path / "stopped", devices=2, resume=True)
    for a, b in zip(load_model(tmp_path / "stopped" / "model.keras").weights, saved.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
