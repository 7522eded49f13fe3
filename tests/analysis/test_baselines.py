"""Baselines: material features, the fit on the training split, scores on another split."""

from __future__ import annotations

import numpy as np
import pytest

from shogi_dnn import features, rules
from shogi_dnn.analysis import baselines
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from tests.support.evaldata import material_dataset, split_paths


def encode(sfen: str) -> tuple[np.ndarray, np.ndarray]:
    board, hands = features.encode_position(rules.new_position(sfen))
    return board[None], hands[None]


def test_material_features_of_known_positions() -> None:
    assert not baselines.material_features(*encode(STANDARD_START_SFEN)).any()
    # Black gave up its rook, holds 2 of its own pawns, White holds its bishop (a possible position: every
    # kind within the set); White to move: features are White's view.
    sfen = "lnsgkgsnl/1r7/ppppppppp/9/9/9/PPPPPPP2/1B7/LNSGKGSNL w 2Pb 1"
    f = dict(zip(baselines.FEATURE_NAMES, baselines.material_features(*encode(sfen))[0]))
    assert f["R"] == 1 and f["B"] == -1 and f["P"] == 2
    assert f["P*"] == -2 and f["B*"] == 1
    assert sum(abs(v) for v in f.values()) == 7


def test_baselines_are_fitted_on_train_and_scored_on_validation(tmp_path) -> None:
    # Train: 90% of positions give the side to move the extra rook, and the rook side wins.
    # Validation: half and half, and the rook side LOSES. A fit on validation would find the opposite.
    manifest = material_dataset(tmp_path, {"train": (400, 0.9, False), "validation": (200, 0.5, True)})
    fitted = baselines.fit_baselines(split_paths(manifest, "train"))
    assert fitted.train_positions == 400
    assert fitted.side_to_move_rate == pytest.approx(0.9)
    values = fitted.piece_values()
    assert values["R"] > 1.0 and values["R"] > 5 * abs(values["P"])
    scores = baselines.score_baselines(fitted, split_paths(manifest, "validation"))
    stm, mat = scores["side_to_move"], scores["material"]
    assert stm["positions"] == mat["positions"] == 200
    assert stm["accuracy"] == pytest.approx(0.5)             # share of validation positions won by the mover
    p = 0.9
    assert stm["loss"] == pytest.approx(-0.5 * np.log(p) - 0.5 * np.log(1 - p), rel=1e-6)
    assert mat["accuracy"] == pytest.approx(0.0)              # train's rule is exactly wrong on validation
    assert mat["loss"] > 1.0
    # Scored on train itself, the material fit is right everywhere.
    assert baselines.score_baselines(fitted, split_paths(manifest, "train"))["material"]["accuracy"] == 1.0


def test_round_trip_and_ratings(tmp_path) -> None:
    manifest = material_dataset(tmp_path, {"train": (60, 0.5, False)}, shards_per_split=1)
    fitted = baselines.fit_baselines(split_paths(manifest, "train"))
    assert baselines.Baselines.from_dict(fitted.to_dict()) == fitted
    ratings = baselines.position_ratings(split_paths(manifest, "train")[0])
    assert ratings.shape == (60,) and np.isfinite(ratings).all()
    assert set(np.unique(ratings)) <= {1200.0, 1700.0, 2200.0, 2700.0}
    batches = list(baselines.iter_batches(split_paths(manifest, "train"), ("win", "rating"), rows=25))
    assert [len(b["win"]) for b in batches] == [25, 25, 10]
    np.testing.assert_array_equal(np.concatenate([b["rating"] for b in batches]), ratings)


def test_no_training_positions(tmp_path) -> None:
    with pytest.raises(ValueError, match="no training positions"):
        baselines.fit_baselines([])
