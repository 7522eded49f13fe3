"""Baselines: material features, the fit on the training split, scores on another split."""

from __future__ import annotations

import numpy as np
import pytest

from shogi_dnn import rules
from shogi_dnn.analysis import baselines
from shogi_dnn.dataset import evalfit, features, shards
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


# ---------------------------------------------------------------------------------------------------
# piece-square


def dense_piece_square(board: np.ndarray, hands: np.ndarray) -> np.ndarray:
    """[N, 2311] the piece-square design written out with loops: one-hot (square, code), the number of
    squares holding each code, the hand counts, a bias."""
    n = board.shape[0]
    x = np.zeros((n, 81 * 28 + 28 + 14 + 1))
    for i in range(n):
        for square in range(81):
            code = int(board[i, square])
            if code:
                x[i, square * 28 + code - 1] = 1.0
                x[i, 81 * 28 + code - 1] += 1.0
        x[i, 81 * 28 + 28:81 * 28 + 28 + 14] = hands[i]
    x[:, -1] = 1.0
    return x


def test_piece_square_features_of_a_known_position() -> None:
    sfen = "lnsgkgsnl/1r7/ppppppppp/9/9/9/PPPPPPP2/1B7/LNSGKGSNL w 2Pb 1"     # White to move, holds a bishop
    board, hands = encode(sfen)
    x = baselines.piece_square_features(board, hands, bias=True).toarray()[0]
    np.testing.assert_array_equal(x, dense_piece_square(board, hands)[0])
    squares = x[:81 * 28].reshape(81, 28)
    assert squares.sum() == np.count_nonzero(board) == 36
    assert x[baselines.COUNT_COLUMNS + 1 - 1] == 9                  # 9 own pawns (code 1) on the board
    bishop, pawn = rules.HAND_PIECE_TYPES.index(6), rules.HAND_PIECE_TYPES.index(1)
    assert x[baselines.HAND_COLUMNS + bishop] == 1                                  # own bishop in hand
    assert x[baselines.HAND_COLUMNS + 7 + pawn] == 2                                # opponent's 2 pawns in hand
    assert x[baselines.HAND_COLUMNS:baselines.HAND_COLUMNS + 14].sum() == 3
    assert x[-1] == 1.0


def test_piece_square_fit_matches_a_direct_fit_of_the_same_objective(tmp_path) -> None:
    from scipy.optimize import minimize

    manifest = material_dataset(tmp_path, {"train": (300, 0.6, False), "validation": (60, 0.5, False)},
                                shards_per_split=3)
    l2 = 3.0
    fitted = baselines.fit_piece_square(split_paths(manifest, "train"), l2=l2)
    assert fitted.converged and 2 <= fitted.passes <= 10
    rows = [shards.read_positions(p, keys=["board", "hands", "win"]).arrays for p in split_paths(manifest, "train")]
    board, hands, win = (np.concatenate([r[k] for r in rows]) for k in ("board", "hands", "win"))
    full, y = dense_piece_square(board, hands), win.astype(np.float64)
    penalty = np.ones(full.shape[1])             # pieces and hands: L2 = 1; squares: l2; bias: free
    penalty[:81 * 28] = l2
    penalty[-1] = 0.0
    # Columns no position uses have gradient penalty * w: their optimum is 0. Fit the others directly.
    used = np.flatnonzero(np.abs(full).sum(axis=0) > 0)
    x, penalty = full[:, used], penalty[used]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ theta
        p = 1 / (1 + np.exp(-z))
        loss = np.sum(np.logaddexp(0, z) - y * z) + 0.5 * np.sum(penalty * theta ** 2)
        return loss, x.T @ (p - y) + penalty * theta

    direct = minimize(objective, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B",
                      options={"maxiter": 5000, "gtol": 1e-10, "ftol": 1e-15})
    theta = np.array([*fitted.weights, fitted.bias])
    assert objective(theta[used])[0] <= direct.fun + 1e-6
    np.testing.assert_allclose(theta[used], direct.x, atol=2e-4)
    np.testing.assert_allclose(fitted.logits(board, hands), x @ direct.x, atol=1e-3)
    unused = np.setdiff1d(np.arange(full.shape[1]), used)
    assert unused.size > 2000 and not theta[unused].any()
    table = fitted.square_values()
    assert table.shape == (81, 29) and not table[:, 0].any()
    assert table[40, 7] == pytest.approx(fitted.weights[40 * 28 + 6] + fitted.weights[baselines.COUNT_COLUMNS + 6])
    assert baselines.PieceSquare.from_dict(fitted.to_dict()) == fitted


