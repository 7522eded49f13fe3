"""Value network: on-device plane expansion, shapes and dtypes, mixed precision, save/load."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from shogi_dnn.bench.synthetic import random_positions
from shogi_dnn.config import ModelConfig
from shogi_dnn.dataset import features
from shogi_dnn.errors import RunError
from shogi_dnn.training import model

TINY = ModelConfig(blocks=1, filters=8, value_hidden=8)


def _positions(n: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    p = random_positions(n, np.random.default_rng(seed))
    p["hands"][0] = np.asarray(features.HAND_MAX * 2)    # full hands: every hand plane at 1.0
    return {"board": p["board"], "hands": p["hands"]}


def test_expand_planes_equals_the_numpy_reference():
    x = _positions(64)
    got = np.asarray(model.expand_planes(x["board"], x["hands"]))
    assert got.shape == (64, 9, 9, features.NUM_PLANES) and got.dtype == np.float32
    np.testing.assert_array_equal(got, features.expand_planes(x["board"], x["hands"]))
    assert got[0, :, :, features.PLANE_OWN_HAND:].min() == 1.0


def test_expand_layer_in_the_model_equals_the_reference():
    x = _positions()
    net = model.build_model(TINY, seed=1)
    planes = keras.Model(net.inputs, net.get_layer("planes").output)(x)
    np.testing.assert_array_equal(np.asarray(planes), features.expand_planes(x["board"], x["hands"]))


@pytest.mark.parametrize("batch_norm", ["none", "local", "sync"])
def test_shapes_and_dtypes(batch_norm):
    cfg = ModelConfig(blocks=2, filters=8, value_hidden=16, batch_norm=batch_norm)
    net = model.build_model(cfg, seed=1)
    assert {i.name: (tuple(i.shape), i.dtype) for i in net.inputs} == {
        "board": ((None, 81), "uint8"), "hands": ((None, features.HAND_SIZE), "uint8")}
    out = net(_positions(5), training=False)
    assert tuple(out.shape) == (5, 1) and out.dtype == "float32"
    bn = [layer for layer in net.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(bn) == (0 if batch_norm == "none" else 2 * cfg.blocks + 2)
    assert all(layer.synchronized == (batch_norm == "sync") for layer in bn)
    assert sum(isinstance(layer, keras.layers.Add) for layer in net.layers) == cfg.blocks


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_computes_low_and_outputs_float32(policy):
    net = model.build_model(ModelConfig(blocks=1, filters=8, value_hidden=8, mixed_precision=policy), seed=1)
    compute = policy.removeprefix("mixed_")
    assert net.get_layer("planes").compute_dtype == compute
    assert net.get_layer("stem_conv").compute_dtype == compute
    assert net.get_layer("stem_conv").variable_dtype == "float32"
    out = net(_positions(4))
    assert out.dtype == "float32" and np.all(np.isfinite(np.asarray(out)))
    assert keras.config.dtype_policy().name == "float32"      # no global policy left behind


def test_seed_fixes_the_initial_weights():
    a, b, c = (model.build_model(TINY, seed=s) for s in (1, 1, 2))
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    assert not np.array_equal(a.get_weights()[0], c.get_weights()[0])


@pytest.mark.parametrize("batch_norm", ["none", "local"])
def test_save_load_round_trip(tmp_path, batch_norm):
    net = model.build_model(ModelConfig(blocks=1, filters=8, value_hidden=8, batch_norm=batch_norm), seed=1)
    x = _positions(8)
    net(x, training=True)     # moves batch-norm statistics away from their initial values
    path = tmp_path / "model.keras"
    net.save(path)
    loaded = model.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), net.predict(x, verbose=0))
    assert isinstance(loaded.get_layer("planes"), model.ExpandPlanes)
    assert isinstance(keras.models.load_model(path).get_layer("planes"), model.ExpandPlanes)


def test_load_model_errors_are_one_line(tmp_path):
    with pytest.raises(RunError, match="no such model file"):
        model.load_model(tmp_path / "missing.keras")
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"not a zip")
    with pytest.raises(RunError, match="bad.keras") as info:
        model.load_model(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("block", ["se", "gpool"])
def test_block_kinds_save_load_and_use_the_whole_board(tmp_path, block):
    """An SE or global-pooling block: the saved model loads to the same outputs, and a piece changed on
    one square moves every square's features of the next block (a plain 3x3 block reaches 2 squares)."""
    cfg = ModelConfig(blocks=1, filters=8, value_hidden=8, value_head="pool", block=block, se_ratio=2)
    net = model.build_model(cfg, seed=3)
    x = _positions(8)
    path = tmp_path / "model.keras"
    net.save(path)
    np.testing.assert_array_equal(model.load_model(path).predict(x, verbose=0), net.predict(x, verbose=0))
    if block == "se":              # a live squeeze layer (4 units of random init can all start at 0)
        squeeze = net.get_layer("block0_se_squeeze")
        squeeze.set_weights([np.full_like(w, 0.1) for w in squeeze.get_weights()])
    trunk = keras.Model(net.inputs, net.get_layer("block0_add").output)
    far = {k: v[:1].copy() for k, v in x.items()}
    far["board"][0, :] = 0
    near = {k: v.copy() for k, v in far.items()}
    near["board"][0, 0] = 1                         # a piece on the first square only
    moved = np.abs(np.asarray(trunk(near)) - np.asarray(trunk(far)))[0]        # [9, 9, 8]
    assert moved[8, 8].max() > 0                    # the far corner sees it through the pooled bias
    plain = keras.Model(*(lambda n: (n.inputs, n.get_layer("block0_add").output))(
        model.build_model(ModelConfig(blocks=1, filters=8, value_hidden=8, value_head="pool"), seed=3)))
    assert np.abs(np.asarray(plain(near)) - np.asarray(plain(far)))[0, 8, 8].max() == 0
