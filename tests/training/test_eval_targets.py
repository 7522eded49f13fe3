"""Engine evaluations as value targets: the pipeline carries `eval` from converted records, and the
training loss blends BCE(result) with BCE(sigmoid(eval / a)) by train.eval_weight, bit-identical to the
result-only loss at 0. Uses conftest's logical CPU devices."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from shogi_dnn.config import OptimConfig
from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import evalfit, features, shards
from shogi_dnn.training import pipeline, schedule
from shogi_dnn.training.devices import local_values, make_strategy
from shogi_dnn.training.losses import METRIC_KEYS, LossSpec, example_losses, trust_by_ply
from shogi_dnn.training.optimizer import build_optimizer
from shogi_dnn.training.steps import UpdateSpec, make_train_step
from tests.support.evalrecords import EVAL_CSA_EXPECTED, write_eval_csa
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset, split_paths
from tests.training.test_steps import random_batch, tiny_model

NONE = features.EVAL_NONE
EXPECTED = [NONE if v is None else v for v in EVAL_CSA_EXPECTED]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """EVAL_CSA and a game without evaluations converted into one training shard, plus a synthetic
    shard without the `eval` dataset: the paths of a mixed training group."""
    root = tmp_path_factory.mktemp("evalshards")
    source = write_eval_csa(root / "eval.csa")
    shutil.copy(REPO / "tests" / "data" / "csa" / "ending_toryo.csa", root / "plain.csa")
    run_convert([source, root / "plain.csa"], root / "out", ConvertSettings(val_fraction=0.0), workers=1)
    synthetic = make_dataset(root / "synthetic", train=[70], chunk_rows=16)
    converted = [root / "out" / s.path for s in shards.read_manifest(root / "out").shards]
    return converted + split_paths(synthetic, "train")


def _eval_rows(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([b[key] for b in batches]) for key in ("eval", "ply", "win")}


def _check_rows(rows: dict[str, np.ndarray]) -> None:
    """The converted game's rows (7 plies, the only rows with an evaluation) carry EXPECTED by ply;
    the plain game's 3 rows and the synthetic shard's 70 rows carry EVAL_NONE."""
    assert rows["eval"].dtype == np.int16 and len(rows["eval"]) == 7 + 3 + 70
    evaluated = rows["eval"] != NONE
    assert evaluated.sum() == sum(v != NONE for v in EXPECTED)
    for ply, value in enumerate(EXPECTED):
        if value != NONE:
            assert rows["eval"][evaluated & (rows["ply"] == ply)].tolist() == [value]


def test_pipeline_streams_evals_and_eval_none_for_shards_without_them(converted) -> None:
    assert schedule.STREAM_KEYS[-1] == "eval" and "eval" in schedule.STORED_KEYS
    stream = list(pipeline.iter_stream(converted, seed=3, shuffle_buffer=32, mirror=True))
    _check_rows(_eval_rows(stream))
    train = pipeline.make_train_dataset(converted, global_batch=8, seed=3, shuffle_buffer=32, mirror=False)
    assert train.element_spec["eval"].dtype == tf.int16 and train.element_spec["eval"].shape == (8,)
    rows = _eval_rows(list(train.as_numpy_iterator()))
    assert len(rows["eval"]) == 80                                  # every row: 80 = 10 batches of 8
    _check_rows(rows)
    evaluation = list(pipeline.make_eval_dataset(converted, global_batch=16).as_numpy_iterator())
    _check_rows(_eval_rows(evaluation))


def _bce(logit: float, label: float) -> float:
    return max(logit, 0.0) - logit * label + math.log1p(math.exp(-abs(logit)))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


LOGITS = np.asarray([0.0, 1.0, -2.0, 0.5, 3.0], np.float32)
BATCH = {"board": np.zeros((5, 81), np.uint8), "hands": np.zeros((5, 14), np.uint8),
         "win": np.asarray([1.0, 0.0, 0.5, 1.0, 0.0], np.float32),
         "eval": np.asarray([0, 756, NONE, -1512, 32000], np.int16)}


def _fixed_model(inputs, training):
    return tf.constant(LOGITS[:, None])


def _losses(eval_weight: float, batch=BATCH, eval_scale: float = 756.0):
    batch = {k: tf.constant(v) for k, v in batch.items()}
    losses, sums = example_losses(_fixed_model, batch, training=False,
                                  spec=LossSpec(eval_weight=eval_weight, eval_scale=eval_scale))
    return losses.numpy(), {k: v.numpy() for k, v in sums.items()}


def test_loss_weight_zero_is_the_result_loss_bit_for_bit() -> None:
    result = tf.nn.sigmoid_cross_entropy_with_logits(labels=BATCH["win"], logits=LOGITS).numpy()
    for batch in (BATCH, {k: v for k, v in BATCH.items() if k != "eval"}):
        losses, sums = _losses(0.0, batch)
        assert losses.tobytes() == result.tobytes()
        assert sums["loss_sum"].tobytes() == np.float32(tf.reduce_sum(result).numpy()).tobytes()
        # decisive rows 0, 1, 3, 4; only row 3 (logit 0.5, a win) has the right sign
        assert (sums["correct"], sums["decisive"], sums["count"]) == (1.0, 4.0, 5.0)
    # the default of example_losses is the same graph
    batch = {k: tf.constant(v) for k, v in BATCH.items()}
    assert example_losses(_fixed_model, batch, False)[0].numpy().tobytes() == result.tobytes()


def test_loss_weight_one_is_the_eval_bce_where_there_is_an_evaluation() -> None:
    # by hand: BCE(z, y) = max(z, 0) - z*y + log(1 + exp(-|z|)), targets sigmoid(eval / 756)
    hand = [math.log(2.0),                                     # z 0, eval 0: target 0.5
            1.0 - _sigmoid(1.0) + math.log1p(math.exp(-1.0)),  # z 1, eval 756: target sigmoid(1)
            1.0 + math.log1p(math.exp(-2.0)),                  # no evaluation: result BCE(-2, 0.5)
            0.5 - 0.5 * _sigmoid(-2.0) + math.log1p(math.exp(-0.5)),
            3.0 - 3.0 * _sigmoid(32000 / 756) + math.log1p(math.exp(-3.0))]
    assert hand[:4] == pytest.approx([0.6931472, 0.5822031, 1.1269280, 0.9144755], abs=1e-6)
    losses, sums = _losses(1.0)
    np.testing.assert_allclose(losses, hand, rtol=1e-6, atol=1e-6)
    result = [_bce(z, y) for z, y in zip(LOGITS.tolist(), BATCH["win"].tolist())]
    assert float(sums["loss_sum"]) == pytest.approx(sum(result), rel=1e-6)     # the logged loss: results
    blended, _ = _losses(0.33)
    want = [r if e == NONE else 0.67 * r + 0.33 * h for r, h, e in zip(result, hand, BATCH["eval"].tolist())]
    np.testing.assert_allclose(blended, want, rtol=1e-6, atol=1e-6)
    doubled, _ = _losses(1.0, eval_scale=1512.0)                 # a = 1512: eval 1512 is logit 1
    assert doubled[3] == pytest.approx(_bce(0.5, _sigmoid(-1.0)), abs=1e-6)


def _train_once(batch: dict[str, np.ndarray], **kwargs) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    strategy = make_strategy(simulate_devices=2)
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = tiny_model()
    cfg = OptimConfig(optimizer="sgd", lr=0.5, momentum=0.0, weight_decay=0.0, lr_scaling="none")
    optimizer = build_optimizer(cfg, len(batch["win"]), strategy=strategy, model=model)
    step = make_train_step(strategy, model, optimizer, UpdateSpec(len(batch["win"]), loss=LossSpec(**kwargs)))
    data = tf.data.Dataset.from_tensor_slices({k: v[None] for k, v in batch.items()})
    out = step(next(iter(strategy.experimental_distribute_dataset(data))))
    return [v.numpy() for v in model.trainable_variables], {k: np.asarray(local_values(strategy, v))
                                                           for k, v in out.items()}


def test_train_step_weight_zero_is_bit_identical_and_a_weight_moves_it() -> None:
    batch = random_batch(32, seed=4)
    batch["eval"] = np.where(np.arange(32) % 3 == 0, NONE, (np.arange(32) - 16) * 200).astype(np.int16)
    plain_weights, plain_sums = _train_once({k: v for k, v in batch.items() if k != "eval"})
    zero_weights, zero_sums = _train_once(batch, eval_weight=0.0, eval_scale=300.0)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(plain_weights, zero_weights))
    assert all(plain_sums[k].tobytes() == zero_sums[k].tobytes() for k in METRIC_KEYS)
    half_weights, half_sums = _train_once(batch, eval_weight=0.5)
    assert max(float(np.abs(a - b).max()) for a, b in zip(plain_weights, half_weights)) > 1e-6
    # the metric sums are computed before the update: the result loss, whatever the weight
    assert all(plain_sums[k].tobytes() == half_sums[k].tobytes() for k in METRIC_KEYS)


def test_trust_weighting_scales_lambda_by_the_range_of_each_ply() -> None:
    # plies 5, 25, 45, 250, 65 -> ranges 0, 1, 2, 10 (the last range is open), 3
    batch = {**BATCH, "ply": np.asarray([5, 25, 45, 250, 65], np.int16)}
    trust = [0.0, 0.5, 1.0, 0.25] + [0.75] * (len(evalfit.PLY_EDGES) - 4)
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    losses = example_losses(_fixed_model, tensors, training=False,
                            spec=LossSpec(eval_weight=0.8, eval_scale=756.0, eval_trust=tuple(trust)))
    losses = losses[0].numpy()
    result = [_bce(z, y) for z, y in zip(LOGITS.tolist(), BATCH["win"].tolist())]
    targets = [_sigmoid(e / 756.0) for e in BATCH["eval"].tolist()]
    weights = [0.8 * 0.0, 0.8 * 0.5, None, 0.8 * 0.75, 0.8 * 0.25]       # row 2 has no evaluation
    want = [r if w is None else (1 - w) * r + w * _bce(z, t)
            for r, w, z, t in zip(result, weights, LOGITS.tolist(), targets)]
    np.testing.assert_allclose(losses, want, rtol=1e-6, atol=1e-6)
    assert losses[0] == pytest.approx(result[0], abs=1e-7)                # trust 0: the result alone
    assert trust_by_ply(tf.constant([0, 19, 20, 199, 200, 9999]), trust).numpy().tolist() == \
        [0.0, 0.0, 0.5, 0.75, 0.75, 0.75]


def _eval_dataset(root: Path, rows: int = 4000) -> shards.Manifest:
    """A training split whose evaluations predict results with a known scale (a = 500) from ply 40 on and
    are noise before it; a validation split without any."""
    rng = np.random.default_rng(0)
    ply = rng.integers(0, 120, rows).astype(np.int16)
    evals = rng.integers(-2000, 2001, rows)
    p = np.where(ply >= 40, 1 / (1 + np.exp(-evals / 500.0)), 0.5)
    win = (rng.random(rows) < p).astype(np.float32)
    make_dataset(root, train=[rows // 2, rows // 2], validation=[64], chunk_rows=256)
    manifest = shards.read_manifest(root)
    for i, info in enumerate(manifest.split("train")):
        part = slice(i * (rows // 2), (i + 1) * (rows // 2))
        with h5py.File(root / info.path, "r+") as f:        # the columns the fit reads, rewritten in place
            f[shards.KEY_PLY][...] = ply[part]
            f[shards.KEY_WIN][...] = win[part]
            if shards.KEY_EVAL in f:
                del f[shards.KEY_EVAL]
            f.create_dataset(shards.KEY_EVAL, data=evals[part].astype(np.int16))
    return manifest


def test_resolve_eval_target_fits_the_scale_and_the_trust_on_the_training_split(tmp_path: Path) -> None:
    from shogi_dnn.config import TrainConfig
    from shogi_dnn.dataset.evalfit import resolve_eval_target

    manifest = _eval_dataset(tmp_path / "data")
    target = resolve_eval_target(TrainConfig(eval_weight=1.0, eval_scale=0.0, eval_weighting="trust"),
                                 manifest)
    fit = target.fit
    assert fit is not None and fit.positions == 4000 and fit.coverage == 1.0
    assert target.weight == 1.0 and target.scale == fit.scale and target.trust == fit.trust
    late = [s for s, e, c in zip(fit.scales, fit.ply_edges, fit.counts) if e >= 40 and c]
    assert all(400 < s < 650 for s in late)                           # the generating a = 500, by range
    assert fit.trust[0] < 0.2 and fit.trust[1] < 0.2 and max(fit.trust) == 1.0   # noise before ply 40
    line = target.describe()
    assert line.startswith("evaluations on 100.0% of training positions, λ = 1, a = ")
    assert "trust by ply 0+:" in line
    constant = resolve_eval_target(TrainConfig(eval_weight=0.33, eval_scale=756.0), manifest)
    assert constant.scale == 756.0 and constant.trust is None
    assert "(set; fitted on results:" in constant.describe()
    off = resolve_eval_target(TrainConfig(eval_weight=0.0), manifest)
    assert off.weight == 0.0 and off.fit is None and "results only" in off.describe()


def test_a_dataset_without_evaluations_trains_on_results(tmp_path: Path) -> None:
    from shogi_dnn.config import TrainConfig
    from shogi_dnn.dataset.evalfit import resolve_eval_target

    make_dataset(tmp_path / "plain", train=[200], validation=[50], chunk_rows=64)
    target = resolve_eval_target(TrainConfig(eval_weight=1.0, eval_scale=0.0, eval_weighting="trust"),
                                 shards.read_manifest(tmp_path / "plain"))
    assert (target.weight, target.trust, target.fit) == (0.0, None, None)
    assert target.describe() == "no engine evaluations in the training split: results only"


def test_coverage_counts_evaluated_positions_without_a_result() -> None:
    # annotate's off-path positions (win NaN) carry an evaluation: they count in the coverage line, not in
    # the fit of a (they say nothing of how evaluations relate to results).
    from shogi_dnn.dataset import evalfit
    stats = evalfit.EvalStats()
    stats.add(np.array([300, -300, evalfit.EVAL_NONE, 500], np.int16),
              np.array([1.0, 0.0, 1.0, np.nan], np.float32), np.array([30, 31, 32, 33], np.int16))
    fit = evalfit.fit_stats(stats)
    assert fit.positions == 2
    assert fit.coverage == 0.75
