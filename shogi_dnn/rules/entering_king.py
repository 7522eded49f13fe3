"""Entering-king (nyugyoku) declaration: when the side to move may declare a win.

The side to move's king in the opponent's camp (its last three ranks), not in check, at least 10 other own
pieces there, and points (bishop, rook and their promotions 5, every other piece 1, own pieces in the camp
plus own hand) of at least 28 for Black and 27 for White (CSA rule 27, "CSARule27"), or 31 for either
("CSARule24"). "NoEnteringKing": never. The time-left condition is the GUI's.
"""

from __future__ import annotations

from shogi_dnn.rules.pieces import HAND_PIECE_TYPES, NUM_PIECE_TYPES, PieceType
from shogi_dnn.rules.position import BLACK, Position

ENTERING_KING_RULES = ("NoEnteringKing", "CSARule27", "CSARule24")
ENTERING_KING_RULE = "CSARule27"          # the default rule
_BIG_PIECES = frozenset((PieceType.BISHOP, PieceType.ROOK, PieceType.PROM_BISHOP, PieceType.PROM_ROOK))
_CAMP_SQUARES = (range(27), range(54, 81))    # by side to move: the opponent's last three ranks


def _points(piece_type: int) -> int:
    """A piece's points in a declaration: 5 for a bishop, a rook or their promotions, else 1."""
    return 5 if piece_type in _BIG_PIECES else 1


def declaration_win(position: Position, rule: str = ENTERING_KING_RULE) -> bool:
    """True when the side to move may declare an entering-king win under `rule` (module docstring)."""
    if rule == "NoEnteringKing":
        return False
    turn = position.turn
    offset = NUM_PIECE_TYPES * turn                      # own codes: 1..14 (Black) or 15..28 (White)
    codes = position.piece_codes()
    own = [codes[s] - offset for s in _CAMP_SQUARES[turn] if offset < codes[s] <= offset + NUM_PIECE_TYPES]
    if PieceType.KING not in own or position.in_check():
        return False
    others = [t for t in own if t != PieceType.KING]
    hand = position.hand_counts()[turn]
    points = sum(_points(t) for t in others) + sum(n * _points(t) for n, t in zip(hand, HAND_PIECE_TYPES))
    needed = 31 if rule == "CSARule24" else (28 if turn == BLACK else 27)
    return len(others) >= 10 and points >= needed
