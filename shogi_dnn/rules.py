"""Move rules behind one small interface, so readers and the encoder never touch a library directly.

`new_position(sfen)` returns a `Position` backed by python-shogi (always available). The encoder's
hot loop may use a faster backend (cshogi) with the same interface; both must give identical results.

Canonical conventions used across the package:
  square index  0..80 in SFEN order: rank a..i (top to bottom), file 9..1 (left to right);
                index = (rank - 1) * 9 + (9 - file), so '9a' = 0, '1a' = 8, '5e' = 40, '1i' = 80.
  piece type    python-shogi's numbering: 1 P, 2 L, 3 N, 4 S, 5 G, 6 B, 7 R, 8 K,
                9 +P, 10 +L, 11 +N, 12 +S, 13 +B, 14 +R.
  colour        0 black (sente), 1 white (gote).
"""

from __future__ import annotations

import functools
from typing import Protocol

import shogi

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


class ShogiPosition:
    """Position backed by python-shogi."""

    backend = "python-shogi"

    def __init__(self, sfen: str) -> None:
        try:
            self._board = shogi.Board(sfen)
        except (ValueError, KeyError, IndexError) as exc:
            raise IllegalMoveError(f"invalid SFEN {sfen!r}: {exc}") from exc

    def push_usi(self, usi: str) -> None:
        try:
            move = shogi.Move.from_usi(usi)
        except (ValueError, KeyError, IndexError) as exc:
            raise IllegalMoveError(f"malformed move {usi!r}") from exc
        if not self._board.is_legal(move):
            raise IllegalMoveError(f"illegal move {usi}")
        self._board.push(move)

    def sfen(self) -> str:
        return self._board.sfen()

    @property
    def turn(self) -> int:
        return int(self._board.turn)

    def piece_codes(self) -> list[int]:
        codes = [0] * NUM_SQUARES
        for square in range(NUM_SQUARES):
            piece = self._board.piece_at(square)
            if piece is not None:
                codes[square] = piece.piece_type + NUM_PIECE_TYPES * piece.color
        return codes

    def hand_counts(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        hands = self._board.pieces_in_hand
        return tuple(tuple(hands[colour][t] for t in HAND_PIECE_TYPES) for colour in (BLACK, WHITE))  # type: ignore[return-value]

    def legal_usi(self) -> list[str]:
        return [move.usi() for move in self._board.legal_moves]

    def is_checkmate(self) -> bool:
        return bool(self._board.is_checkmate())

    def piece_type_at(self, square: int) -> tuple[int, int] | None:
        piece = self._board.piece_at(square)
        return None if piece is None else (piece.piece_type, int(piece.color))


def new_position(sfen: str) -> Position:
    """A position for readers (legality, KI2 move resolution) on the resolved backend: cshogi when
    installed (it judges every move exactly as python-shogi does, tests/test_backends.py), else
    python-shogi; SHOGI_DNN_BACKEND=python-shogi forces the reference library."""
    return position_factory()(sfen)


def square_index(file: int, rank: int) -> int:
    """Square index of file 1..9 and rank 1..9 (rank 1 = 'a', the top row from Black's side)."""
    return (rank - 1) * 9 + (9 - file)


def square_usi(file: int, rank: int) -> str:
    """USI name of a square: file 7, rank 7 -> '7g'."""
    return f"{file}{chr(ord('a') + rank - 1)}"


# Backend choice for the encoder (and anything else that asks): cshogi when importable (extra `fast`),
# else python-shogi. SHOGI_DNN_BACKEND=python-shogi|cshogi (or --backend) forces one.
BACKEND_ENV = "SHOGI_DNN_BACKEND"
BACKENDS = ("python-shogi", "cshogi")


@functools.lru_cache(maxsize=1)
def available_backends() -> tuple[str, ...]:
    """The backends that can be used here: python-shogi always, cshogi when it imports."""
    try:
        import shogi_dnn.rules_cshogi  # noqa: F401
    except ImportError:
        return BACKENDS[:1]
    return BACKENDS


def resolve_backend(name: str | None = None) -> str:
    """The backend to use: `name` if given and not 'auto', else $SHOGI_DNN_BACKEND, else the fastest.

    Raises:
        ConfigError: an unknown backend name, or cshogi asked for but not installed.
    """
    import os

    from shogi_dnn.errors import ConfigError
    choice = name if name not in (None, "", "auto") else os.environ.get(BACKEND_ENV, "auto") or "auto"
    if choice == "auto":
        return available_backends()[-1]
    if choice not in BACKENDS:
        raise ConfigError(f"unknown rules backend {choice!r} (choose from auto, {', '.join(BACKENDS)})")
    if choice not in available_backends():
        raise ConfigError(f"rules backend {choice!r} is not installed (pip install 'shogi-dnn[fast]')")
    return choice


def position_factory(backend: str | None = None):
    """A `sfen -> Position` constructor for the resolved backend (see resolve_backend)."""
    if resolve_backend(backend) == "cshogi":
        from shogi_dnn.rules_cshogi import CshogiPosition
        return CshogiPosition
    return ShogiPosition
