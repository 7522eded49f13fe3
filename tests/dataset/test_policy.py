"""Policy move labels: the directions pinned by hand, every legal move of random and real games
labelled once and decoded back, the mirror, and the legal masks on both rules backends."""

from __future__ import annotations

import numpy as np
import pytest

from shogi_dnn.dataset import features, policy
from shogi_dnn.kifu import read_record_bytes
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import BLACK, WHITE, available_backends, new_position, position_factory, resolve_backend
from tests.support.kifugen import random_moves
from tests.support.paths import DATA

HANDICAP_SFEN = "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"


def label(direction: int, usi_square: str) -> int:
    """direction * 81 + the square's index from Black's side (features: rank-major from 9a)."""
    file, rank = int(usi_square[0]), ord(usi_square[1]) - ord("a")
    return direction * 81 + rank * 9 + 9 - file


def encoded(moves: list[str], start: str = STANDARD_START_SFEN) -> features.EncodedGame:
    record = GameRecord(start, tuple(moves), Winner.DRAW, Ending.JISHOGI, SourceLine("test", 1), "csa")
    return features.encode_game(record)


def test_label_counts() -> None:
    assert (policy.NUM_DIRECTIONS, policy.NUM_MOVE_LABELS, policy.DROP_OFFSET) == (27, 2187, 20)


def test_start_position_by_hand() -> None:
    board, hands = features.encode_position(new_position(STANDARD_START_SFEN))
    codes = policy.legal_move_codes(board, hands)
    labels = policy.move_labels(codes)
    up = [label(policy.UP, f"{f}f") for f in range(1, 10)] + \
        [label(policy.UP, s) for s in ("9h", "7h", "6h", "5h", "4h", "3h", "1h")]   # L S G K G S L
    up_left = [label(policy.UP_LEFT, s) for s in ("7h", "6h", "5h", "4h")]             # 6i7h ... 3i4h
    up_right = [label(policy.UP_RIGHT, s) for s in ("6h", "5h", "4h", "3h")]           # 7i6h ... 4i3h
    left = [label(policy.LEFT, f"{f}h") for f in range(3, 8)]                           # 2h3h ... 2h7h
    right = [label(policy.RIGHT, "1h")]                                                 # 2h1h
    assert sorted(labels.tolist()) == sorted(up + up_left + up_right + left + right)
    assert len(codes) == 30 and labels.dtype == np.int16
    mask = policy.legal_label_mask(board, hands)
    assert mask.shape == (2187,) and mask.sum() == 30 and mask[labels].all()


@pytest.mark.parametrize(("usi", "turn", "expected"), [
    ("7g7f", BLACK, label(policy.UP, "7f")),
    ("6i7h", BLACK, label(policy.UP_LEFT, "7h")),          # toward file 9: Black's left
    ("2h1h", BLACK, label(policy.RIGHT, "1h")),
    ("2i3g", BLACK, label(policy.UP2_LEFT, "3g")),
    ("2i1g", BLACK, label(policy.UP2_RIGHT, "1g")),
    ("3c3d", WHITE, label(policy.UP, "7f")),               # White's view is rotated: 3d is 7f
    ("4a3b", WHITE, label(policy.UP_LEFT, "7h")),          # toward file 1: White's left
    ("8b4b", WHITE, label(policy.LEFT, "6h")),
    ("5a5b", WHITE, label(policy.UP, "5h")),
    ("5b5a", WHITE, label(policy.DOWN, "5i")),
    ("4b5c", WHITE, label(policy.UP_RIGHT, "5g")),          # toward file 9: White's right
    ("5c6b", WHITE, label(policy.DOWN_RIGHT, "4h")),
    ("2b8b+", BLACK, label(policy.LEFT + policy.PROMOTION_OFFSET, "8b")),
    ("8h2b+", BLACK, label(policy.UP_RIGHT + policy.PROMOTION_OFFSET, "2b")),
    ("2b8h+", WHITE, label(policy.UP_RIGHT + policy.PROMOTION_OFFSET, "2b")),
    ("3c3g+", WHITE, label(policy.UP + policy.PROMOTION_OFFSET, "7c")),
    ("P*5e", BLACK, label(policy.DROP_OFFSET, "5e")),
    ("R*1a", BLACK, label(policy.DROP_OFFSET + 6, "1a")),
    ("B*1a", WHITE, label(policy.DROP_OFFSET + 5, "9i")),
])
def test_directions_by_hand(usi: str, turn: int, expected: int) -> None:
    assert policy.move_labels(np.array([features.encode_move(usi, turn)], np.uint16)).tolist() == [expected]


