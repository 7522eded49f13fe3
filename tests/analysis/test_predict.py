"""predict: positions from USI/SFEN text, the win-rate curve of a record, the CLI and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from shogi_dnn import cli, features, rules
from shogi_dnn.analysis import predict, scoring
from shogi_dnn.analysis.evaluate import load_run_model
from shogi_dnn.errors import KifuError
from tests.support.evalrun import make_random_run
from tests.support.paths import DATA

RECORD = DATA / "predict" / "floodgate_81.csa"       # floodgate 2018, 81 moves, Black won (from ../shared/kifu)
AFTER_7G7F = "lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = make_random_run(tmp_path_factory.mktemp("predict") / "run", DATA, devices=1)
    return run_dir, load_run_model(run_dir)


def test_position_forms_agree_and_match_the_model(run) -> None:
    _, model = run
    sfen, p = predict.predict_position(model, "startpos moves 7g7f")
    assert sfen == AFTER_7G7F
    assert predict.predict_position(model, AFTER_7G7F) == (sfen, pytest.approx(p))
    assert predict.predict_position(model, f"position sfen {AFTER_7G7F}")[1] == pytest.approx(p)
    board, hands = features.encode_position(rules.new_position(AFTER_7G7F))
    logit = model({"board": board[None], "hands": hands[None]}).numpy()[0, 0]
    assert p == pytest.approx(float(scoring.sigmoid(logit)), rel=1e-6)
    assert 0.0 < p < 1.0


def test_game_curve_is_from_blacks_view(run) -> None:
    _, model = run
    record = predict.read_game(RECORD)
    curve = predict.game_curve(model, record)
    assert len(curve.p_black) == len(record.moves) + 1 == 82
    white = curve.positions.turn == rules.WHITE
    np.testing.assert_allclose(curve.p_black[white], 1 - curve.p_to_move[white])
    np.testing.assert_allclose(curve.p_black[~white], curve.p_to_move[~white])
    # The curve's 2nd position is the known position after 7g7f (the record's first move).
    assert curve.positions.moves[1] == "7g7f" and curve.positions.sfens[1] == AFTER_7G7F
    assert curve.p_to_move[1] == pytest.approx(predict.predict_position(model, "startpos moves 7g7f")[1])
    swings = curve.swings(3)
    change = np.abs(np.diff(curve.p_black))
    assert sorted(change[np.array(swings) - 1]) == pytest.approx(sorted(change)[-3:])
    table = predict.format_curve(curve).splitlines()
    assert len(table) == 83 and sum("<- swing" in line for line in table) == 3


def test_cli_position_and_record(run, tmp_path, capsys) -> None:
    run_dir, _ = run
    assert cli.main(["predict", "--run-dir", str(run_dir), "startpos", "moves", "7g7f"]) == 0
    out = capsys.readouterr().out
    assert AFTER_7G7F in out and "win probability for the side to move" in out
    png = tmp_path / "game.png"
    assert cli.main(["predict", "--run-dir", str(run_dir), "--out", str(png), str(RECORD)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    assert "<- swing" in capsys.readouterr().out


def test_bad_input_is_one_line(run, tmp_path, capsys) -> None:
    run_dir, _ = run
    with pytest.raises(KifuError):
        predict.read_position("startpos moves 7g7f 7g7f")
    cases = [[str(run_dir), "startpos", "moves", "7g7f", "7g7f"],
             [str(run_dir), "lnsgkgsnl/1r5b1/ppppppppp/9/9/9 b - 1"],
             [str(run_dir), "--game", "5", str(RECORD)],
             [str(tmp_path / "missing"), "startpos"]]
    for args in cases:
        assert cli.main(["predict", "--run-dir", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(cases) and all(line.startswith("shogi-dnn predict: error:") for line in err)
    assert "no game 5" in err[2] and "no such run directory" in err[3]


@pytest.mark.slow
def test_trained_model_on_known_positions(tmp_path_factory) -> None:
    from tests.support.trainedrun import trained_run

    run_dir, _ = trained_run(tmp_path_factory)
    model = load_run_model(run_dir)
    # The planted rule: the side with the rook on 5e wins (kings on 5a and 5i, a pawn blocks the check).
    assert predict.predict_position(model, "4k4/9/4p4/9/4R4/9/9/9/4K4 b - 1")[1] > 0.8     # Black's rook
    assert predict.predict_position(model, "4k4/9/4p4/9/4r4/9/9/9/4K4 b - 1")[1] < 0.2     # White's rook
    # White to move with Black's rook: the side to move loses (the board is seen from White's side).
    assert predict.predict_position(model, "4k4/9/4P4/9/4R4/9/9/9/4K4 w - 1")[1] < 0.2


def test_swing_labels_do_not_overlap() -> None:
    """Adjacent big swings (the sawtooth of an untrained model) get labels that do not overlap."""
    record = predict.read_game(RECORD)
    positions = predict.game_positions(record)
    p_black = np.where(np.arange(82) % 2 == 0, 0.8, 0.2)     # every ply a big swing: the worst case
    p_black[40:46] = [0.5, 0.9, 0.1, 0.95, 0.05, 0.5]
    curve = predict.GameCurve(positions, p_black, p_black)
    fig = predict.curve_figure(curve, "test")
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in fig.axes[0].texts]
    assert len(boxes) == len(curve.swings()) == predict.SWINGS
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_cli_says_what_it_loads_before_tensorflow_starts(run, capsys) -> None:
    run_dir, _ = run
    assert cli.main(["predict", "--run-dir", str(run_dir), "startpos"]) == 0
    err = capsys.readouterr().err
    assert f"predict: loading {run_dir / 'model.keras'}" in err and "then the position" in err


def test_run_model_imports_keras_without_its_optional_extras() -> None:
    import subprocess
    import sys

    code = ("import sys; from shogi_dnn.analysis import run_model; run_model.import_keras_lean(); "
            "print(sorted(m for m in ('IPython', 'matplotlib.pyplot', 'keras') if m in sys.modules))")
    from tests.support.paths import REPO
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300).stdout
    assert out.split("\n")[0] == "['keras']"
