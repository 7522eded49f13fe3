"""Position encoding: exact round trips, the side-to-move view, move codes, labels and planes."""

from __future__ import annotations

import numpy as np
import pytest

from shogi_dnn.dataset import features
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import BLACK, WHITE, new_position
from tests.support.kifugen import random_moves


def record(moves: list[str], winner: Winner = Winner.BLACK, start: str = STANDARD_START_SFEN) -> GameRecord:
    return GameRecord(start, tuple(moves), winner, Ending.RESIGN, SourceLine("test.csa", 1), "csa")


def test_start_position_from_black_view() -> None:
    board, hands = features.encode_position(new_position(STANDARD_START_SFEN))
    assert board.dtype == np.uint8 and board.shape == (81,)
    assert hands.dtype == np.uint8 and hands.shape == (14,) and not hands.any()
    # rank 9 (bottom row, square indices 72..80) holds Black's (own) lance..lance; rank 1 the opponent's.
    assert list(board[72:81]) == [2, 3, 4, 5, 8, 5, 4, 3, 2]
    assert list(board[0:9]) == [16, 17, 18, 19, 22, 19, 18, 17, 16]
    assert features.decode_position(board, hands, BLACK, 0) == STANDARD_START_SFEN


def test_white_to_move_sees_itself_moving_up() -> None:
    position = new_position(STANDARD_START_SFEN)
    position.push_usi("7g7f")
    board, hands = features.encode_position(position)
    # White's own pieces appear on the bottom rows, and Black's advanced pawn at 7f (index 47 from
    # Black's side) is an opponent pawn at the rotated index 80 - 47 = 33.
    assert list(board[72:81]) == [2, 3, 4, 5, 8, 5, 4, 3, 2]
    assert board[33] == features.NUM_PIECE_TYPES + 1
    assert features.decode_position(board, hands, WHITE, 1) == position.sfen()


@pytest.mark.parametrize("seed", range(12))
def test_random_games_round_trip(seed: int) -> None:
    moves = random_moves(seed, max_plies=120)
    encoded = features.encode_game(record(moves, Winner.WHITE))
    position = new_position(STANDARD_START_SFEN)
    for i in range(len(encoded)):
        sfen = features.decode_position(encoded.board[i], encoded.hands[i], int(encoded.turn[i]),
                                        int(encoded.ply[i]))
        assert sfen == position.sfen()
        if i < len(moves):
            assert features.decode_move(int(encoded.move[i]), int(encoded.turn[i])) == moves[i]
            position.push_usi(moves[i])
        else:
            assert encoded.move[i] == features.MOVE_NONE


def test_handicap_start_and_hands_round_trip() -> None:
    start = "lnsk1gsnl/9/pppppppp1/9/9/9/PPPPPPP2/1B5R1/LNSGKGSNL w 2Pg 5"   # no white rook, bishop
    moves = random_moves(3, max_plies=30, start=start)
    encoded = features.encode_game(record(moves, Winner.DRAW, start=start))
    assert encoded.ply[0] == 4 and encoded.turn[0] == WHITE
    assert (encoded.win == 0.5).all()
    first = features.decode_position(encoded.board[0], encoded.hands[0], WHITE, 4)
    assert first == start
    # own (white) hand first: 1 gold; opponent (black) hand: 2 pawns
    assert encoded.hands[0][4] == 1 and encoded.hands[0][7] == 2
    pieces, promoted = features.pack_positions(encoded.board, encoded.hands)
    # white's rook and bishop are not in the game: absent slots (bishops 34..35, rooks 36..37)
    # (black's bishop 8h and rook 2h: the opponent's, at rotated squares 80 - 64 and 80 - 70)
    assert list(pieces[0][34:38]) == [128 + 80 - 64, features.SLOT_ABSENT, 128 + 80 - 70, features.SLOT_ABSENT]
    board, hands = features.unpack_positions(pieces, promoted)
    np.testing.assert_array_equal(board, encoded.board)
    np.testing.assert_array_equal(hands, encoded.hands)


def test_packed_start_position_is_pinned() -> None:
    board, hands = features.encode_position(new_position(STANDARD_START_SFEN))
    pieces, promoted = features.pack_positions(board[None], hands[None])
    assert pieces.shape == (1, 40) and promoted.shape == (1, 5) and not promoted.any()
    # pawns: the opponent's on rank 3 (squares 18..26), then own on rank 7 (54..62), in square order
    assert list(pieces[0][:18]) == [128 + sq for sq in range(18, 27)] + list(range(54, 63))
    # kings: the opponent's at 5a (square 4), own at 5i (76); rooks: opponent's 8b (10), own 2h (70)
    assert list(pieces[0][38:]) == [128 + 4, 76] and list(pieces[0][36:38]) == [128 + 10, 70]