def test_move_none_and_codes_that_are_no_move() -> None:
    codes = np.array([[features.MOVE_NONE, features.encode_move("7g7f", BLACK)]], np.uint16)
    np.testing.assert_array_equal(policy.move_labels(codes), [[policy.LABEL_NONE, label(policy.UP, "7f")]])
    knight_back = (40 * 81 + 40 + 18 + 1) * 2            # 5e -> 4g: a knight's jump backwards
    promoting_drop = ((81 + 0) * 81 + 40) * 2 + 1
    past_the_drops = ((81 + 7) * 81 + 40) * 2
    for code in (knight_back, promoting_drop, past_the_drops, (40 * 81 + 40) * 2):
        with pytest.raises(ValueError, match=f"move code {code}"):
            policy.move_labels(np.array([code]))
    with pytest.raises(ValueError, match="outside"):
        policy.move_labels(np.array([-1]))


def check_position(board: np.ndarray, hands: np.ndarray, factory=None) -> np.ndarray:
    """Every legal move gets its own label and decodes back to its code; returns the labels."""
    codes = policy.legal_move_codes(board, hands, factory)
    labels = policy.move_labels(codes)
    assert len(np.unique(labels)) == len(codes), features.decode_position(board, hands, BLACK, 0)
    assert [policy.label_to_move(board, x) for x in labels.tolist()] == codes.tolist()
    mask = policy.legal_label_mask(board, hands, factory)
    assert mask.sum() == len(codes) and mask[labels].all()
    return labels


def random_positions(seeds: range, start: str = STANDARD_START_SFEN):
    """(board, hands, move) of every position of random games from `start`."""
    for seed in seeds:
        game = encoded(random_moves(seed, max_plies=160, start=start), start)
        yield from zip(game.board, game.hands, game.move)


@pytest.mark.parametrize("backend", available_backends())
def test_every_legal_move_of_random_games(backend: str) -> None:
    factory = position_factory(backend)
    walks = 8 if backend == resolve_backend() else 2        # the other backend (slower python-shogi): fewer
    positions = drops = promotions = 0
    for board, hands, move in [*random_positions(range(walks)), *random_positions(range(2), HANDICAP_SFEN)]:
        labels = check_position(board, hands, factory)
        if move != features.MOVE_NONE:
            assert policy.move_labels(np.array([move]))[0] in labels
        positions += 1
        direction = labels // 81
        drops += int((direction >= policy.DROP_OFFSET).sum())
        promotions += int(((direction >= policy.PROMOTION_OFFSET) & (direction < policy.DROP_OFFSET)).sum())
    assert positions > 500 and drops > 1000 and promotions > 100      # the walks reach drops and promotions


def real_games() -> list[features.EncodedGame]:
    games = []
    for path in sorted(DATA.glob("*/*")):
        if path.suffix.lower() in (".csa", ".kif", ".kifu", ".ki2", ".ki2u", ".sfen", ".usi"):
            for record in read_record_bytes(path.read_bytes(), path.name):
                if isinstance(record, GameRecord) and record.has_result and record.moves:
                    games.append(features.encode_game(record))
    return games


