"""Train and eval steps (steps.py): N towers == one device on all the samples, accumulation, clipping
after the all-reduce, per-tower metric sums, loss scaling, batch-norm. Uses conftest's 4 logical CPU
devices."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from shogi_dnn.config import OptimConfig
from shogi_dnn.training.devices import local_values, make_strategy
from shogi_dnn.training.optimizer import (
    build_optimizer,
)
from shogi_dnn.training.steps import UpdateSpec, make_eval_step, make_train_step

SGD = OptimConfig(optimizer="sgd", lr=0.5, momentum=0.0, weight_decay=0.0, lr_scaling="none")


def tiny_model() -> keras.Model:
    """A batch-norm-free model on the compact inputs: [B,81]+[B,14] uint8 -> [B,1] logit."""
    board = keras.Input((81,), dtype="uint8", name="board")
    hands = keras.Input((14,), dtype="uint8", name="hands")
    x = keras.layers.Concatenate()([keras.ops.cast(board, "float32") / 28.0,
                                    keras.ops.cast(hands, "float32") / 18.0])
    x = keras.layers.Dense(16, activation="tanh")(x)
    return keras.Model({"board": board, "hands": hands}, keras.layers.Dense(1)(x))


def random_batch(size: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"board": rng.integers(0, 29, (size, 81)).astype(np.uint8),
            "hands": rng.integers(0, 3, (size, 14)).astype(np.uint8),
            "win": rng.choice(np.array([0.0, 0.5, 1.0], np.float32), size),
            "ply": np.zeros(size, np.int16)}


def train(devices: int, batches: list[dict[str, np.ndarray]], *, micro_batches: int = 1, steps: int = 1,
          cfg: OptimConfig = SGD, clip: float = 0.0,
          jit_compile: bool = False) -> tuple[list[np.ndarray], list[dict[str, list[float]]]]:
    """`steps` updates from the same initial weights; returns the weights and per-tower metric sums."""
    strategy = make_strategy(simulate_devices=devices)
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = tiny_model()
    global_batch = len(batches[0]["win"])
    optimizer = build_optimizer(cfg, global_batch, strategy=strategy, model=model,
                                micro_batches=micro_batches)
    step = make_train_step(strategy, model, optimizer,
                           UpdateSpec(global_batch, micro_batches, clip_global_norm=clip,
                                      jit_compile=jit_compile))
    data = tf.data.Dataset.from_tensor_slices({k: np.stack([b[k] for b in batches]) for k in batches[0]})
    iterator = iter(strategy.experimental_distribute_dataset(data))
    sums = []
    for _ in range(steps):
        out = step(*[next(iterator) for _ in range(micro_batches)])
        sums.append({k: local_values(strategy, v) for k, v in out.items()})
    return [v.numpy() for v in model.trainable_variables], sums


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


@pytest.mark.parametrize("devices", [2, 4])
def test_towers_equal_one_device_on_all_samples(devices: int) -> None:
    batch = random_batch(32)
    single, _ = train(1, [batch])
    multi, sums = train(devices, [batch])
    assert max_diff(single, multi) < 1e-6
    # Each tower saw its own contiguous slice of the global batch.
    assert sums[0]["count"] == [32 / devices] * devices
    assert len(set(sums[0]["loss_sum"])) == devices          # different samples -> different losses


def test_update_actually_moves_weights() -> None:
    strategy = make_strategy(simulate_devices=1)
    keras.utils.set_random_seed(7)
    with strategy.scope():
        before = [v.numpy() for v in tiny_model().trainable_variables]
    after, _ = train(1, [random_batch(32)])
    assert max_diff(before, after) > 1e-3


def test_accumulation_equals_larger_batch() -> None:
    big = random_batch(32, seed=3)
    halves = [{k: v[i * 8:(i + 1) * 8] for k, v in big.items()} for i in range(4)]
    one, _ = train(2, [big])
    accumulated, sums = train(2, halves, micro_batches=4)
    assert max_diff(one, accumulated) < 1e-6
    assert sum(sums[0]["count"]) == 32


def test_accumulation_all_reduces_once_per_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """k micro-batches, one all-reduce per tower and update (not one per micro-batch)."""
    calls = []
    original = tf.distribute.ReplicaContext.all_reduce

    def counting(self, reduce_op, value, options=None):
        calls.append(len(tf.nest.flatten(value)))
        return original(self, reduce_op, value, options)

    monkeypatch.setattr(tf.distribute.ReplicaContext, "all_reduce", counting)
    big = random_batch(24, seed=4)
    thirds = [{k: v[i * 8:(i + 1) * 8] for k, v in big.items()} for i in range(3)]
    train(2, thirds, micro_batches=3)
    variables = len(tiny_model().trainable_variables)
    assert calls == [variables, variables]        # traced once per tower, one call with every gradient


def test_momentum_two_steps_tower_independent() -> None:
    cfg = OptimConfig(optimizer="adam", lr=0.01, weight_decay=1e-3, lr_scaling="none")
    batches = [random_batch(16, seed=s) for s in (1, 2)]
    one, _ = train(1, batches, steps=2, cfg=cfg)
    four, _ = train(4, batches, steps=2, cfg=cfg)
    assert max_diff(one, four) < 1e-5


def test_clipping_after_all_reduce() -> None:
    batch = random_batch(32, seed=5)
    clipped_one, _ = train(1, [batch], clip=0.01)
    clipped_four, _ = train(4, [batch], clip=0.01)
    unclipped, _ = train(1, [batch])
    assert max_diff(clipped_one, clipped_four) < 1e-7
    assert max_diff(clipped_one, unclipped) > 1e-3


def test_eval_step_handles_partial_batches() -> None:
    strategy = make_strategy(simulate_devices=4)
    with strategy.scope():
        model = tiny_model()
    evaluate = make_eval_step(strategy, model)
    data = tf.data.Dataset.from_tensor_slices(random_batch(22, seed=9)).batch(8)
    counts = np.zeros(4)
    for batch in strategy.experimental_distribute_dataset(data):
        counts += local_values(strategy, evaluate(batch)["count"])
    assert counts.sum() == 22


def test_eval_step_handles_empty_tower_batches() -> None:
    """Per-replica batches (distribute_datasets_from_function): 22 rows in batches of 2 over 4 towers,
    so the last step feeds 3 towers and tf.distribute gives the 4th a 0-row batch: it counts nothing,
    and the 22 rows are each counted once."""
    from shogi_dnn.config import ModelConfig
    from shogi_dnn.training.model import build_model

    strategy = make_strategy(simulate_devices=4)
    with strategy.scope():     # the real CNN: its CPU conv kernels mis-shape a 0-row batch
        model = build_model(ModelConfig(blocks=1, filters=8, value_hidden=8), seed=1)
    evaluate = make_eval_step(strategy, model)
    data = strategy.distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensor_slices(random_batch(22, seed=9)).batch(2))
    counts = [local_values(strategy, evaluate(batch)["count"]) for batch in data]
    assert len(counts) == 3 and counts[-1] == [2, 2, 2, 0] and np.sum(counts) == 22
    # Global batches split by experimental_distribute_dataset (evaluate): a last batch of 2 rows leaves
    # two towers empty.
    data = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(random_batch(18, seed=9)).batch(8))
    counts = [local_values(strategy, evaluate(batch)["count"]) for batch in data]
    assert counts[-1] == [1, 1, 0, 0] and np.sum(counts) == 18


def test_mixed_float16_loss_scaling_tower_independent() -> None:
    from shogi_dnn.config import ModelConfig
    from shogi_dnn.training.model import build_model

    config = ModelConfig(blocks=1, filters=8, value_hidden=8, mixed_precision="mixed_float16")
    results = []
    for devices in (1, 2):
        strategy = make_strategy(simulate_devices=devices)
        with strategy.scope():
            model = build_model(config, seed=1)
        optimizer = build_optimizer(SGD, 32, strategy=strategy, model=model, loss_scale=True)
        assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        step = make_train_step(strategy, model, optimizer, UpdateSpec(32, clip_global_norm=1.0))
        data = iter(strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensors(random_batch(32)).repeat()))
        for _ in range(2):
            step(next(data))
        assert int(optimizer.iterations.numpy()) == 2
        results.append([v.numpy() for v in model.trainable_variables])
    assert all(np.isfinite(w).all() for w in results[1])
    assert max_diff(*results) < 1e-3        # float16 activations: close, not bit-equal


@pytest.mark.parametrize("batch_norm, tower_independent", [("sync", True), ("local", False)])
def test_batch_norm_under_towers(batch_norm: str, tower_independent: bool) -> None:
    """Documented in steps.py: synchronised batch-norm gives the one-device result, local does not."""
    from shogi_dnn.config import ModelConfig
    from shogi_dnn.training.model import build_model

    results = []
    for devices in (1, 2):
        strategy = make_strategy(simulate_devices=devices)
        with strategy.scope():
            config = ModelConfig(blocks=1, filters=8, value_hidden=8, batch_norm=batch_norm)
            model = build_model(config, seed=1)
        optimizer = build_optimizer(SGD, 32, strategy=strategy, model=model)
        step = make_train_step(strategy, model, optimizer, UpdateSpec(32))
        data = iter(strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensors(random_batch(32)).repeat()))
        for _ in range(2):
            step(next(data))
        results.append([v.numpy() for v in model.weights])       # includes the moving statistics
    assert (max_diff(*results) < 1e-5) == tower_independent


@pytest.mark.parametrize("devices", [1, 2])
def test_jit_compile_equals_plain_step(devices: int) -> None:
    """train.jit_compile (XLA per micro-batch): the plain step's weights and metric sums to float tolerance,
    with accumulation, clipping and Adam's two steps."""
    cfg = OptimConfig(optimizer="adam", lr=0.01, weight_decay=1e-3, lr_scaling="none")
    big = [random_batch(32, seed=s) for s in (6, 7)]
    halves = [{k: v[i * 16:(i + 1) * 16] for k, v in b.items()} for b in big for i in range(2)]
    plain, plain_sums = train(devices, halves, micro_batches=2, steps=2, cfg=cfg, clip=0.05)
    jitted, jit_sums = train(devices, halves, micro_batches=2, steps=2, cfg=cfg, clip=0.05, jit_compile=True)
    assert max_diff(plain, jitted) < 1e-5
    for a, b in zip(plain_sums, jit_sums):
        assert a["count"] == b["count"]
        np.testing.assert_allclose(a["loss_sum"], b["loss_sum"], rtol=1e-5)


