"""The compiled CSA move checker (shogi_dnn.rules._native, _native.c): the CSA reader's hot path.

`NativeGame.push_csa_moves` plays runs of CSA move tokens in C, checking each legal (geometry, blocked
slides, promotion zone, dead pieces, nifu, own king left in check). The C code accepts a move only when
the reference rules certainly do (tests/rules/test_native.py); what it does not decide (a pawn drop
giving check, a position without both kings) stops the run, and that move goes through the reference
backend (`push_usi`), which also words every error. `move_line_counter` and `eval_run_reader` read
runs of move lines and evaluation comments in C; `NativeGame.move_codes` gives the absolute move codes.
SHOGI_DNN_NATIVE=0 turns it off.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np

from shogi_dnn.rules.factory import new_position
from shogi_dnn.rules.pieces import HAND_PIECE_TYPES, NUM_PIECE_TYPES, SFEN_PIECE
from shogi_dnn.rules.position import NUM_SQUARES, format_sfen, parse_square, square_name
from shogi_dnn.rules.pyshogi_backend import ShogiPosition

try:
    import shogi_dnn.rules._native as _native
except ImportError:                      # no C compiler at install time
    _native = None
_play_csa = getattr(_native, "play_csa", None)
_csa_move_lines = getattr(_native, "csa_move_lines", None)
_csa_eval_run = getattr(_native, "csa_eval_run", None)
# in_check(row, BLACK) for each [81] row of an [N, 81] uint8 board -> bytes (convert's repetition checks)
in_check_rows = getattr(_native, "in_check_rows", None)

NATIVE_ENV = "SHOGI_DNN_NATIVE"
HAND_KINDS = len(HAND_PIECE_TYPES)                                   # 7
_DROP_LETTERS = "".join(SFEN_PIECE[t] for t in HAND_PIECE_TYPES)     # "PLNSGBR"


def enabled() -> bool:
    """True when the extension is built and SHOGI_DNN_NATIVE is not 0."""
    return _play_csa is not None and os.environ.get(NATIVE_ENV, "1") != "0"


def _usi_code(usi: str) -> int:
    """The absolute code of a well-formed USI move (the inverse of _usi_table)."""
    destination = parse_square(usi[2:4])
    if usi[1] == "*":
        origin = NUM_SQUARES + _DROP_LETTERS.index(usi[0])
    else:
        origin = parse_square(usi[0:2])
    return (origin * NUM_SQUARES + destination) * 2 + usi.endswith("+")


@functools.lru_cache(maxsize=1)
def _usi_table() -> np.ndarray:
    """USI of every absolute move code, an object array indexed by the code (None where no move is)."""
    names = [square_name(index) for index in range(NUM_SQUARES)]
    table = np.full((NUM_SQUARES + HAND_KINDS) * NUM_SQUARES * 2, None, object)
    board = [origin + destination for origin in names for destination in names]
    table[0:2 * NUM_SQUARES * NUM_SQUARES:2] = board
    table[1:2 * NUM_SQUARES * NUM_SQUARES:2] = [usi + "+" for usi in board]
    drops = [f"{letter}*{destination}" for letter in _DROP_LETTERS for destination in names]
    table[2 * NUM_SQUARES * NUM_SQUARES::2] = drops
    return table


@functools.lru_cache(maxsize=1024)
def _start(sfen: str) -> tuple[bytes, bytes, int]:
    """A start position's board codes, hands (Black's, then White's) and side to move (python-shogi checks
    it: IllegalMoveError). Cached.
    """
    position = ShogiPosition(sfen)
    black, white = position.hand_counts()
    return bytes(position.piece_codes()), bytes(black + white), position.turn


class NativeGame:
    """A position for the CSA reader (the part of rules.Position it uses, plus `push_csa_moves`)."""

    def __init__(self, sfen: str) -> None:
        board, hands, turn = _start(sfen)
        self._board = bytearray(board)          # [81] codes, Black's view (play_csa writes them in place)
        self._hands = bytearray(hands)          # [14] Black's P..R, White's P..R
        self._turn = turn
        self._codes: list[np.ndarray] = []                            # of the moves played, in order

    def push_csa_moves(self, tokens: Sequence[str]) -> list[str]:
        """Play CSA move tokens (`+7776FU`) in order while the C checker accepts them; their USI."""
        if not tokens:
            return []
        return self.push_csa_text("\n".join(tokens) + "\n", len(tokens))

    def push_csa_text(self, text: str, count: int) -> list[str]:
        """push_csa_moves of `count` tokens given as one text, each followed by "\n"."""
        if not count:
            return []
        codes = np.empty(count, np.int64)
        data = text.encode("ascii", "replace")
        if len(data) != 8 * count:                  # a token that is not 7 characters: the reference's
            return []
        assert _play_csa is not None                   # a NativeGame is made only where enabled()
        played = _play_csa(self._board, self._hands, self._turn, data, codes)
        self._turn ^= played & 1
        self._codes.append(codes[:played])
        return _usi_table()[codes[:played]].tolist()

    def push_usi(self, usi: str) -> None:
        """One move through the reference backend (its legality check and error words)."""
        position = new_position(self.sfen())
        position.push_usi(usi)                       # IllegalMoveError: the caller reports it
        black, white = position.hand_counts()
        self._board = bytearray(position.piece_codes())
        self._hands = bytearray(black + white)
        self._turn = position.turn
        self._codes.append(np.array([_usi_code(usi)], np.int64))

    def move_codes(self) -> np.ndarray:
        """[moves played] int64 absolute code of every move played (features.absolute_move_code)."""
        if len(self._codes) == 1:
            return self._codes[0]
        return np.concatenate(self._codes) if self._codes else np.empty(0, np.int64)

    @property
    def turn(self) -> int:
        return self._turn

    def sfen(self) -> str:
        return format_sfen(list(self._board), list(self._hands[:HAND_KINDS]), list(self._hands[HAND_KINDS:]),
                           self._turn)

    def piece_codes(self) -> list[int]:
        return list(self._board)

    def piece_type_at(self, square: int) -> tuple[int, int] | None:
        code = self._board[square]
        if code == 0:
            return None
        colour, piece_type = divmod(code - 1, NUM_PIECE_TYPES)
        return piece_type + 1, colour


def new_csa_position(sfen: str):
    """The CSA reader's position: a NativeGame when enabled(), else the rules backend's.

    Raises:
        IllegalMoveError: an invalid SFEN.
    """
    return csa_position_factory()(sfen)


def csa_position_factory():
    """new_csa_position with enabled() decided once."""
    return NativeGame if enabled() else new_position


def move_line_counter():
    """When enabled(): `count(text, offset)`, the number of consecutive well-formed CSA move lines from
    `offset` (the regex (?:[+-][0-9]{4}[A-Z]{2}\n)+); else None.
    """
    return _csa_move_lines if enabled() else None


def eval_run_reader():
    """When enabled(): `read(text, offset, number, moves_before, evals)`, the C reader of a run of move lines
    and evaluation comments (`'** 123 PV`): (characters, lines, moves' text, line numbers or None), scores
    set into `evals`; else None.
    """
    return _csa_eval_run if enabled() else None


__all__ = ["NATIVE_ENV", "NativeGame", "csa_position_factory", "enabled", "eval_run_reader",
           "move_line_counter", "new_csa_position"]
