"""The rules interface (`Position`) and the conventions every backend and caller share.

Canonical conventions used across the package:
  square index  0..80 in SFEN order: rank a..i (top to bottom), file 9..1 (left to right);
                index = (rank - 1) * 9 + (9 - file), so '9a' = 0, '1a' = 8, '5e' = 40, '1i' = 80.
  piece type    PieceType (rules/pieces.py), python-shogi's numbering: 1 P, 2 L, 3 N, 4 S, 5 G, 6 B,
                7 R, 8 K, 9 +P, 10 +L, 11 +N, 12 +S, 13 +B, 14 +R.
  piece code    0 empty, t Black's piece of type t, NUM_PIECE_TYPES + t (15..28) White's.
  hand counts   7 per side in HAND_PIECE_TYPES order: P L N S G B R.
  colour        0 black (sente), 1 white (gote).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shogi_dnn.rules.pieces import HAND_PIECE_TYPES, NUM_PIECE_TYPES, SFEN_PIECE

BLACK = 0
WHITE = 1
NUM_SQUARES = 81
_SFEN_HAND_ORDER = HAND_PIECE_TYPES[::-1]   # SFEN lists hands R B G S N L P


class IllegalMoveError(ValueError):
    """A move is malformed or not legal in the position (readers turn it into a KifuError)."""


class Position(Protocol):
    """The rules interface: a mutable position that only accepts legal moves."""

    def push_usi(self, usi: str) -> None:
        """Play a USI move; raises IllegalMoveError if it is malformed or illegal."""

    def sfen(self) -> str:
        """The current position as SFEN (with move number)."""

    @property
    def turn(self) -> int:
        """Side to move: BLACK (0) or WHITE (1)."""

    def piece_codes(self) -> list[int]:
        """81 ints in square-index order: 0 empty, t (1..14) black piece of type t, 14 + t white."""

    def hand_counts(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(black, white) pieces in hand, each 7 counts in HAND_PIECE_TYPES order."""

    def legal_usi(self) -> list[str]:
        """Every legal move in USI."""

    def is_checkmate(self) -> bool:
        """True when the side to move is checkmated."""

    def piece_type_at(self, square: int) -> tuple[int, int] | None:
        """(piece type, colour) at a square index, or None when it is empty."""

    def in_check(self) -> bool:
        """True when the side to move is in check."""

    def copy(self) -> Position:
        """An independent copy (a search plays moves on copies, the original stays)."""


def position_key(position: Position) -> str:
    """The position for repetition: board, side to move and hands (the SFEN without its move number)."""
    return position.sfen().rsplit(" ", 1)[0]


def square_index(file: int, rank: int) -> int:
    """Square index of file 1..9 and rank 1..9 (rank 1 = 'a', the top row from Black's side)."""
    return (rank - 1) * 9 + (9 - file)


def square_usi(file: int, rank: int) -> str:
    """USI name of a square: file 7, rank 7 -> '7g'."""
    return f"{file}{chr(ord('a') + rank - 1)}"


def parse_square(name: str) -> int:
    """Square index of a USI square name: '7g' -> 56 (no check: callers pass well-formed names)."""
    return (ord(name[1]) - ord("a")) * 9 + 9 - int(name[0])


def square_name(index: int) -> str:
    """USI name of a square index: 56 -> '7g'."""
    return f"{9 - index % 9}{chr(ord('a') + index // 9)}"


def format_sfen(codes: Sequence[int], black_hand: Sequence[int], white_hand: Sequence[int], turn: int,
                move_number: int = 1) -> str:
    """The SFEN of a position (the one SFEN writer): 81 piece codes, 7 hand counts a side, turn, move no."""
    rows = []
    for rank in range(9):
        row, empty = "", 0
        for code in codes[rank * 9:(rank + 1) * 9]:
            if code == 0:
                empty += 1
                continue
            row += str(empty) if empty else ""
            empty = 0
            colour, piece_type = divmod(int(code) - 1, NUM_PIECE_TYPES)
            symbol = SFEN_PIECE[piece_type + 1]
            row += symbol if colour == BLACK else symbol.lower()
        rows.append(row + (str(empty) if empty else ""))
    hands = ""
    for counts, colour in ((black_hand, BLACK), (white_hand, WHITE)):
        for piece_type in _SFEN_HAND_ORDER:
            n = int(counts[HAND_PIECE_TYPES.index(piece_type)])
            if n:
                symbol = SFEN_PIECE[piece_type] if colour == BLACK else SFEN_PIECE[piece_type].lower()
                hands += (str(n) if n > 1 else "") + symbol
    return f"{'/'.join(rows)} {'w' if turn == WHITE else 'b'} {hands or '-'} {move_number}"
