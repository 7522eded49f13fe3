"""cshogi backend of the rules interface (optional extra `fast`): the same `Position` as rules.ShogiPosition.

cshogi's conventions differ from the package's (rules/position.py): its square is (file - 1) * 9 + (rank - 1)
and its piece types order B, R before G (1 P, 2 L, 3 N, 4 S, 5 B, 6 R, 7 G, 8 K, 9..14 promoted,
white = 16 + type). Both are translated here with lookup tables, so callers see identical values;
tests/rules/test_backends.py checks that both backends give the same positions, legal moves and shards.
"""

from __future__ import annotations

import cshogi
import numpy as np

from shogi_dnn.rules.position import NUM_PIECE_TYPES, NUM_SQUARES, IllegalMoveError
from shogi_dnn.rules.pyshogi_backend import ShogiPosition

# Package square index i (rank-major from 9a) -> cshogi square (file-major from 1a).
_CSHOGI_SQUARE = np.array([(8 - i % 9) * 9 + i // 9 for i in range(NUM_SQUARES)], np.int64)
# cshogi piece type -> package piece type (python-shogi numbering): only G/B/R move.
_TYPE = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 7, 7: 5, 8: 8, 9: 9, 10: 10, 11: 11, 12: 12, 13: 13, 14: 14}
_WHITE_OFFSET = 16
_PROMOTABLE = frozenset((1, 2, 3, 4, 5, 6))   # cshogi P L N S B R, unpromoted
# cshogi piece code (0..31) -> package code: 0 empty, t black, 14 + t white.
_CODE = np.zeros(32, np.uint8)
for _cs, _t in _TYPE.items():
    _CODE[_cs] = _t
    _CODE[_cs + _WHITE_OFFSET] = _t + NUM_PIECE_TYPES


class CshogiPosition:
    """Position backed by cshogi (C++): same interface and values as rules.ShogiPosition."""

    backend = "cshogi"

    def __init__(self, sfen: str) -> None:
        # python-shogi validates and normalises the SFEN first: both backends then accept the same
        # start positions, and cshogi never sees a string that could abort the process.
        try:
            self._board = cshogi.Board(ShogiPosition(sfen).sfen())
        except (RuntimeError, ValueError) as exc:
            raise IllegalMoveError(f"invalid SFEN {sfen!r}: {exc}") from exc

    def push_usi(self, usi: str) -> None:
        # cshogi encodes the string as ASCII (a non-ASCII token raises UnicodeEncodeError inside it)
        ok = isinstance(usi, str) and 4 <= len(usi) <= 5 and usi.isascii()
        move = self._board.move_from_usi(usi) if ok else 0
        if not move or not self._board.is_legal(move) or cshogi.move_to_usi(move) != usi \
                or (usi.endswith("+") and not self._may_promote(usi)) or self._dead_piece(usi):
            raise IllegalMoveError(f"illegal move {usi}")
        self._board.push(move)

    def _may_promote(self, usi: str) -> bool:
        """cshogi's is_legal accepts '+' anywhere; promotion needs the zone and a promotable piece."""
        zone = "abc" if self._board.turn == 0 else "ghi"
        origin = (int(usi[0]) - 1) * 9 + ord(usi[1]) - ord("a")
        return (usi[1] in zone or usi[3] in zone) and self._board.piece(origin) % _WHITE_OFFSET in _PROMOTABLE

    def _dead_piece(self, usi: str) -> bool:
        """cshogi's is_legal also accepts a pawn, lance or knight moved or dropped where it can never move."""
        if usi.endswith("+") or usi[3] not in ("ab" if self._board.turn == 0 else "hi"):
            return False            # only the last two ranks can hold a piece that never moves again
        if usi[1] == "*":
            kind = "PLNSGBR".index(usi[0]) + 1
        else:
            kind = self._board.piece((int(usi[0]) - 1) * 9 + ord(usi[1]) - ord("a")) % _WHITE_OFFSET
        rank = ord(usi[3]) - ord("a") if self._board.turn == 0 else ord("i") - ord(usi[3])   # 0 = last rank
        return (kind in (1, 2) and rank == 0) or (kind == 3 and rank <= 1)

    def sfen(self) -> str:
        return self._board.sfen()

    @property
    def turn(self) -> int:
        return int(self._board.turn)

    def piece_codes(self) -> list[int]:
        return self.piece_array().tolist()

    def piece_array(self) -> np.ndarray:
        """[81] uint8 piece codes in package square order (the encoder's fast path)."""
        return _CODE[np.frombuffer(bytes(self._board.pieces), np.uint8)[_CSHOGI_SQUARE]]

    def hand_counts(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        black, white = self._board.pieces_in_hand   # both P L N S G B R, the package's order
        return tuple(black), tuple(white)

    def legal_usi(self) -> list[str]:
        return [cshogi.move_to_usi(move) for move in self._board.legal_moves]

    def is_checkmate(self) -> bool:
        # python-shogi: in check and no legal move (a stalemate is not a checkmate)
        return bool(self._board.is_check() and self._board.is_game_over())

    def piece_type_at(self, square: int) -> tuple[int, int] | None:
        code = int(_CODE[self._board.piece(int(_CSHOGI_SQUARE[square]))])
        if code == 0:
            return None
        colour, piece_type = divmod(code - 1, NUM_PIECE_TYPES)
        return piece_type + 1, colour
