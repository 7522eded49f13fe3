"""The rules interface (`Position`) and the conventions every backend and caller share.

Canonical conventions used across the package:
  square index  0..80 in SFEN order: rank a..i (top to bottom), file 9..1 (left to right);
                index = (rank - 1) * 9 + (9 - file), so '9a' = 0, '1a' = 8, '5e' = 40, '1i' = 80.
  piece type    python-shogi's numbering: 1 P, 2 L, 3 N, 4 S, 5 G, 6 B, 7 R, 8 K,
                9 +P, 10 +L, 11 +N, 12 +S, 13 +B, 14 +R.
  colour        0 black (sente), 1 white (gote).
"""

from __future__ import annotations

from typing import Protocol

BLACK = 0
WHITE = 1
NUM_SQUARES = 81
NUM_PIECE_TYPES = 14            # unpromoted 1..8 and promoted 9..14
HAND_PIECE_TYPES = (1, 2, 3, 4, 5, 6, 7)   # P L N S G B R: the kinds that can be held in hand


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


def square_index(file: int, rank: int) -> int:
    """Square index of file 1..9 and rank 1..9 (rank 1 = 'a', the top row from Black's side)."""
    return (rank - 1) * 9 + (9 - file)


def square_usi(file: int, rank: int) -> str:
    """USI name of a square: file 7, rank 7 -> '7g'."""
    return f"{file}{chr(ord('a') + rank - 1)}"
