"""The policy head (model.policy_head): its label order, mirror averaging, the policy loss and metric
sums (losses.head_losses), masking of positions without a move or a result, towers, the pipeline's
`policy` column and the metrics.jsonl fields."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from shogi_dnn.config import ModelConfig, OptimConfig
from shogi_dnn.dataset import features, policy
from shogi_dnn.training import model as model_lib
from shogi_dnn.training import pipeline
from shogi_dnn.training.devices import local_values, make_strategy
from shogi_dnn.training.losses import POLICY_KEYS, RESULTS_KEY, LossSpec, example_losses
from shogi_dnn.training.optimizer import build_optimizer
from shogi_dnn.training.run_log import TowerSums, console_line, summarise
from shogi_dnn.training.stages import TrainState
from shogi_dnn.training.steps import UpdateSpec, make_eval_step, make_train_step
from tests.support.shardgen import make_policy_dataset, random_moves, split_paths
from tests.training.test_steps import max_diff, random_batch

TINY = ModelConfig(blocks=1, filters=8, value_hidden=8, policy_head=True)
SGD = OptimConfig(optimizer="sgd", lr=0.05, momentum=0.0, weight_decay=0.0, lr_scaling="none")


def policy_batch(size: int, seed: int = 0) -> dict[str, np.ndarray]:
    batch = random_batch(size, seed)
    batch["policy"] = policy.move_labels(random_moves(size, np.random.default_rng(seed + 1))).astype(np.int32)
    batch["eval"] = np.full(size, features.EVAL_NONE, np.int16)
    return batch


def test_head_gives_logits_in_label_order() -> None:
    model = model_lib.build_model(TINY, seed=1)
    assert model_lib.has_policy_head(model)
    assert not model_lib.has_policy_head(model_lib.build_model(ModelConfig(blocks=0, filters=4), seed=1))
    last = model.get_layer("policy_directions")
    kernel, _ = last.get_weights()
    bias = np.arange(policy.NUM_DIRECTIONS, dtype=np.float32) * 10
    last.set_weights([np.zeros_like(kernel), bias])
    batch = policy_batch(3)
    logits = np.asarray(model_lib.policy_logits(model, batch["board"], batch["hands"]))
    assert logits.shape == (3, policy.NUM_MOVE_LABELS) and logits.dtype == np.float32
    # Only the bias: label = direction * 81 + square has its direction's bias.
    np.testing.assert_array_equal(logits[0], np.repeat(bias, 81))
    # A square's own plane value lands at direction * 81 + row * 9 + col: a kernel reading one input plane.
    planes = keras.Model(model.inputs, model.get_layer("policy_relu").output)(
        {"board": batch["board"], "hands": batch["hands"]})
    kernel = np.zeros_like(kernel)
    kernel[0, 0, 0, 5] = 1.0                               # direction 5 reads channel 0
    last.set_weights([kernel, np.zeros_like(bias)])
    logits = np.asarray(model_lib.policy_logits(model, batch["board"], batch["hands"]))
    np.testing.assert_allclose(logits[:, 5 * 81:6 * 81], np.asarray(planes)[..., 0].reshape(3, 81), rtol=1e-6)


def test_mirror_average_is_mirror_invariant_and_normalised() -> None:
    model = model_lib.build_model(TINY, seed=2)
    batch = policy_batch(4)
    mirrored = features.mirror_board(batch["board"])
    a = np.asarray(model_lib.policy_logits(model, batch["board"], batch["hands"], mirror_average=True))
    b = np.asarray(model_lib.policy_logits(model, mirrored, batch["hands"], mirror_average=True))
    np.testing.assert_allclose(np.exp(a).sum(axis=1), 1.0, rtol=1e-5)
    # The mirrored position's probability of the mirrored move is the position's of the move.
    np.testing.assert_allclose(b[:, policy.mirror_labels(np.arange(policy.NUM_MOVE_LABELS))], a, atol=1e-5)
    # By hand: the mean of the two softmaxes, the mirror's mapped back.
    plain = np.asarray(model_lib.policy_logits(model, batch["board"], batch["hands"]))
    other = np.asarray(model_lib.policy_logits(model, mirrored, batch["hands"]))
    def soft(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    expected = (soft(plain) + soft(other)[:, policy.mirror_labels(np.arange(policy.NUM_MOVE_LABELS))]) / 2
    np.testing.assert_allclose(np.exp(a), expected, atol=1e-6)
    # The value still comes from value_logits, as for a value-only model.
    v, _ = model_lib.value_and_policy_logits(model, batch["board"], batch["hands"], mirror_average=True)
    expected_value = model_lib.value_logits(model, batch["board"], batch["hands"], True)
    np.testing.assert_allclose(v, expected_value, atol=1e-6)


def test_policy_loss_and_sums_by_hand() -> None:
    model = model_lib.build_model(TINY, seed=3)
    batch = policy_batch(16)
    batch["policy"][:3] = policy.LABEL_NONE
    losses, sums = example_losses(model, batch, training=False, spec=LossSpec(policy_weight=0.5))
    value = np.asarray(model_lib.value_logits(model, batch["board"], batch["hands"]))
    logits = np.asarray(model_lib.policy_logits(model, batch["board"], batch["hands"]), np.float64)
    win = batch["win"]
    bce = np.maximum(value, 0) - value * win + np.log1p(np.exp(-np.abs(value)))
    log_softmax = logits - logits.max(1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(1, keepdims=True))
    has = batch["policy"] >= 0
    ce = np.where(has, -log_softmax[np.arange(16), np.maximum(batch["policy"], 0)], 0.0)
    np.testing.assert_allclose(losses, bce + 0.5 * ce, rtol=1e-5, atol=1e-6)
    assert set(POLICY_KEYS) <= set(sums) and RESULTS_KEY not in sums
    assert float(sums["policy_count"]) == 13
    np.testing.assert_allclose(float(sums["policy_loss_sum"]), ce.sum(), rtol=1e-5)
    hits = (logits.argmax(1) == batch["policy"]) & has
    assert float(sums["policy_correct"]) == hits.sum()


def test_masked_rows_contribute_nothing() -> None:
    """Rows with no move (-1) and no result (win NaN) nor evaluation: the loss sum and its gradient are
    those of the batch without them (the step divides both by its global batch: scale by the ratio)."""
    model = model_lib.build_model(TINY, seed=4)
    clean = policy_batch(12, seed=5)
    masked = {key: value.copy() for key, value in policy_batch(4, seed=6).items()}
    masked["policy"][:] = policy.LABEL_NONE
    masked["win"][:] = np.nan
    full = {key: np.concatenate([clean[key], masked[key]]) for key in clean}

    def loss_and_grads(batch):
        with tf.GradientTape() as tape:
            losses, sums = example_losses(model, batch, training=True,
                                          spec=LossSpec(eval_weight=0.5, eval_scale=600.0,
                                                        no_result_weight=2.0))
            total = tf.reduce_sum(losses)
        return float(total), tape.gradient(total, model.trainable_variables), sums

    total_clean, grads_clean, sums_clean = loss_and_grads(clean)
    total_full, grads_full, sums_full = loss_and_grads(full)
    assert np.isfinite(total_full) and total_full == pytest.approx(total_clean, rel=1e-6)
    assert max_diff([g.numpy() for g in grads_full], [g.numpy() for g in grads_clean]) < 1e-5
    for key in ("loss_sum", "correct", "decisive", *POLICY_KEYS):
        assert float(sums_full[key]) == pytest.approx(float(sums_clean[key]), rel=1e-6)
    assert float(sums_full["count"]) == 16 and float(sums_full[RESULTS_KEY]) == 12
    # The same rows with an evaluation: they train on it alone (λ = 1), times no_result_weight.
    full["eval"][12:] = [300, -300, 0, 1200]
    value = np.asarray(model_lib.value_logits(model, full["board"], full["hands"]))[12:]
    target = 1 / (1 + np.exp(-full["eval"][12:] / 600.0))
    eval_bce = np.maximum(value, 0) - value * target + np.log1p(np.exp(-np.abs(value)))
    total_eval, _, _ = loss_and_grads(full)
    assert total_eval == pytest.approx(total_clean + 2.0 * eval_bce.sum(), rel=1e-5)


def train(devices: int, batch: dict[str, np.ndarray], steps: int, lr: float = 0.05,
          ) -> tuple[list[np.ndarray], list[dict[str, list[float]]]]:
    strategy = make_strategy(simulate_devices=devices)
    with strategy.scope():
        model = model_lib.build_model(TINY, seed=7)
    global_batch = len(batch["win"])
    optimizer = build_optimizer(OptimConfig(optimizer="sgd", lr=lr, momentum=0.0, weight_decay=0.0,
                                            lr_scaling="none"), global_batch, strategy=strategy, model=model)
    step = make_train_step(strategy, model, optimizer,
                           UpdateSpec(global_batch, loss=LossSpec(policy_weight=1.0)))
    data = tf.data.Dataset.from_tensors(batch).repeat(steps)
    iterator = iter(strategy.experimental_distribute_dataset(data))
    sums = []
    for _ in range(steps):
        out = step(next(iterator))
        sums.append({k: local_values(strategy, v) for k, v in out.items()})
    return [v.numpy() for v in model.trainable_variables], sums


def test_a_step_with_the_head_trains() -> None:
    batch = policy_batch(16, seed=8)
    _, sums = train(1, batch, steps=12, lr=0.2)
    policy_loss = [s["policy_loss_sum"][0] / s["policy_count"][0] for s in sums]
    assert all(np.isfinite(policy_loss)) and all(np.isfinite([s["loss_sum"][0] for s in sums]))
    assert policy_loss[-1] < policy_loss[0] - 0.1          # about log(2187) = 7.7 at the start


def test_two_towers_agree_with_one() -> None:
    batch = policy_batch(16, seed=9)
    one, sums_one = train(1, batch, steps=2, lr=0.01)
    two, sums_two = train(2, batch, steps=2, lr=0.01)
    assert max_diff(one, two) < 1e-5
    assert sum(sums_two[0]["policy_count"]) == sums_one[0]["policy_count"][0]
    assert sum(sums_two[0]["policy_loss_sum"]) == pytest.approx(sums_one[0]["policy_loss_sum"][0], rel=1e-5)


def test_eval_step_sums_policy_and_empty_towers() -> None:
    strategy = make_strategy(simulate_devices=2)
    with strategy.scope():
        model = model_lib.build_model(TINY, seed=1)
    step = make_eval_step(strategy, model)
    batch = policy_batch(3)
    data = tf.data.Dataset.from_tensors(batch)
    outputs = [step(b) for b in strategy.experimental_distribute_dataset(data)]
    sums = TowerSums.collect(strategy, outputs)
    assert sums.sums["policy_count"].sum() == (batch["policy"] >= 0).sum()
    record = summarise("validation", TrainState(), sums, ["/cpu:0", "/cpu:1"])
    assert record["policy_loss"] > 0 and 0 <= record["policy_acc"] <= 1
    assert all("policy_acc" in gpu for gpu in record["per_gpu"])
    assert "ploss=" in console_line(record) and "pacc" in console_line(record)


def test_records_without_a_head_are_unchanged() -> None:
    sums = TowerSums({"loss_sum": np.array([2.0]), "correct": np.array([1.0]), "decisive": np.array([2.0]),
                      "count": np.array([4.0])})
    record = summarise("train", TrainState(), sums, ["/cpu:0"])
    assert record["loss"] == 0.5 and "policy_loss" not in record and "policy_loss" not in record["per_gpu"][0]
    # With masking, the loss is over the positions with a result.
    sums.sums[RESULTS_KEY] = np.array([2.0])
    assert summarise("train", TrainState(), sums, ["/cpu:0"])["loss"] == 1.0


def test_pipeline_policy_column_follows_the_mirror(tmp_path) -> None:
    manifest = make_policy_dataset(tmp_path, train=[300, 200], chunk_rows=64)
    paths = split_paths(manifest, "train")
    kwargs = dict(seed=3, shuffle_buffer=128, mirror=True)
    plain = list(pipeline.iter_stream(paths, **kwargs))
    labelled = list(pipeline.iter_stream(paths, policy_labels=True, **kwargs))
    unmirrored = list(pipeline.iter_stream(paths, policy_labels=True, **{**kwargs, "mirror": False}))
    def join(blocks, key):
        return np.concatenate([b[key] for b in blocks])
    for key in pipeline.KEYS:                                # the same stream, with or without labels
        np.testing.assert_array_equal(join(plain, key), join(labelled, key))
    board, labels = join(labelled, "board"), join(labelled, "policy")
    assert labels.dtype == np.int32 and (labels == policy.LABEL_NONE).any()
    # Rows in the same order either way: the mirrored rows are those whose board differs.
    flipped = (board != join(unmirrored, "board")).any(axis=1)
    assert 0 < flipped.sum() < len(flipped)
    original = join(unmirrored, "policy")
    np.testing.assert_array_equal(labels[flipped], policy.mirror_labels(original[flipped]))
    np.testing.assert_array_equal(labels[~flipped], original[~flipped])
    # The labels are those of the stored moves (unmirrored rows, by ply = row index in the split).
    from shogi_dnn.dataset import shards
    moves = np.concatenate([shards.read_positions(p, keys=[shards.KEY_MOVE]).arrays[shards.KEY_MOVE]
                            for p in paths])
    ply = join(unmirrored, "ply")
    np.testing.assert_array_equal(original, policy.move_labels(moves[ply]))


def test_train_and_eval_datasets_carry_labels(tmp_path) -> None:
    manifest = make_policy_dataset(tmp_path, train=[256], validation=[100], chunk_rows=64)
    train_ds = pipeline.make_train_dataset(split_paths(manifest, "train"), global_batch=32, seed=1,
                                           shuffle_buffer=64, mirror=True, policy_labels=True)
    batch = next(iter(train_ds))
    assert batch["policy"].shape == (32,) and batch["policy"].dtype == tf.int32
    eval_ds = pipeline.make_eval_dataset(split_paths(manifest, "validation"), global_batch=64,
                                         policy_labels=True)
    assert sum(int(b["policy"].shape[0]) for b in eval_ds) == 100
    assert "policy" not in next(iter(pipeline.make_eval_dataset(split_paths(manifest, "validation"),
                                                                global_batch=64)))


def test_a_run_with_the_head_on_annotated_data(tmp_path) -> None:
    """The trainer end to end: a policy model on shards with off-path positions (win NaN) trains, logs the
    policy metrics (metrics.jsonl, per tower) and saves a two-output model.keras that loads back."""
    import dataclasses
    import json

    from tests.training.test_trainer import tiny_config
    from tests.training.test_trainer import train as run_trainer

    data = tmp_path / "data"
    make_policy_dataset(data, train=[200, 160], validation=[100], no_result=120, chunk_rows=32)
    base = tiny_config(checkpoint_every_steps=0)
    config = dataclasses.replace(base, model=dataclasses.replace(base.model, policy_head=True),
                                 train=dataclasses.replace(base.train, eval_weight=0.5, eval_scale=600.0,
                                                           no_result_weight=0.5))
    trainer, _ = run_trainer(config, data, tmp_path / "run", devices=2)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"train", "validation"}
    for record in records:
        assert np.isfinite(record["loss"]) and np.isfinite(record["policy_loss"])
        assert 0 <= record["policy_acc"] <= 1 and len(record["per_gpu"]) == 2
        assert all(np.isfinite(gpu["policy_loss"]) for gpu in record["per_gpu"])
    loaded = model_lib.load_model(tmp_path / "run" / "model.keras")
    assert model_lib.has_policy_head(loaded)
