"""How each piece type moves, and the one pure-Python attack and check test built on it.

MOVES[t] = (steps, slides) for every PieceType t, as (row step, column step) directions from Black's
view (row 0 is rank a, column 0 is file 9; forward is row step -1). A step reaches one square; a slide
goes through empty squares and attacks the first occupied one. White's moves are turned round (row step
negated; every move is left-right symmetric, so a 180-degree rotation is the same).

  type                    steps                               slides
  PAWN                    forward                             -
  LANCE                   -                                   forward
  KNIGHT                  two forward and one sideways (2)    -
  SILVER                  forward, the 4 diagonals            -
  GOLD and +P +L +N +S    forward, 2 forward diagonals,       -
                          2 sideways, back
  BISHOP                  -                                   the 4 diagonals
  ROOK                    -                                   the 4 orthogonals
  KING                    the 8 neighbours                    -
  PROM_BISHOP (horse)     the 4 orthogonals                   the 4 diagonals
  PROM_ROOK (dragon)      the 4 diagonals                     the 4 orthogonals

Attacks are pseudo-legal (python-shogi's `Board.attackers`): a pinned piece still attacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from shogi_dnn.rules.pieces import NUM_PIECE_TYPES, PieceType

Direction = tuple[int, int]          # (row step, column step), Black's view: row step -1 is forward

FORWARD = -1                         # Black's pieces move towards row 0 (rank a)
UP, DOWN, LEFT, RIGHT = (FORWARD, 0), (-FORWARD, 0), (0, -1), (0, 1)
UP_LEFT, UP_RIGHT = (FORWARD, -1), (FORWARD, 1)
DOWN_LEFT, DOWN_RIGHT = (-FORWARD, -1), (-FORWARD, 1)
ORTHOGONALS: tuple[Direction, ...] = (UP, DOWN, LEFT, RIGHT)
DIAGONALS: tuple[Direction, ...] = (UP_LEFT, UP_RIGHT, DOWN_LEFT, DOWN_RIGHT)
GOLD_STEPS: tuple[Direction, ...] = (UP_LEFT, UP, UP_RIGHT, LEFT, RIGHT, DOWN)
KNIGHT_STEPS: tuple[Direction, ...] = ((2 * FORWARD, -1), (2 * FORWARD, 1))


class PieceMoves(NamedTuple):
    """The directions one piece type moves in: single steps, and slides along a ray."""

    steps: tuple[Direction, ...]
    slides: tuple[Direction, ...]


MOVES: dict[PieceType, PieceMoves] = {
    PieceType.PAWN: PieceMoves((UP,), ()),
    PieceType.LANCE: PieceMoves((), (UP,)),
    PieceType.KNIGHT: PieceMoves(KNIGHT_STEPS, ()),
    PieceType.SILVER: PieceMoves((UP_LEFT, UP, UP_RIGHT, DOWN_LEFT, DOWN_RIGHT), ()),
    PieceType.GOLD: PieceMoves(GOLD_STEPS, ()),
    PieceType.BISHOP: PieceMoves((), DIAGONALS),
    PieceType.ROOK: PieceMoves((), ORTHOGONALS),
    PieceType.KING: PieceMoves(ORTHOGONALS + DIAGONALS, ()),
    PieceType.PROM_PAWN: PieceMoves(GOLD_STEPS, ()),
    PieceType.PROM_LANCE: PieceMoves(GOLD_STEPS, ()),
    PieceType.PROM_KNIGHT: PieceMoves(GOLD_STEPS, ()),
    PieceType.PROM_SILVER: PieceMoves(GOLD_STEPS, ()),
    PieceType.PROM_BISHOP: PieceMoves(ORTHOGONALS, DIAGONALS),
    PieceType.PROM_ROOK: PieceMoves(DIAGONALS, ORTHOGONALS),
}

_MOVES_IN_TYPE_ORDER = tuple(MOVES[piece_type] for piece_type in PieceType)   # index: type - 1
_KING = int(PieceType.KING)


def attacks(codes: Sequence[int], square: int, target: int) -> bool:
    """True when the piece on `square` (it must hold one) attacks `target` in `codes`, pseudo-legally."""
    colour, piece = divmod(codes[square] - 1, NUM_PIECE_TYPES)
    return _attacks(codes, square, piece, colour, target)


def in_check(codes: Sequence[int], colour: int) -> bool:
    """True when `colour`'s king is attacked in `codes`; False without one (the first king if two)."""
    king_code = _KING + NUM_PIECE_TYPES * colour
    if king_code not in codes:
        return False
    king = codes.index(king_code)
    for square, code in enumerate(codes):
        if code:
            attacker, piece = divmod(code - 1, NUM_PIECE_TYPES)
            if attacker != colour and _attacks(codes, square, piece, attacker, king):
                return True
    return False


def _attacks(codes: Sequence[int], square: int, piece: int, colour: int, target: int) -> bool:
    """attacks() for `colour`'s piece of type `piece + 1` on `square`."""
    sign = 1 if colour == 0 else -1                  # White's moves: Black's turned round
    row, column = divmod(square, 9)
    steps, slides = _MOVES_IN_TYPE_ORDER[piece]
    for d_row, d_column in steps:
        r, c = row + sign * d_row, column + d_column
        if 0 <= r < 9 and 0 <= c < 9 and r * 9 + c == target:
            return True
    for d_row, d_column in slides:
        r, c = row + sign * d_row, column + d_column
        while 0 <= r < 9 and 0 <= c < 9:
            if r * 9 + c == target:
                return True
            if codes[r * 9 + c]:
                break
            r, c = r + sign * d_row, c + d_column
    return False