def _real_model_steps(config, devices: int, jit_compile: bool, loss_scale: bool = False) -> list[np.ndarray]:
    """Two SGD updates of build_model(config) on `devices` towers; the model's weights (statistics too)."""
    from shogi_dnn.training.model import build_model

    strategy = make_strategy(simulate_devices=devices)
    with strategy.scope():
        model = build_model(config, seed=1)
    optimizer = build_optimizer(SGD, 32, strategy=strategy, model=model, loss_scale=loss_scale)
    step = make_train_step(strategy, model, optimizer,
                           UpdateSpec(32, clip_global_norm=1.0, jit_compile=jit_compile))
    data = iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors(random_batch(32)).repeat()))
    for _ in range(2):
        step(next(data))
    return [v.numpy() for v in model.weights]


def test_jit_compile_on_the_real_model(caplog: pytest.LogCaptureFixture) -> None:
    """XLA on the value network (attack planes, local batch norm; mixed_float16 with loss scaling) gives
    the plain step's weights; with sync batch norm jit_compile is ignored, with a log line."""
    from shogi_dnn.config import ModelConfig

    local = ModelConfig(blocks=1, filters=8, value_hidden=8, batch_norm="local", features="attacks")
    assert max_diff(_real_model_steps(local, 2, False), _real_model_steps(local, 2, True)) < 1e-4
    half = ModelConfig(blocks=1, filters=8, value_hidden=8, batch_norm="none",
                       mixed_precision="mixed_float16")
    plain, jitted = (_real_model_steps(half, 1, jit, loss_scale=True) for jit in (False, True))
    assert all(np.isfinite(w).all() for w in jitted) and max_diff(plain, jitted) < 1e-2
    sync = ModelConfig(blocks=1, filters=8, value_hidden=8, batch_norm="sync")
    with caplog.at_level("INFO", logger="shogi_dnn.training.steps"):
        assert max_diff(_real_model_steps(sync, 2, False), _real_model_steps(sync, 2, True)) < 1e-5
    assert "jit_compile ignored" in caplog.text


