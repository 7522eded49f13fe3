"""Mirror averaging (model.value_logits, used by evaluate and predict): the mean of the probabilities of a
position and its left-right mirror, by hand; mirror-invariant predictions; evaluate and predict with and
without --mirror-average."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shogi_dnn import cli, rules
from shogi_dnn.analysis import evaluate, predict, report, scoring
from shogi_dnn.analysis.evaluate import load_run_model
from shogi_dnn.dataset import features
from shogi_dnn.training import model as model_lib
from shogi_dnn.training import pipeline
from tests.support.evaldata import material_dataset, split_paths
from tests.support.evalrun import make_random_run
from tests.support.paths import DATA

AFTER_7G7F = "lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2"
AFTER_7G7F_MIRRORED = "lnsgkgsnl/1b5r1/ppppppppp/9/9/6P2/PPPPPP1PP/1R5B1/LNSGKGSNL w - 2"   # 3g3f's mirror
RECORD = DATA / "predict" / "floodgate_81.csa"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    manifest = material_dataset(root / "data", {"train": (200, 0.5, False), "validation": (150, 0.5, False)})
    run_dir = make_random_run(root / "run", root / "data", devices=2, per_replica_batch=16)
    return manifest, run_dir, load_run_model(run_dir)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def test_averaged_probability_is_the_mean_of_the_two_by_hand(planted) -> None:
    _, _, net = planted
    game = predict.game_positions(predict.read_game(RECORD))
    board, hands = game.board, game.hands
    direct = np.asarray(net({"board": board, "hands": hands})).reshape(-1)
    mirrored = np.asarray(net({"board": features.mirror_board(board), "hands": hands})).reshape(-1)
    assert not np.allclose(direct, mirrored)          # the random model is not mirror-symmetric
    averaged = np.asarray(model_lib.value_logits(net, board, hands, mirror_average=True))
    assert averaged.shape == (len(board),) and averaged.dtype == np.float32
    np.testing.assert_allclose(_sigmoid(averaged), (_sigmoid(direct) + _sigmoid(mirrored)) / 2, rtol=1e-5)
    plain = np.asarray(model_lib.value_logits(net, board, hands))
    np.testing.assert_allclose(plain, direct, rtol=1e-6)
    # predict's path (the wrapped model of `predict --mirror-average`) is the same function.
    np.testing.assert_allclose(predict.predict_logits(model_lib.mirror_averaged(net), board, hands), averaged,
                               rtol=1e-6)


def test_averaging_is_stable_for_large_logits() -> None:
    """logit((sigmoid(a) + sigmoid(b)) / 2) without overflow: a stand-in model with chosen logits."""
    a = np.asarray([100.0, 100.0, -100.0, 0.0, 3.0], np.float32)
    b = np.asarray([90.0, -100.0, -90.0, 0.0, -1.0], np.float32)
    def fake(x, training=False):
        return np.concatenate([a, b])[:, None]
    board = np.zeros((len(a), 81), np.uint8)
    got = np.asarray(model_lib.value_logits(fake, board, np.zeros((len(a), 14), np.uint8), mirror_average=True))
    exact = [-np.log((np.exp(-100.0) + np.exp(-90.0)) / 2), 0.0, np.log((np.exp(-100.0) + np.exp(-90.0)) / 2), 0.0,
             np.log((_sigmoid(3) + _sigmoid(-1)) / (2 - _sigmoid(3) - _sigmoid(-1)))]
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)


def test_a_position_and_its_mirror_get_the_same_averaged_prediction(planted, capsys) -> None:
    _, run_dir, net = planted
    averaged_net = model_lib.mirror_averaged(net)
    sfen, p = predict.predict_position(averaged_net, AFTER_7G7F)
    mirror_sfen, p_mirror = predict.predict_position(averaged_net, AFTER_7G7F_MIRRORED)
    assert (sfen, mirror_sfen) == (AFTER_7G7F, AFTER_7G7F_MIRRORED)
    board, _ = features.encode_position(rules.new_position(AFTER_7G7F))
    board_m, _ = features.encode_position(rules.new_position(AFTER_7G7F_MIRRORED))
    np.testing.assert_array_equal(features.mirror_board(board[None])[0], board_m)
    assert p == pytest.approx(p_mirror, rel=1e-6)
    plain, plain_mirror = (predict.predict_position(net, s)[1] for s in (AFTER_7G7F, AFTER_7G7F_MIRRORED))
    assert plain != pytest.approx(plain_mirror, rel=1e-3)
    assert p == pytest.approx((plain + plain_mirror) / 2, rel=1e-5)
    # Many positions at once: the averaged logits of the boards and of their mirrors agree.
    game = predict.game_positions(predict.read_game(RECORD))
    np.testing.assert_allclose(
        model_lib.value_logits(net, features.mirror_board(game.board), game.hands, mirror_average=True),
        model_lib.value_logits(net, game.board, game.hands, mirror_average=True), rtol=1e-5, atol=1e-6)
    # The CLI switch.
    assert cli.main(["predict", "--run-dir", str(run_dir), "--mirror-average", AFTER_7G7F_MIRRORED]) == 0
    assert f"(mirror-averaged): {p:.3f}" in capsys.readouterr().out
    curve = predict.game_curve(averaged_net, predict.read_game(RECORD))
    np.testing.assert_allclose(curve.p_to_move, _sigmoid(model_lib.value_logits(
        net, game.board, game.hands, mirror_average=True)), rtol=1e-5)


def test_evaluate_with_and_without_mirror_averaging(planted) -> None:
    manifest, run_dir, net = planted
    plain = evaluate.evaluate_run(run_dir, split="validation", global_batch=32, mirror_average=False)
    averaged = evaluate.evaluate_run(run_dir, split="validation", global_batch=32)     # the default
    assert plain["mirror_average"] is False and averaged["mirror_average"] is True
    assert json.loads((run_dir / "eval-validation.json").read_text())["mirror_average"] is True
    for result in (plain, averaged):      # both valid: every row, per-GPU rows adding up, finite scores
        assert result["positions"] == 150 and sum(g["positions"] for g in result["per_gpu"]) == 150
        weighted = sum(g["loss"] * g["positions"] for g in result["per_gpu"]) / 150
        assert weighted == pytest.approx(result["loss"], rel=1e-9)
        assert all(np.isfinite(result[k]) and 0 <= result[k] for k in ("loss", "brier", "ece", "accuracy"))
        assert sum(r["positions"] for r in result["reliability"]) == 150
    assert plain["loss"] != pytest.approx(averaged["loss"], rel=1e-6)
    assert plain["baselines"] == averaged["baselines"]
    # The averaged totals are those of model.value_logits on every row.
    rows = list(pipeline.make_eval_dataset(split_paths(manifest, "validation"), global_batch=64))
    logits = np.concatenate([np.asarray(model_lib.value_logits(net, b["board"], b["hands"], mirror_average=True))
                             for b in rows])
    win = np.concatenate([b["win"].numpy() for b in rows])
    assert averaged["loss"] == pytest.approx(scoring.log_loss(logits, win), rel=1e-5)
    assert averaged["accuracy"] == pytest.approx(scoring.accuracy(logits, win))
    assert "mirror-averaged" in evaluate.format_table(averaged)
    assert "mirror-averaged" not in evaluate.format_table(plain)
    assert "| model (mirror-averaged) |" in "\n".join(report._eval_lines("validation", averaged))
    assert "| model |" in "\n".join(report._eval_lines("validation", plain))
    # The CLI switch.
    assert cli.main(["evaluate", "--run-dir", str(run_dir), "--no-mirror-average"]) == 0
    assert json.loads((run_dir / "eval-validation.json").read_text())["mirror_average"] is False
    assert cli.main(["evaluate", "--run-dir", str(run_dir)]) == 0          # on by default
    assert json.loads((run_dir / "eval-validation.json").read_text())["mirror_average"] is True


def test_functions_and_commands_share_one_default() -> None:
    """The Python functions a notebook calls average as the commands do unless told otherwise."""
    import inspect

    from shogi_dnn.analysis import run_model
    from shogi_dnn.commands import evaluate as evaluate_command
    from shogi_dnn.commands import export as export_command
    from shogi_dnn.commands import predict as predict_command
    from shogi_dnn.commands import usi as usi_command
    from shogi_dnn.engine import players

    functions = (evaluate.evaluate_run, evaluate.evaluate_checked, run_model.load_predictor,
                 players.make_evaluator, players.KerasEvaluator)
    defaults = {f.__qualname__: inspect.signature(f).parameters["mirror_average"].default for f in functions}
    parsed = {"evaluate": evaluate_command.parse_args(["--run-dir", "r"]),
              "predict": predict_command.parse_args(["startpos"]),
              "export": export_command.parse_args(["--run-dir", "r", "--format", "onnx"]),
              "usi": usi_command.parse_args([])}
    defaults.update({name: args.mirror_average for name, args in parsed.items()})
    assert defaults == dict.fromkeys(defaults, run_model.MIRROR_AVERAGE) and run_model.MIRROR_AVERAGE is True
