"""rules/moves.py and rules/pieces.py: the move table against hand-drawn diagrams and hand-counted
positions, `attacks`/`in_check` against python-shogi, and the piece tables against their documented
values (they are stored in shards)."""

from __future__ import annotations

import random

import pytest
import shogi

from shogi_dnn import rules
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import MOVES, PieceType, ShogiPosition, attacks, in_check
from shogi_dnn.rules.pieces import piece_code

# Each piece type drawn by hand from Black's side (forward is up), the piece `X` in the middle of a
# 5 x 5 window: `o` a square it steps to, `*` the first square of a slide (the ray goes on beyond).
DIAGRAMS = {
    PieceType.PAWN: ("  .....", "  ..o..", "  ..X..", "  .....", "  ....."),
    PieceType.LANCE: ("  .....", "  ..*..", "  ..X..", "  .....", "  ....."),
    PieceType.KNIGHT: ("  .o.o.", "  .....", "  ..X..", "  .....", "  ....."),
    PieceType.SILVER: ("  .....", "  .ooo.", "  ..X..", "  .o.o.", "  ....."),
    PieceType.GOLD: ("  .....", "  .ooo.", "  .oXo.", "  ..o..", "  ....."),
    PieceType.BISHOP: ("  .....", "  .*.*.", "  ..X..", "  .*.*.", "  ....."),
    PieceType.ROOK: ("  .....", "  ..*..", "  .*X*.", "  ..*..", "  ....."),
    PieceType.KING: ("  .....", "  .ooo.", "  .oXo.", "  .ooo.", "  ....."),
    PieceType.PROM_BISHOP: ("  .....", "  .*o*.", "  .oXo.", "  .*o*.", "  ....."),
    PieceType.PROM_ROOK: ("  .....", "  .o*o.", "  .*X*.", "  .o*o.", "  ....."),
}
for _promoted in (PieceType.PROM_PAWN, PieceType.PROM_LANCE, PieceType.PROM_KNIGHT, PieceType.PROM_SILVER):
    DIAGRAMS[_promoted] = DIAGRAMS[PieceType.GOLD]

# Squares each piece attacks from 5e on an otherwise empty board, counted by hand.
EMPTY_BOARD_REACH_FROM_5E = {
    PieceType.PAWN: 1, PieceType.LANCE: 4, PieceType.KNIGHT: 2, PieceType.SILVER: 5, PieceType.GOLD: 6,
    PieceType.BISHOP: 16, PieceType.ROOK: 16, PieceType.KING: 8, PieceType.PROM_PAWN: 6,
    PieceType.PROM_LANCE: 6, PieceType.PROM_KNIGHT: 6, PieceType.PROM_SILVER: 6,
    PieceType.PROM_BISHOP: 20, PieceType.PROM_ROOK: 20,
}
CENTRE = 40                                           # 5e


def drawn_moves(diagram: tuple[str, ...]) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(steps, slides) of a diagram as (row step, column step) sets."""
    steps, slides = set(), set()
    for row, text in enumerate(diagram):
        for column, mark in enumerate(text.strip()):
            if mark == "o":
                steps.add((row - 2, column - 2))
            elif mark == "*":
                slides.add((row - 2, column - 2))
    return steps, slides


def reach(codes: list[int], square: int) -> set[int]:
    """Every square the piece on `square` attacks, by `attacks`."""
    return {target for target in range(81) if target != square and attacks(codes, square, target)}


def test_piece_type_values_are_the_stored_codes() -> None:
    """The values shards hold: python-shogi's numbering, HORSE/DRAGON the promoted bishop/rook."""
    assert [(t.name, int(t)) for t in PieceType] == [
        ("PAWN", 1), ("LANCE", 2), ("KNIGHT", 3), ("SILVER", 4), ("GOLD", 5), ("BISHOP", 6), ("ROOK", 7),
        ("KING", 8), ("PROM_PAWN", 9), ("PROM_LANCE", 10), ("PROM_KNIGHT", 11), ("PROM_SILVER", 12),
        ("PROM_BISHOP", 13), ("PROM_ROOK", 14)]
    assert (PieceType.HORSE, PieceType.DRAGON) == (13, 14) and rules.NUM_PIECE_TYPES == 14
    assert rules.HAND_PIECE_TYPES == (1, 2, 3, 4, 5, 6, 7)
    assert rules.PROMOTED == {1: 9, 2: 10, 3: 11, 4: 12, 6: 13, 7: 14}
    assert rules.SET_COUNT == {1: 18, 2: 4, 3: 4, 4: 4, 5: 4, 6: 2, 7: 2, 8: 2}
    assert [rules.SFEN_PIECE[t] for t in PieceType] == ["P", "L", "N", "S", "G", "B", "R", "K",
                                                         "+P", "+L", "+N", "+S", "+B", "+R"]
    for piece_type, letter in zip(PieceType, "PLNSGBRK"):
        assert shogi.PIECE_SYMBOLS[piece_type].upper() == letter       # python-shogi's numbering
    assert [piece_code(t, colour) for colour in (rules.BLACK, rules.WHITE) for t in PieceType] == \
        list(range(1, 29))


def test_usi_square_names_and_indexes() -> None:
    """parse_square and square_name: the one USI square conversion, index = (rank - 1) * 9 + (9 - file)."""
    assert [rules.parse_square(s) for s in ("9a", "1a", "5e", "7g", "1i")] == [0, 8, 40, 56, 80]
    for file in range(1, 10):
        for rank in range(1, 10):
            name = rules.square_usi(file, rank)
            assert rules.parse_square(name) == rules.square_index(file, rank)
            assert rules.square_name(rules.square_index(file, rank)) == name