@pytest.mark.parametrize("devices, micro_batches, batches", [(1, 1, 1), (2, 1, 1), (1, 2, 3)])
def test_an_update_without_its_batches_changes_no_state(devices: int, micro_batches: int,
                                                        batches: int) -> None:
    """An iterator at its end (a shard read error ends the stream early) fails the update before anything
    changes: weight decay and the optimizer's step count used to run anyway (issue 31: the checkpoint of the
    last good step then resumed off an uninterrupted run). With micro-batches, one batch of two is not
    enough either."""
    from shogi_dnn.training.steps import make_iterator_step

    strategy = make_strategy(simulate_devices=devices)
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = tiny_model()
    cfg = OptimConfig(optimizer="sgd", lr=0.5, momentum=0.9, weight_decay=0.1, lr_scaling="none")
    optimizer = build_optimizer(cfg, 16, strategy=strategy, model=model, micro_batches=micro_batches)
    update = make_iterator_step(make_train_step(strategy, model, optimizer, UpdateSpec(16, micro_batches)),
                                micro_batches)
    data = tf.data.Dataset.from_tensor_slices({k: np.stack([random_batch(16, i)[k] for i in range(batches)])
                                               for k in random_batch(16)})
    iterator = iter(strategy.experimental_distribute_dataset(data))
    update(iterator)                                          # the only full update
    before = [v.numpy() for v in model.weights + optimizer.variables]
    with pytest.raises(tf.errors.OutOfRangeError):
        update(iterator)
    after = [v.numpy() for v in model.weights + optimizer.variables]
    assert int(optimizer.iterations.numpy()) == 1
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
