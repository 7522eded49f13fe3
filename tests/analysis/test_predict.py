"""predict: positions from USI/SFEN text, the win-rate curve of a record, the CLI and its errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.transforms import Bbox

from shogi_dnn import cli, rules
from shogi_dnn.analysis import predict, scoring
from shogi_dnn.analysis.evaluate import load_run_model
from shogi_dnn.commands import predict as predict_command
from shogi_dnn.dataset import features, shards
from shogi_dnn.errors import KifuError
from tests.support.evalrun import make_random_run
from tests.support.paths import DATA

RECORD = DATA / "predict" / "floodgate_81.csa"   # floodgate 2018, 81 moves, Black won (from ../shared/kifu)
REAL_RECORD = (Path(__file__).resolve().parents[2] / "datasets" / "sample" / "real" / "mogproject__mog-core-scala"
               / "jvm" / "src" / "test" / "resources" / "kif" / "game" / "008.kif")     # bundled, 168 moves
KIF = DATA / "kif"
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
    change = np.abs(predict.persistent_changes(curve.p_black))
    assert 0 < len(swings) <= 3 and all(change[swings] > 0)
    assert sorted(change[swings]) == pytest.approx(sorted(change)[-len(swings):])
    table = predict.format_curve(curve).splitlines()
    assert table[0] == f"values: {predict.RAW}; the curve turns {predict.turns(curve.p_black)} times"
    assert table[1] == predict.COLUMNS_NOTE and table[2] == predict.SWING_NOTE
    assert table[3] == "" and table[4].split()[0] == "ply"
    assert len(table) == 87 and sum(line.endswith("<- swing") for line in table) == len(swings)


def test_cli_position_and_record(run, tmp_path, capsys) -> None:
    run_dir, _ = run
    assert cli.main(["predict", "--run-dir", str(run_dir), "startpos", "moves", "7g7f"]) == 0
    out = capsys.readouterr().out
    assert AFTER_7G7F in out and "win probability for the side to move (White)" in out  # 7g7f: White to move
    assert cli.main(["predict", "--run-dir", str(run_dir), "startpos"]) == 0
    assert "win probability for the side to move (Black)" in capsys.readouterr().out
    png = tmp_path / "game.png"
    assert cli.main(["predict", "--run-dir", str(run_dir), "--out", str(png), str(RECORD)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    out = capsys.readouterr().out
    assert "<- swing" in out and "game 1 of 1 in floodgate_81.csa" in out
    assert "p(to move): the model's win probability for the side to move there" in out
    assert " end  result: Black (yyr) won by resign after 81 moves" in out.splitlines()
    assert f"split unknown ({DATA / 'manifest.json'}: no manifest" in out   # the fixture's data is no dataset


def test_bad_input_is_one_line(run, tmp_path, capsys) -> None:
    run_dir, _ = run
    with pytest.raises(KifuError):
        predict.read_position("startpos moves 7g7f 7g7f")
    cases = [[str(run_dir), "startpos", "moves", "7g7f", "7g7f"],
             [str(run_dir), "lnsgkgsnl/1r5b1/ppppppppp/9/9/9 b - 1"],
             [str(run_dir), "--game", "5", str(RECORD)],
             [str(tmp_path / "missing"), "startpos"],
             [str(run_dir), str(tmp_path / "no-such-game.kif")],
             [str(run_dir), "games/typo.csa"]]
    for args in cases:
        assert cli.main(["predict", "--run-dir", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(cases) and all(line.startswith("shogi-dnn predict: error:") for line in err)
    assert "no game 5 in the file (1 found; --game takes 1 to 1)" in err[2]
    assert "no such run directory" in err[3]
    assert err[4] == f"shogi-dnn predict: error: no such file: {tmp_path / 'no-such-game.kif'}"
    assert err[5] == "shogi-dnn predict: error: no such file: games/typo.csa"


def test_cli_search_and_notation(run, tmp_path, capsys) -> None:
    """The default search (quiescence) changes the values of `--search none`; --notation usi writes the
    moves in USI; a bad --search is one line."""
    run_dir, _ = run
    png = str(tmp_path / "game.png")
    tables = {}
    for option in (["--search", "none"], [], ["--notation", "usi"]):
        assert cli.main(["predict", "--run-dir", str(run_dir), "--out", png, *option, str(RECORD)]) == 0
        tables[" ".join(option)] = capsys.readouterr().out.splitlines()
    raw, default, usi = tables["--search none"], tables[""], tables["--notation usi"]
    assert f"values: {predict.RAW};" in raw[2] and "values: capture quiescence (2 plies" in default[2]

    def column(table: list[str], k: int) -> list[str]:
        return [line.removesuffix("<- swing").split()[k] for line in table if line[:4].strip().isdigit()]
    assert column(raw, 1)[:2] == column(default, 1)[:2] == ["-", "▲７六歩(77)"]
    assert column(usi, 1)[:2] == ["-", "7g7f"] and column(usi, -2) == column(default, -2)
    assert len(column(raw, -2)) == 82 and column(raw, -2) != column(default, -2)     # p(black) differs
    assert cli.main(["predict", "--run-dir", str(run_dir), "--search", "deep", str(RECORD)]) == 2
    assert "unknown search 'deep'" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("folder", ["my games", "棋譜\u3000集"])       # a space, a full-width space
def test_a_record_path_with_a_space_is_a_record(run, tmp_path, capsys, folder: str) -> None:
    # Such a path was read as a position, and the error blamed the SFEN.
    run_dir, _ = run
    path = tmp_path / folder / "floodgate 81.csa"
    path.parent.mkdir()
    path.write_bytes(RECORD.read_bytes())
    assert predict_command.is_record_argument([str(path)])
    assert not predict_command.is_record_argument([str(tmp_path / "no such.csa")])
    assert not predict_command.is_record_argument(["startpos moves " + "7g7f 3c3d " * 200])  # name too long
    assert cli.main(["predict", "--run-dir", str(run_dir), "--out", str(tmp_path / "g.png"), str(path)]) == 0
    assert "game 1 of 1 in floodgate 81.csa" in capsys.readouterr().out


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


class RawSwings(predict.GameCurve):
    """A curve whose marked swings are its biggest one-move changes, a half-exchange included: the labels'
    worst case (adjacent swings on a sawtooth)."""

    def swings(self, count: int = predict.SWINGS) -> list[int]:
        return sorted((np.argsort(-np.abs(np.diff(self.p_black)), kind="stable")[:count] + 1).tolist())


def test_swing_labels_do_not_overlap() -> None:
    """Adjacent big swings (the sawtooth of an untrained model) get labels that do not overlap."""
    record = predict.read_game(RECORD)
    positions = predict.game_positions(record)
    p_black = np.where(np.arange(82) % 2 == 0, 0.8, 0.2)     # every ply a big swing: the worst case
    p_black[40:46] = [0.5, 0.9, 0.1, 0.95, 0.05, 0.5]
    curve = RawSwings(positions, p_black, p_black)
    fig = predict.curve_figure(curve, "test")
    renderer = fig.canvas.get_renderer()
    boxes = [predict._text_box(t, renderer) for t in fig.axes[0].texts]
    assert len(boxes) == len(curve.swings()) == predict.SWINGS
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


@pytest.mark.parametrize("p_end", [0.99, 0.01])
def test_swing_and_end_labels_stay_inside_the_frame(p_end: float) -> None:
    """Swings at the last plies and at 0% / 100% (the corners) and the recorded ending: every label inside
    the axes, none overlapping another, each swing named by its ply and KIF move."""
    record = predict.read_game(RECORD)
    positions = predict.game_positions(record)
    p_black = np.full(82, 0.5)
    p_black[[80, 81]] = [1 - p_end, p_end]           # changes 0.49 and 0.98, ending in a corner
    p_black[1] = 0.95                                   # 0.45 (and back at ply 2: the first of a tie wins)
    curve = RawSwings(positions, p_black, p_black)
    fig = predict.curve_figure(curve, "test", record, ["in the run's train split"])
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    frame = ax.get_window_extent(renderer)
    boxes = [predict._text_box(t, renderer) for t in ax.texts]
    texts = [t.get_text() for t in ax.texts]
    assert texts[0] == "resign: Black won" and len(texts) == 1 + predict.SWINGS
    assert texts[1:] == [f"{i} {positions.notation[i]}" for i in curve.swings()]
    assert curve.swings() == [1, 80, 81]
    assert positions.notation[1] == "▲７六歩(77)" and positions.notation[2].startswith("△")
    for box in boxes:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert "Black (yyr) won by resign after 81 moves · in the run's train split" in ax.get_title()


def test_labels_do_not_sit_on_the_curve() -> None:
    """The demo's picture: '53 ▲同 角(85)' and 'resign: White won' were drawn across the curve. Swings
    close together on a jagged curve, and an ending below a curve that runs just above it: no label's text
    crosses the curve, nor another label, and none covers a marked point."""
    record = predict.read_game(RECORD)
    positions = predict.game_positions(record)
    rng = np.random.default_rng(3)
    p_black = np.clip(0.45 + 0.08 * rng.standard_normal(82), 0.3, 0.6)
    p_black[[47, 48, 49, 50, 51, 52, 53, 54]] = [0.36, 0.40, 0.64, 0.55, 0.40, 0.37, 0.64, 0.52]
    p_black[66:] = np.linspace(0.3, 0.03, 16) + 0.04 * (np.arange(16) % 2)
    curve = predict.GameCurve(positions, p_black, p_black)
    fig = predict.curve_figure(curve, "test", record)
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    line = ax.lines[0]
    pixels = line.get_transform().transform_path(line.get_path())
    boxes = [predict._text_box(t, renderer) for t in ax.texts]
    assert len(boxes) == 1 + predict.SWINGS and {49, 53} <= set(curve.swings())
    assert [t.get_text() for t in ax.texts if pixels.intersects_bbox(predict._text_box(t, renderer),
                                                                      filled=False)] == []
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    points = ax.transData.transform([(i, 100 * p_black[i]) for i in curve.swings()])
    assert not any(box.contains(x, y) for box in boxes for x, y in points)


def test_leader_lines_cross_no_other_leader_and_keep_off_other_points() -> None:
    """Swings at plies 56, 57, 58 of a sawtooth (found by an acceptance check on a real record): 58's leader
    crossed 56's and passed 0.3 px from 56's point, so it looked attached to 56. No two leaders cross, each
    keeps LEADER_GAP_PX off the other points' squares, and none crosses the curve."""
    record = predict.read_game(REAL_RECORD)
    positions = predict.game_positions(record)
    p_black = np.where(np.arange(len(positions.moves) + 1) % 2 == 0, 0.45, 0.55)
    p_black[50:64] = [0.417, 0.553, 0.412, 0.545, 0.411, 0.57, 0.402, 0.597, 0.413, 0.577, 0.432, 0.554,
                      0.432, 0.509]
    curve = RawSwings(positions, p_black, p_black)
    assert curve.swings() == [56, 57, 58]
    fig = predict.curve_figure(curve, "test", record)
    renderer, ax = fig.canvas.get_renderer(), fig.axes[0]
    line = ax.lines[0]
    pixels = line.get_transform().transform_path(line.get_path())
    leaders = [(t, predict._leader(ax.transData.transform(t.xy), predict._text_box(t, renderer)))
               for t in ax.texts if t.arrow_patch is not None]
    assert len(leaders) >= 2
    gap = predict.POINT_PX + predict.LEADER_GAP_PX
    squares = {i: ax.transData.transform((i, 100 * p_black[i])) for i in curve.swings()}
    for n, (text, leader) in enumerate(leaders):
        assert not any(leader.intersects_path(other, filled=False) for _, other in leaders[n + 1:]), text
        assert not predict._clear_of_point(leader).intersects_path(pixels, filled=False), text.get_text()
        for (x, y) in (xy for xy in squares.values() if not np.allclose(xy, ax.transData.transform(text.xy))):
            box = Bbox.from_extents(x - gap, y - gap, x + gap, y + gap)
            assert not leader.intersects_bbox(box, filled=False), text.get_text()


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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300).stdout
    assert out.split("\n")[0] == "['keras']"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A dataset of 4 real games (2 train, 2 validation by convert's hash split), and a 5th game not in it."""
    import shutil

    folder = tmp_path_factory.mktemp("records")
    for path in (RECORD, KIF / "jt201409130101.kif", KIF / "mogproject-001.kif", KIF / "piyo-shogi_KY.kifu"):
        shutil.copy(path, folder / path.name)
    out = tmp_path_factory.mktemp("dataset") / "ds"
    assert cli.main(["convert", str(folder), "--out", str(out), "--val-fraction", "0.5", "--workers", "1",
                     "--no-progress", "--quiet"]) == 0
    return folder, out


def split_by_table(data_dir, name: str) -> str | None:
    """The split whose shard lists a file of this name in its games table (read directly)."""
    manifest = shards.read_manifest(data_dir)
    for info in manifest.shards:
        sources = shards.read_games(manifest.shard_path(info))["source"]
        if any(Path(source).name == name for source in sources):
            return info.split
    return None


def test_find_in_dataset_by_source_and_by_positions(converted, tmp_path) -> None:
    folder, data = converted
    splits = {}
    for path in sorted(folder.iterdir()):
        record = predict.read_game(path)
        match = predict.find_in_dataset(data, record, predict.game_positions(record))
        assert match.split == split_by_table(data, path.name) and match.by == "source file and line"
        splits[path.name] = match.split
        assert match.describe().startswith(f"in the run's {match.split} split (")
        # The same game from another file: found by its positions, in the same split.
        renamed = tmp_path / f"copy-of-{path.name}"
        renamed.write_bytes(path.read_bytes())
        copy = predict.read_game(renamed)
        again = predict.find_in_dataset(data, copy, predict.game_positions(copy))
        assert (again.split, again.game_id, again.by) == (match.split, match.game_id, "positions")
    assert set(splits.values()) == {"train", "validation"}          # both splits are exercised
    other = predict.read_game(KIF / "mogproject-014.kif")
    missing = predict.find_in_dataset(data, other, predict.game_positions(other))
    assert missing.split is None and missing.describe() == f"not in the run's data ({data})"
    assert missing.short() == "not in the run's data"


def test_choose_game_names_the_game_and_how_to_pick_another() -> None:
    choice = predict.choose_game(KIF / "conflicting_end_markers.kif", 2)
    assert choice.describe() == "game 2 of 2 in conflicting_end_markers.kif (another: --game N, 1 to 2)"
    assert predict.result_text(choice.record) == "White (次の後手) won by resign after 2 moves"
    assert predict.choose_game(RECORD).describe() == "game 1 of 1 in floodgate_81.csa"
    with pytest.raises(KifuError, match="conflicting results"):          # game 1 of that file is broken
        predict.choose_game(KIF / "conflicting_end_markers.kif", 1)


def test_cli_says_the_split_of_the_runs_data(run, converted, tmp_path, capsys) -> None:
    run_dir, _ = run
    folder, data = converted
    args = ["predict", "--run-dir", str(run_dir), "--data", str(data), "--out", str(tmp_path / "g.png")]
    assert cli.main([*args, str(folder / RECORD.name)]) == 0
    out = capsys.readouterr().out
    split = split_by_table(data, RECORD.name)
    assert f"in the run's {split} split ({split}-00000.h5, game id" in out
    assert "matched by source file and line" in out
    assert cli.main([*args, str(KIF / "mogproject-014.kif")]) == 0
    assert f"not in the run's data ({data})" in capsys.readouterr().out


@pytest.fixture(scope="module")
def policy_run(tmp_path_factory):
    from shogi_dnn.config import ModelConfig

    run_dir = make_random_run(tmp_path_factory.mktemp("predict-policy") / "run", DATA, devices=1,
                              model_cfg=ModelConfig(blocks=1, filters=8, value_hidden=8, policy_head=True))
    return run_dir, load_run_model(run_dir)


@pytest.mark.parametrize("mirror", [False, True])
def test_policy_model_shows_its_top_moves(policy_run, mirror: bool) -> None:
    from shogi_dnn.dataset import policy
    from shogi_dnn.training import model as model_lib

    _, model = policy_run
    called = model_lib.mirror_averaged(model) if mirror else model
    record = predict.read_game(RECORD)
    curve = predict.game_curve(called, record)
    legal_counts = [int(policy.legal_label_mask(b, h).sum()) for b, h in zip(curve.positions.board,
                                                                               curve.positions.hands)]
    assert [len(top) for top in curve.top] == [min(n, predict.TOP_MOVES) for n in legal_counts]
    assert curve.top[-1] == ()                              # the final position: mated, no legal move
    # By hand at the start position: the legal labels' softmax, its best three.
    start = curve.positions
    logits = np.asarray(model_lib.policy_logits(model, start.board[:1], start.hands[:1], mirror))[0]
    legal = np.flatnonzero(policy.legal_label_mask(start.board[0], start.hands[0]))
    p = np.exp(logits[legal] - logits[legal].max())
    p /= p.sum()
    best = legal[np.argsort(-p, kind="stable")[:3]]
    expected = [features.decode_move(policy.label_to_move(start.board[0], int(label)), rules.BLACK)
                for label in best]
    assert [m.usi for m in curve.top[0]] == expected
    assert [m.p for m in curve.top[0]] == pytest.approx(sorted(p, reverse=True)[:3], rel=1e-5)
    assert all(m.notation.startswith("▲") for m in curve.top[0])
    assert all(m.notation.startswith("△") for m in curve.top[1])        # White to move after 7g7f
    # The value is the value-only path's.
    np.testing.assert_allclose(curve.p_to_move[:1], scoring.sigmoid(np.asarray(
        model_lib.value_logits(model, start.board[:1], start.hands[:1], mirror), np.float64)), rtol=1e-6)
    table = predict.format_curve(curve, record).splitlines()
    assert table[3] == predict.TOP_NOTE and "network's top 3" in table[5]
    row = table[6]                                          # the start position: next is 7g7f
    assert row.split()[6] == "▲７六歩(77)" and curve.top[0][0].notation in row
    played = [i for i, top in enumerate(curve.top[:-1]) if any(m.usi == start.moves[i + 1] for m in top)]
    assert all("*" in table[6 + i] for i in played)
    row = predict.format_curve(curve, record, notation="usi").splitlines()[6]
    assert row.split()[6] == "7g7f" and curve.top[0][0].usi in row and "▲" not in row


def test_value_model_table_is_unchanged(run) -> None:
    _, model = run
    curve = predict.game_curve(model, predict.read_game(RECORD))
    assert curve.top == () and "network's top" not in predict.format_curve(curve)
