"""analysis/tactics.py: free captures on hand-built positions and against the rules backend's legal moves
(data games and random playouts), the capture values, the calibration block by hand, and evaluate's
`free_capture` block on a tiny dataset."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from shogi_dnn.analysis import tactics
from shogi_dnn.dataset import features
from shogi_dnn.kifu import RECORD_SUFFIXES, GameRecord, read_record_file
from shogi_dnn.rules import NUM_PIECE_TYPES, new_position, square_index
from tests.support.paths import DATA

START = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1"
PAWN, GOLD, ROOK = 180.0, 1080.0, 1980.0           # default capture values: board + hand value


def encoded(sfen: str) -> tuple[np.ndarray, np.ndarray, int]:
    position = new_position(sfen)
    board, hands = features.encode_position(position)
    return board, hands, position.turn


def best_of(sfen: str) -> float | None:
    """The value of the best free capture of a position given by SFEN, None without one."""
    board, _, _ = encoded(sfen)
    free, best = tactics.free_captures(board[None])
    return float(best[0]) if free[0] else None


def reference(board: np.ndarray, hands: np.ndarray, turn: int) -> float | None:
    """The definition, on the backend's legal moves: the best capture after which the opponent has no
    legal move to the captured square."""
    position = new_position(features.decode_position(board, hands, turn, 0))
    best = None
    for move in position.legal_usi():
        if move[1] == "*":
            continue
        taken = position.piece_type_at(square_index(int(move[2]), ord(move[3]) - ord("a") + 1))
        if taken is None or taken[1] == turn:
            continue
        code = NUM_PIECE_TYPES + taken[0]                  # the opponent's piece, as the view codes it
        after = position.copy()
        after.push_usi(move)
        if not any(reply[2:4] == move[2:4] for reply in after.legal_usi()):
            value = float(tactics.DEFAULT_CAPTURE_VALUES[code])
            best = value if best is None else max(best, value)
    return best


def test_a_free_pawn_and_a_defended_one() -> None:
    # The black rook on 5h takes the white pawn on 5d: nothing of White's reaches 5d.
    assert best_of("4k4/9/9/4p4/9/9/9/4R4/K8 b - 1") == PAWN
    # The same pawn defended by a white gold on 5c: not free.
    assert best_of("4k4/9/4g4/4p4/9/9/9/4R4/K8 b - 1") is None
    # No capture at all in the start position; the best of two free captures is the dearer piece.
    assert best_of(START) is None
    assert best_of("4k4/9/9/4p4/9/9/9/1r2R4/K8 b - 1") == ROOK


def test_the_capture_is_judged_on_the_position_after_it() -> None:
    # The black gold on 6e takes the pawn on 5e; leaving 6e opens the white rook's line on rank e
    # to 5e, so the gold is taken back: not free (before the capture nothing of White's attacked 5e).
    assert best_of("4k4/9/9/9/r2Gp4/9/9/9/8K b - 1") is None
    # Without the rook, free.
    assert best_of("4k4/9/9/9/3Gp4/9/9/9/8K b - 1") == PAWN


def test_only_legal_captures_and_legal_recaptures_count() -> None:
    # A pinned defender does not take back: the white gold on 5d guards 5e but is pinned on rank d
    # (white king 9d, black rook 1d), so the black pawn's capture on 5e is free. (The white silver on 4c
    # guards the gold, so the rook's capture of the gold is not free.)
    assert best_of("9/9/5s3/k3g3R/4p4/4P4/9/9/K8 b - 1") == PAWN
    # The king does not take back onto a square the mover still covers: the silver takes on 5b (check),
    # the black lance on 5i covers 5b, the white king on 5a cannot recapture.
    assert best_of("4k4/4p4/5S3/9/9/9/9/9/K3L4 b - 1") == PAWN
    # Without the lance the king takes back.
    assert best_of("4k4/4p4/5S3/9/9/9/9/9/K8 b - 1") is None
    # A pinned capturer cannot take: the black gold on 5h, pinned on file 5 by the white rook on 5a
    # against the black king on 5i, cannot take the pawn on 4g.
    assert best_of("k3r4/9/9/9/9/9/5p3/4G4/4K4 b - 1") is None


def test_white_to_move_is_read_in_its_own_view() -> None:
    # The first test's position turned round, White to move: the white rook takes the black pawn.
    assert best_of("8k/4r4/9/9/9/4P4/9/9/4K4 w - 1") == PAWN
    assert best_of("8k/4r4/9/9/9/4P4/4G4/9/4K4 w - 1") is None


def _data_positions() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    boards, hands, turns = [], [], []
    for path in sorted(p for p in DATA.rglob("*") if p.suffix.lower() in RECORD_SUFFIXES):
        for record in read_record_file(path):
            if not isinstance(record, GameRecord):
                continue
            position = new_position(record.start_sfen)
            for ply in range(len(record.moves) + 1):
                board, hand = features.encode_position(position)
                boards.append(board), hands.append(hand), turns.append(position.turn)
                if ply < len(record.moves):
                    position.push_usi(record.moves[ply])
    return np.stack(boards), np.stack(hands), np.asarray(turns)


def _random_positions(games: int = 24, plies: int = 150, seed: int = 5) -> tuple[np.ndarray, ...]:
    rng = random.Random(seed)
    boards, hands, turns = [], [], []
    for _ in range(games):
        position = new_position(START)
        for ply in range(plies):
            moves = position.legal_usi()
            if not moves:
                break
            if ply % 3 == 0:                         # both sides to move
                board, hand = features.encode_position(position)
                boards.append(board), hands.append(hand), turns.append(position.turn)
            position.push_usi(rng.choice(moves))
    return np.stack(boards), np.stack(hands), np.asarray(turns)


@pytest.mark.parametrize("source", ["data", "random"])
def test_free_captures_match_the_legal_moves_of_the_rules_backend(source: str) -> None:
    board, hands, turns = _data_positions() if source == "data" else _random_positions()
    free, best = tactics.free_captures(board)
    expected = [reference(b, h, int(t)) for b, h, t in zip(board, hands, turns)]
    assert len(board) > 1000 and min(turns.mean(), 1 - turns.mean()) > 0.4
    assert 50 < free.sum() < len(board) - 50                              # both kinds are common
    for i, value in enumerate(expected):
        assert (value is not None, value or 0.0) == (bool(free[i]), best[i]), \
            features.decode_position(board[i], hands[i], int(turns[i]), 0)


def test_capture_values_from_the_material_baseline() -> None:
    names = ["P", "L", "N", "S", "G", "B", "R", "+P", "+L", "+N", "+S", "+B", "+R"]
    values = {name: 0.1 * (i + 1) for i, name in enumerate(names)}
    values.update({f"{name}*": 1.0 * (i + 1) for i, name in enumerate(names[:7])})
    table = tactics.capture_values_from_material(values)
    assert table.shape == (29,) and not table[:15].any() and table[22] == 0.0          # own codes, king: 0
    assert table[15] == pytest.approx(0.1 + 1.0)              # a pawn: its board value + a pawn in hand
    assert table[28] == pytest.approx(1.3 + 7.0)              # a dragon: its value + a rook in hand
    assert tactics.DEFAULT_CAPTURE_VALUES[15] == PAWN and tactics.DEFAULT_CAPTURE_VALUES[28] == 1395 + 990


def test_calibration_block_by_hand() -> None:
    """Four positions in three games: games 0 and 1 hold one free-capture position each, game 2 two others."""
    sums = tactics.CalibrationSums()
    games, free = np.array([0, 1, 2, 2]), np.array([True, True, False, False])
    p = np.array([0.2, 0.4, 0.5, 0.9])
    sums.add_model(games, np.log(p / (1 - p)), np.array([1.0, 0.5, 0.0, 1.0]), free)
    engine = np.array([0.6, 0.7, 0.3, 0.1])
    sums.add_engine(games, np.log(engine / (1 - engine)), np.array([True, False, True, False]), free,
                    np.array([2.0, 4.0, 0.0, 0.0]))
    block = sums.block(resamples=200)
    assert block["positions"] == 2 and block["share"] == 0.5 and block["mean_value"] == pytest.approx(3.0)
    f, o = block["free"], block["other"]
    assert (f["positions"], f["games"], o["positions"], o["games"]) == (2, 2, 2, 1)
    assert f["model"] == pytest.approx(0.3) and f["result"] == pytest.approx(0.75)
    assert f["engine"] == pytest.approx(0.6) and f["evaluated"] == 1
    assert o["model"] == pytest.approx(0.7) and o["result"] == pytest.approx(0.5)
    assert o["engine"] == pytest.approx(0.3)
    gap = f["model_minus_result"]
    assert gap["estimate"] == pytest.approx(-0.45)
    # Resampling two games: (0, 0) gives 0.2 - 1 = -0.8, (1, 1) 0.4 - 0.5 = -0.1, mixed -0.45.
    assert -0.8 - 1e-9 <= gap["lo"] <= -0.45 <= gap["hi"] <= -0.1 + 1e-9 and gap["resolved"]
    assert o["model_minus_result"]["lo"] == o["model_minus_result"]["hi"] == pytest.approx(0.2)   # one game
    assert block["bootstrap"] == {"unit": "game", "resamples": 200, "seed": 0, "level": 0.95}
    line = tactics.free_capture_text(block)
    assert line.startswith("free capture: 2 positions (50.0%): model 0.3000, result 0.7500, engine 0.6000")
    assert "\n" not in line and "other positions: model 0.7000" in line
    assert tactics.free_capture_text(tactics.CalibrationSums().block()) == "free capture: no position has one"


def test_evaluate_writes_the_free_capture_block(tmp_path) -> None:
    """evaluate on a tiny dataset (kings, a rook, random pawns): the block against a count made here from
    the same rows, the model's plain predictions and the engine baseline."""
    from shogi_dnn.analysis import baselines, evaluate
    from shogi_dnn.dataset import shards
    from shogi_dnn.dataset.features import EVAL_NONE
    from shogi_dnn.training import pipeline
    from tests.support.evaldata import material_dataset, split_paths
    from tests.support.evalrun import make_random_run

    manifest = material_dataset(tmp_path / "data",
                                {"train": (200, 0.7, False), "validation": (120, 0.5, False)},
                                eval_share={"train": 0.8, "validation": 0.6})
    run_dir = make_random_run(tmp_path / "run", tmp_path / "data", devices=2, per_replica_batch=16)
    result = evaluate.evaluate_run(run_dir, split="validation", global_batch=32, mirror_average=False)
    block = json.loads((run_dir / "eval-validation.json").read_text())["free_capture"]
    assert set(block) == {"positions", "share", "mean_value", "free", "other", "bootstrap"}
    for group in ("free", "other"):
        assert set(block[group]) == {"positions", "games", "model", "result", "engine", "evaluated",
                                     "model_minus_result"}
    paths = split_paths(manifest, "validation")
    rows = {k: np.concatenate([shards.read_positions(p, keys=[k]).arrays[k] for p in paths])
            for k in ("board", "win", "game", "eval")}
    fitted, _ = baselines.fitted_baselines(run_dir, tmp_path / "data")
    values = tactics.capture_values_from_material(fitted.piece_values())
    free, best = tactics.free_captures(rows["board"], values)
    assert 10 < free.sum() < 110                                  # the rooks and pawns meet often
    model = evaluate.load_run_model(run_dir)
    batches = list(pipeline.make_eval_dataset(paths, global_batch=64))
    logits = np.concatenate([model({"board": b["board"], "hands": b["hands"]}).numpy().reshape(-1)
                             for b in batches])
    p = 1 / (1 + np.exp(-logits))
    assert result["mirror_average"] is False              # the plain prediction, as computed here
    engine = 1 / (1 + np.exp(-fitted.engine_logits(rows["eval"])))
    evaluated = rows["eval"] != EVAL_NONE
    assert block["positions"] == int(free.sum()) and block["share"] == pytest.approx(free.mean())
    assert block["mean_value"] == pytest.approx(best[free].mean())
    for group, keep in (("free", free), ("other", ~free)):
        row = block[group]
        assert row["positions"] == int(keep.sum()) and row["games"] == len(np.unique(rows["game"][keep]))
        assert row["model"] == pytest.approx(p[keep].mean(), rel=1e-5)
        assert row["result"] == pytest.approx(rows["win"][keep].mean())
        assert row["evaluated"] == int((keep & evaluated).sum())
        assert row["engine"] == pytest.approx(engine[keep & evaluated].mean())
        gap = row["model_minus_result"]
        assert gap["lo"] <= gap["estimate"] <= gap["hi"]
        assert gap["estimate"] == pytest.approx(row["model"] - row["result"])
    assert "free capture: " in evaluate.format_table(result)
