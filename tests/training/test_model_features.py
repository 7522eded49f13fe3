"""model.features: the "pieces" (42) and "attacks" (77) input sets, their config key, save/load, mixed
precision, and attack planes under the left-right mirror (the data.mirror augmentation) on real positions."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from shogi_dnn import config as cfg
from shogi_dnn.analysis.predict import game_positions
from shogi_dnn.dataset import features
from shogi_dnn.errors import ConfigError
from shogi_dnn.kifu import RECORD_SUFFIXES, GameRecord, read_record_file
from shogi_dnn.training import attack_planes, model
from tests.support.paths import DATA

TINY = {"blocks": 1, "filters": 8, "value_hidden": 8}


@pytest.fixture(scope="module")
def real_positions() -> dict[str, np.ndarray]:
    """Every position of every game in tests/data (side to move's view), as model inputs."""
    paths = sorted(p for p in DATA.rglob("*") if p.suffix.lower() in RECORD_SUFFIXES)
    games = [game_positions(r) for path in paths for r in read_record_file(path) if isinstance(r, GameRecord)]
    return {"board": np.concatenate([g.board for g in games]), "hands": np.concatenate([g.hands for g in games])}


def test_config_key_choices_default_and_resume() -> None:
    assert cfg.Config().model.features == "pieces"
    assert cfg.load_config(None, ["model.features=attacks"]).model.features == "attacks"
    with pytest.raises(ConfigError, match=r"preset\.toml: model\.features = 'planes' must be one of pieces, attacks"):
        cfg.from_dict({"model": {"features": "planes"}}, origin="preset.toml")
    # An architecture field: fixed on resume. A config.json written before the key existed reads as "pieces".
    pieces, attacks = cfg.Config(), cfg.load_config(None, ["model.features=attacks"])
    assert cfg.architecture_mismatch(pieces, attacks) == ["model.features: 'pieces' -> 'attacks'"]
    old = json.loads(pieces.to_json())
    del old["model"]["features"]
    assert cfg.from_dict(old) == pieces


@pytest.mark.parametrize("feature_set, planes", [("pieces", 42), ("attacks", 77)])
def test_input_planes_follow_the_setting(real_positions, feature_set, planes) -> None:
    mc = cfg.ModelConfig(**TINY, features=feature_set)
    assert model.input_planes(mc) == planes
    net = model.build_model(mc, seed=1)
    stem_input = net.get_layer("stem_conv").input
    assert tuple(stem_input.shape) == (None, 9, 9, planes)
    x = {k: v[:200] for k, v in real_positions.items()}
    got = np.asarray(keras.Model(net.inputs, stem_input)(x))
    expected = features.expand_planes(x["board"], x["hands"])
    if feature_set == "attacks":
        expected = np.concatenate([expected, np.asarray(attack_planes.attack_planes(x["board"]))], axis=-1)
        assert got[..., features.NUM_PLANES:].max() == 1.0        # some square is attacked
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("feature_set", ["pieces", "attacks"])
def test_save_and_reload_give_the_same_outputs(tmp_path, real_positions, feature_set) -> None:
    net = model.build_model(cfg.ModelConfig(**TINY, batch_norm="local", features=feature_set), seed=2)
    x = {k: v[:64] for k, v in real_positions.items()}
    net(x, training=True)     # moves batch-norm statistics away from their initial values
    path = tmp_path / "model.keras"
    net.save(path)
    expected = np.asarray(net(x, training=False))
    for loaded in (model.load_model(path), keras.models.load_model(path)):
        assert tuple(loaded.get_layer("stem_conv").input.shape)[-1] == model.INPUT_PLANES[feature_set]
        np.testing.assert_array_equal(np.asarray(loaded(x, training=False)), expected)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_attack_planes_in_the_compute_dtype(real_positions, policy) -> None:
    net = model.build_model(cfg.ModelConfig(**TINY, features="attacks", mixed_precision=policy), seed=1)
    compute = policy.removeprefix("mixed_")
    for name in ("planes", "attack_planes", "input_planes"):
        assert net.get_layer(name).compute_dtype == compute
    assert net.get_layer("stem_conv").input.dtype == compute
    x = {k: v[:32] for k, v in real_positions.items()}
    out = net(x)
    assert out.dtype == "float32" and np.all(np.isfinite(np.asarray(out)))
    planes = keras.Model(net.inputs, net.get_layer("attack_planes").output)(x)
    np.testing.assert_array_equal(np.asarray(planes).astype(np.float32),
                                  np.asarray(attack_planes.attack_planes(x["board"])))


def test_attack_planes_of_a_mirrored_board_are_the_mirrored_planes(real_positions) -> None:
    """data.mirror flips the board before the model: the planes it then computes are the mirror images
    of the original's (file f <-> 10 - f is column c <-> 8 - c of the 9x9 planes)."""
    board = real_positions["board"]
    assert len(board) > 500
    mirrored = features.mirror_board(board)
    assert not np.array_equal(mirrored, board)
    planes = np.asarray(attack_planes.attack_planes(board))
    np.testing.assert_array_equal(np.asarray(attack_planes.attack_planes(mirrored)), planes[:, :, ::-1, :])
    # The on-device mirror used by mirror averaging is features.mirror_board's twin.
    np.testing.assert_array_equal(np.asarray(model.mirror_board(board)), mirrored)