def test_an_overshooting_step_is_halved_until_the_objective_drops(tmp_path, monkeypatch) -> None:
    manifest = material_dataset(tmp_path, {"train": (200, 0.6, False)}, shards_per_split=1)
    paths = split_paths(manifest, "train")
    plain = baselines.fit_piece_square(paths)
    solve, calls = baselines._solve, []

    def overshoot_first(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
        calls.append(1)
        return solve(matrix, vector) * (20.0 if len(calls) == 1 else 1.0)

    monkeypatch.setattr(baselines, "_solve", overshoot_first)
    halved = baselines.fit_piece_square(paths)
    assert halved.converged and halved.passes > plain.passes       # the passes that halved the 20x step
    assert len(calls) < halved.passes                               # a halving pass solves nothing
    np.testing.assert_allclose(halved.weights, plain.weights, atol=1e-5)


def test_piece_square_fit_needs_a_penalty_and_positions(tmp_path) -> None:
    with pytest.raises(ValueError, match="positive ridge penalty"):
        baselines.fit_piece_square([], l2=0.0)
    with pytest.raises(ValueError, match="no training positions"):
        baselines.fit_piece_square([])


def test_piece_square_learns_the_rook_and_is_scored_with_the_others(tmp_path) -> None:
    manifest = material_dataset(tmp_path, {"train": (400, 0.9, False), "validation": (200, 0.5, False)})
    fitted = baselines.fit_baselines(split_paths(manifest, "train"))
    scores = baselines.score_baselines(fitted, split_paths(manifest, "validation"))
    ps = scores["piece_square"]
    assert ps["positions"] == 200 and ps["l2"] == baselines.PIECE_SQUARE_L2 and ps["passes"] >= 2
    assert ps["accuracy"] == 1.0            # the extra rook on 5e decides every game, both splits
    assert baselines.fit_piece_square(split_paths(manifest, "train")) == fitted.piece_square     # deterministic
    assert "engine" not in scores           # no evaluations in this dataset


# ---------------------------------------------------------------------------------------------------
# engine


def read_split(manifest, split: str) -> dict[str, np.ndarray]:
    rows = [shards.read_positions(p, keys=["eval", "win", "game"]).arrays for p in split_paths(manifest, split)]
    return {k: np.concatenate([r[k] for r in rows]) for k in ("eval", "win", "game")}


def test_engine_scale_is_the_likelihood_maximum_and_scores_cover_evaluated_positions(tmp_path) -> None:
    manifest = material_dataset(tmp_path, {"train": (400, 0.5, False), "validation": (300, 0.5, False)},
                                eval_share={"train": 0.7, "validation": 0.6})
    fitted = baselines.fit_baselines(split_paths(manifest, "train"))
    train = read_split(manifest, "train")
    has = train["eval"] != features.EVAL_NONE
    e, y = np.clip(train["eval"][has].astype(np.float64), -4000, 4000), train["win"][has].astype(np.float64)
    grid = np.arange(20.0, 3000.0, 0.5)                       # brute force: the log-likelihood at every a
    loglik = [np.sum(y * (e / a) - np.logaddexp(0, e / a)) for a in grid]
    best = grid[int(np.argmax(loglik))]
    assert fitted.engine is not None and fitted.engine.fitted == pytest.approx(best, abs=0.5)
    assert fitted.engine.games == 40 and fitted.engine.scale == evalfit.DEFAULT_SCALE    # under 50 games
    assert fitted.engine.coverage == pytest.approx(has.mean())

    scores, games = baselines.score_baselines_by_game(fitted, split_paths(manifest, "validation"))
    valid = read_split(manifest, "validation")
    has = valid["eval"] != features.EVAL_NONE
    z = np.where(has, np.clip(valid["eval"], -4000, 4000) / fitted.engine.scale, 0.0)
    w = valid["win"].astype(np.float64)
    engine = scores["engine"]
    assert engine["coverage"] == pytest.approx(has.mean()) and engine["positions"] == 300
    assert engine["loss"] == pytest.approx(float(np.mean(np.logaddexp(0, z) - w * z)))
    assert engine["accuracy"] == pytest.approx(float(np.mean((z > 0) == (w == 1))))      # no draws here
    evaluated = engine["evaluated"]
    assert evaluated["positions"] == int(has.sum()) and evaluated["games"] == len(np.unique(valid["game"][has]))
    assert evaluated["engine"]["loss"] == pytest.approx(float(np.mean((np.logaddexp(0, z) - w * z)[has])))
    assert evaluated["engine"]["accuracy"] == pytest.approx(float(np.mean(((z > 0) == (w == 1))[has])))
    assert engine["accuracy"] < evaluated["engine"]["accuracy"]     # p = 0.5 counts as "loses" where none
    assert games["engine_evaluated"].summary()["positions"] == int(has.sum())
    assert games["engine"].summary()["loss"] == pytest.approx(engine["loss"])


def test_engine_is_absent_without_evaluations(tmp_path) -> None:
    only_train = material_dataset(tmp_path / "a", {"train": (200, 0.5, False), "validation": (100, 0.5, False)},
                                  eval_share={"train": 0.5})
    fitted = baselines.fit_baselines(split_paths(only_train, "train"))
    assert fitted.engine is not None
    scores, games = baselines.score_baselines_by_game(fitted, split_paths(only_train, "validation"))
    assert "engine" not in scores and "engine" not in games and "engine_evaluated" not in games
    none = material_dataset(tmp_path / "b", {"train": (200, 0.5, False)})
    assert baselines.fit_baselines(split_paths(none, "train")).engine is None
    restored = baselines.Baselines.from_dict(fitted.to_dict())
    assert restored == fitted and restored.engine.scale == fitted.engine.scale
    with pytest.raises(KeyError):        # a cache of the layout before piece_square/engine: evaluate refits
        baselines.Baselines.from_dict({k: v for k, v in fitted.to_dict().items() if k not in ("piece_square", "engine")})