@pytest.mark.parametrize("piece_type", list(PieceType))
def test_move_table_matches_the_hand_drawn_diagram(piece_type: PieceType) -> None:
    steps, slides = drawn_moves(DIAGRAMS[piece_type])
    assert set(MOVES[piece_type].steps) == steps and len(MOVES[piece_type].steps) == len(steps)
    assert set(MOVES[piece_type].slides) == slides and len(MOVES[piece_type].slides) == len(slides)
    assert not steps & slides                            # no piece steps and slides one way
    assert {(r, -c) for r, c in steps | slides} == steps | slides     # left-right symmetric


@pytest.mark.parametrize("colour", [rules.BLACK, rules.WHITE])
@pytest.mark.parametrize("piece_type", list(PieceType))
def test_reach_on_an_empty_board(piece_type: PieceType, colour: int) -> None:
    codes = [0] * 81
    codes[CENTRE] = piece_code(piece_type, colour)
    squares = reach(codes, CENTRE)
    assert len(squares) == EMPTY_BOARD_REACH_FROM_5E[piece_type]
    if colour == rules.WHITE:          # White's are Black's turned round: the same squares mirrored
        black = [0] * 81
        black[CENTRE] = piece_type
        assert squares == {80 - s for s in reach(black, CENTRE)}


def test_a_slide_stops_at_the_first_piece_and_attacks_it() -> None:
    codes = [0] * 81
    codes[76] = PieceType.LANCE                              # Black's lance on 5i
    codes[40] = PieceType.PAWN + rules.NUM_PIECE_TYPES       # White's pawn on 5e
    assert reach(codes, 76) == {67, 58, 49, 40}              # 5h 5g 5f and the pawn on 5e
    codes[60] = PieceType.PROM_BISHOP                        # Black's horse on 3g
    assert reach(codes, 60) == {51, 59, 61, 69,              # 3f 4g 2g 3h: its steps
                                50, 40, 52, 44, 68, 76, 70, 80}   # 4f 5e (stops), 2f 1e, 4h 5i, 2h 1i


def test_start_position_has_30_moves() -> None:
    """Black's board moves in the standard start position by the table (to a square not holding its
    own piece): the well-known 30 (nothing can promote yet, nothing is pinned)."""
    codes = ShogiPosition(STANDARD_START_SFEN).piece_codes()
    moves = [(square, target) for square, code in enumerate(codes) if 0 < code <= rules.NUM_PIECE_TYPES
             for target in reach(codes, square) if not 0 < codes[target] <= rules.NUM_PIECE_TYPES]
    assert len(moves) == 30


def test_board_moves_equal_python_shogis_pseudo_legal_moves() -> None:
    """Along random games: the (origin, destination) pairs the table gives the side to move equal
    python-shogi's pseudo-legal board moves (its square numbering is the package's)."""
    rng = random.Random(5)
    compared = 0
    for _ in range(6):
        board = shogi.Board()
        for _ in range(80):
            codes = ShogiPosition(board.sfen()).piece_codes()
            own = range(1, 15) if board.turn == shogi.BLACK else range(15, 29)
            ours = {(s, t) for s, code in enumerate(codes) if code in own
                    for t in reach(codes, s) if codes[t] not in own}
            theirs = {(m.from_square, m.to_square) for m in board.pseudo_legal_moves
                      if m.from_square is not None}
            assert ours == theirs, board.sfen()
            compared += 1
            legal = list(board.legal_moves)
            if not legal:
                break
            board.push(rng.choice(legal))
    assert compared > 200


@pytest.mark.parametrize("defender", [rules.BLACK, rules.WHITE])
def test_in_check_matches_python_shogi_for_every_single_attacker(defender: int) -> None:
    """Every attacker type on every free square, with blockers beside the king's lines."""
    king, blockers = 40, (22, 20, 58)                   # king on 5e; blockers on 5c, 7c, 5g
    attacker_colour = 1 - defender
    checks = 0
    for piece in range(1, 15):
        for square in range(81):
            if square == king or square in blockers:
                continue
            codes = [0] * 81
            codes[king] = 8 + 14 * defender
            for blocker in blockers:
                codes[blocker] = 5 + 14 * defender      # the defender's golds
            codes[square] = piece + 14 * attacker_colour
            board = shogi.Board(rules.format_sfen(codes, [0] * 7, [0] * 7, defender))
            assert in_check(codes, defender) == board.is_check(), (piece, square)
            checks += board.is_check()
    assert checks > 100                                  # the loop did exercise checks


def test_in_check_by_hand() -> None:
    codes = ShogiPosition("4k4/9/9/9/9/9/9/9/4K4 b - 1").piece_codes()
    assert not in_check(codes, rules.BLACK) and not in_check(codes, rules.WHITE)
    codes = ShogiPosition("4k4/9/4N4/9/9/9/9/9/4K4 w - 1").piece_codes()     # a knight on 5c: no check
    assert not in_check(codes, rules.WHITE)
    codes = ShogiPosition("4k4/9/3N5/9/9/9/9/9/4K4 w - 1").piece_codes()     # a knight on 6c checks 5a
    assert in_check(codes, rules.WHITE) and not in_check(codes, rules.BLACK)
    codes = ShogiPosition("4k4/9/9/9/4r4/9/9/9/4K4 b - 1").piece_codes()     # White's rook on 5e
    assert in_check(codes, rules.BLACK)
    assert not in_check(ShogiPosition("6l2/6nk1/6R2/5Lppp/9/9/9/9/9 b 2BNr4g4s2n2l15p 1").piece_codes(),
                        rules.BLACK)                                          # no Black king: never
