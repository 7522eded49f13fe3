"""python-shogi backend of the rules interface (always installed): the reference implementation."""

from __future__ import annotations

import copy

import shogi

from shogi_dnn.rules.position import (
    BLACK,
    HAND_PIECE_TYPES,
    NUM_PIECE_TYPES,
    NUM_SQUARES,
    WHITE,
    IllegalMoveError,
)
from shogi_dnn.rules.validity import check_sfen


class ShogiPosition:
    """Position backed by python-shogi."""

    backend = "python-shogi"

    def __init__(self, sfen: str) -> None:
        # IllegalPositionError for a position no game reaches (python-shogi would keep `300P`, nifu, ...);
        # a side without a king stays readable: record files hold mate problems (rules/validity.py).
        check_sfen(sfen, require_kings=False)
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
        black, white = (tuple(hands[colour][t] for t in HAND_PIECE_TYPES) for colour in (BLACK, WHITE))
        return black, white

    def legal_usi(self) -> list[str]:
        return [move.usi() for move in self._board.legal_moves]

    def is_checkmate(self) -> bool:
        return bool(self._board.is_checkmate())

    def in_check(self) -> bool:
        return bool(self._board.is_check())

    def copy(self) -> ShogiPosition:
        # python-shogi has no Board.copy(); a board with the move stack keeps the repetition history
        twin = ShogiPosition.__new__(ShogiPosition)
        twin._board = copy.deepcopy(self._board)
        return twin

    def piece_type_at(self, square: int) -> tuple[int, int] | None:
        piece = self._board.piece_at(square)
        return None if piece is None else (piece.piece_type, int(piece.color))