@pytest.mark.parametrize("seed", range(6))
def test_packed_form_round_trips_random_games(seed: int) -> None:
    """Captures, drops, promotions, both sides to move: pack then unpack gives every position back."""
    encoded = features.encode_game(record(random_moves(100 + seed, max_plies=300), Winner.BLACK))
    pieces, promoted = features.pack_positions(encoded.board, encoded.hands)
    assert promoted.any() and encoded.hands.any()
    board, hands = features.unpack_positions(pieces, promoted)
    np.testing.assert_array_equal(board, encoded.board)
    np.testing.assert_array_equal(hands, encoded.hands)
    # promoted bits sit on the slots of promoted pieces only
    flags = np.unpackbits(promoted, axis=1, count=40, bitorder="little").astype(bool)
    on_board = (pieces & features.SLOT_LOCATION) < 81
    codes = encoded.board[np.nonzero(on_board)[0], (pieces & features.SLOT_LOCATION)[on_board]]
    assert np.array_equal(flags[on_board], np.isin(codes % 14, (9, 10, 11, 12, 13, 0)) & (codes > 0))


@pytest.mark.parametrize("seed", range(8))
def test_encoder_packs_as_pack_positions(seed: int) -> None:
    """The compiled encoder packs while it replays (a list of squares per kind kept move by move):
    the same bytes as packing its boards afterwards, both sides to move, handicaps and full hands."""
    if not features.fast_encoding.AVAILABLE:
        pytest.skip("the C extension is not built")
    starts = (STANDARD_START_SFEN, "lnsgkgsn1/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
              "4k4/9/9/9/9/9/9/9/4K4 b RBGSNLPrbgsnlp 1", "8k/9/9/9/9/9/9/9/K8 b 2r2b4g4s4n4l18p 1")
    start = starts[seed % len(starts)]
    encoded = features.encode_game(record(random_moves(200 + seed, max_plies=300, start=start), start=start))
    assert encoded.pieces is not None and encoded.promoted is not None
    pieces, promoted = features.pack_positions(encoded.board, encoded.hands)
    np.testing.assert_array_equal(encoded.pieces, pieces)
    np.testing.assert_array_equal(encoded.promoted, promoted)


def test_more_than_one_set_of_pieces_is_refused() -> None:
    nineteen_pawns = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b P 1"
    with pytest.raises(ValueError, match="19 pawns on the board and in hand"):   # rules.check_sfen
        features.encode_game(record(["7g7f"], start=nineteen_pawns))
    board, hands = features.encode_position(new_position(STANDARD_START_SFEN))
    hands = hands.copy()
    hands[0] = 1                                   # a 19th pawn, past the rules' check: the packer's own
    with pytest.raises(ValueError, match="19 pieces of kind P"):
        features.pack_positions(np.stack([board, board]), np.stack([hands, hands]))


def test_labels_alternate_from_side_to_move() -> None:
    encoded = features.encode_game(record(["7g7f", "3c3d", "2g2f"], Winner.BLACK))
    assert encoded.win.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert features.game_labels(Winner.WHITE, WHITE, 3).tolist() == [1.0, 0.0, 1.0]


def test_game_without_result_is_not_training_data() -> None:
    with pytest.raises(ValueError, match="no result"):
        features.encode_game(record(["7g7f"], Winner.UNKNOWN))


def test_drop_and_promotion_move_codes() -> None:
    for usi, turn in [("P*5e", BLACK), ("R*1a", WHITE), ("8h2b+", BLACK), ("2b8h+", WHITE), ("1a1b", WHITE)]:
        code = features.encode_move(usi, turn)
        assert 0 <= code < features.MOVE_NONE
        assert features.decode_move(code, turn) == usi


def test_expand_planes_named_planes() -> None:
    board, hands = features.encode_position(new_position("4k4/9/9/9/9/9/9/9/4K4 b 2P16p 1"))
    planes = features.expand_planes(board[None], hands[None])
    assert planes.shape == (1, 9, 9, features.NUM_PLANES) and planes.dtype == np.float32
    king = features.PLANE_OWN_PIECES + 8 - 1
    assert planes[0, 8, 4, king] == 1.0 and planes[0, :, :, king].sum() == 1.0
    assert planes[0, 0, 4, features.PLANE_OPP_PIECES + 8 - 1] == 1.0
    assert np.allclose(planes[0, :, :, features.PLANE_OWN_HAND + 0], 2 / 18)
    assert np.allclose(planes[0, :, :, features.PLANE_OPP_HAND + 0], 16 / 18)
    assert features.NUM_PLANES == 2 * features.NUM_PIECE_TYPES + 2 * features.NUM_HAND_TYPES


def test_mirror_board_swaps_files() -> None:
    board, _ = features.encode_position(new_position("4k4/9/9/9/9/9/9/9/K8 b - 1"))
    mirrored = features.mirror_board(board[None])[0]
    assert mirrored[80] == 8 and board[72] == 8
    assert (features.mirror_board(mirrored[None])[0] == board).all()


def test_encoding_stays_tensorflow_free() -> None:
    import subprocess
    import sys
    code = ("import sys, shogi_dnn.dataset.features, shogi_dnn.dataset.shards, shogi_dnn.kifu; "
            "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