def test_every_legal_move_of_real_games() -> None:
    games = real_games()
    positions = 0
    for game in games:
        played = policy.move_labels(game.move)
        assert played[-1] == policy.LABEL_NONE and (played[:-1] >= 0).all()
        masks = policy.legal_label_masks(game.board[:-1], game.hands[:-1])
        assert masks[np.arange(len(game) - 1), played[:-1]].all()          # the move played is legal
        for board, hands in zip(game.board, game.hands):
            check_position(board, hands)
        positions += len(game)
    assert len(games) >= 40 and positions > 1300


def mirror_code(code: int) -> int:
    """The left-right mirror of a move code (col c <-> 8 - c of both squares; a drop keeps its kind)."""
    rest, promote = divmod(code, 2)
    origin, destination = divmod(rest, 81)

    def square(s: int) -> int:
        return s if s >= 81 else s - s % 9 + 8 - s % 9

    return (square(origin) * 81 + square(destination)) * 2 + promote


def test_mirror_is_an_involution_that_swaps_left_and_right() -> None:
    every = np.arange(-1, policy.NUM_MOVE_LABELS)
    mirrored = policy.mirror_labels(every)
    np.testing.assert_array_equal(policy.mirror_labels(mirrored), every)
    assert mirrored[0] == policy.LABEL_NONE and sorted(mirrored[1:].tolist()) == list(range(2187))
    assert policy.mirror_labels([label(policy.UP2_LEFT, "3g")]).tolist() == [label(policy.UP2_RIGHT, "7g")]
    pawn_drop = policy.DROP_OFFSET
    assert policy.mirror_labels([label(pawn_drop, "9a")]).tolist() == [label(pawn_drop, "1a")]
    with pytest.raises(ValueError, match="labels must lie"):
        policy.mirror_labels([2187])


def test_mirror_labels_are_the_labels_of_the_mirrored_moves() -> None:
    for board, hands, _ in random_positions(range(3)):
        codes = policy.legal_move_codes(board, hands)
        mirror_board = features.mirror_board(board[None])[0]
        expected = policy.move_labels(np.array([mirror_code(c) for c in codes.tolist()], np.int64))
        np.testing.assert_array_equal(policy.mirror_labels(policy.move_labels(codes)), expected)
        # and the mirrored position's legal moves are exactly the mirrored moves (the rules are symmetric)
        assert sorted(policy.move_labels(policy.legal_move_codes(mirror_board, hands)).tolist()) == \
            sorted(expected.tolist())


def test_label_to_move_refuses_a_ray_without_an_own_piece() -> None:
    board, _ = features.encode_position(new_position(STANDARD_START_SFEN))
    # not checked legal: UP to 5e finds the pawn on 5g behind the empty 5f
    assert policy.label_to_move(board, label(policy.UP, "5e")) == features.encode_move("5g5e", BLACK)
    with pytest.raises(ValueError, match="no own piece"):
        policy.label_to_move(board, label(policy.DOWN, "5e"))        # the first piece above is 5c's pawn
    with pytest.raises(ValueError, match="no own piece"):
        policy.label_to_move(board, label(policy.LEFT, "9e"))        # rank e is empty to the board's edge
    with pytest.raises(ValueError, match="no own piece"):
        policy.label_to_move(board, label(policy.UP2_LEFT, "5f"))         # 4h is empty
    with pytest.raises(ValueError, match="outside"):
        policy.label_to_move(board, 2187)
    assert policy.label_to_move(board, label(policy.DROP_OFFSET + 2, "5e")) == \
        features.encode_move("N*5e", BLACK)


def test_a_position_without_legal_moves_has_an_empty_mask() -> None:
    mate = "k8/1G7/1K7/9/9/9/9/9/9 w - 1"           # White's king at 9a, mated by the gold at 8b
    board, hands = features.encode_position(new_position(mate))
    assert policy.legal_move_codes(board, hands).size == 0
    assert not policy.legal_label_masks(board[None], hands[None]).any()
