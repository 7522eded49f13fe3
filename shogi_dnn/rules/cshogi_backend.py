"""cshogi backend of the rules interface (optional extra `fast`): the same `Position` as rules.ShogiPosition.

cshogi's conventions differ from the package's (rules/position.py): its square is (file - 1) * 9 + (rank - 1)
and its piece types order B, R before G (1 P, 2 L, 3 N, 4 S, 5 B, 6 R, 7 G, 8 K, 9..14 promoted,
white = 16 + type). Both are translated here with lookup tables, so callers see identical values;
tests/rules/test_backends.py checks that both backends give the same positions, legal moves and shards.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

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
# A run of well-formed CSA move tokens, each followed by "\n" (push_csa_moves matches them all at once).
_CSA_TOKENS = re.compile(r"(?:[+-](?:00|[1-9][1-9])[1-9][1-9](?:FU|KY|KE|GI|KI|KA|HI|OU|TO|NY|NK|NG|UM|RY)\n)*")
# cshogi's 32-bit move: destination bits 0-6, origin 7-13 (81 + type - 1 for a drop), promotion bit 14,
# the moved piece's type bits 16-19 (cshogi numbering: 1 P, 2 L, 3 N, ...).
_PROMOTION = 1 << 14
_LAST_RANKS = (frozenset((0, 1)), frozenset((7, 8)))    # ranks (0 = a) where a knight may not stop
_USI_CACHE: dict[int, str] = {}                          # 16-bit move -> USI


@functools.lru_cache(maxsize=1024)
def _checked_sfen(sfen: str) -> str:
    """python-shogi's normalised SFEN (it validates it first); cached: a corpus has few start positions."""
    return ShogiPosition(sfen).sfen()


class CshogiPosition:
    """Position backed by cshogi (C++): same interface and values as rules.ShogiPosition."""

    backend = "cshogi"

    def __init__(self, sfen: str) -> None:
        # python-shogi validates and normalises the SFEN first: both backends then accept the same
        # start positions, and cshogi never sees a string that could abort the process.
        try:
            self._board = cshogi.Board(_checked_sfen(sfen))
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

    def push_csa_moves(self, tokens: Sequence[str]) -> list[str]:
        """Play CSA move tokens (`+7776FU`) in order; the USI of those played. Stops before the first
        that is malformed, by the side not to move, names the wrong piece, or is illegal (push_usi's
        checks: cshogi's is_legal, the promotion zone, a piece that could never move again), leaving
        it to the caller's reference path (kifu.csa), which gives its error."""
        if not tokens:
            return []
        valid = _CSA_TOKENS.match("\n".join(tokens) + "\n").end() // 8
        board = self._board
        turn = board.turn
        move_from_csa, is_legal, push = board.move_from_csa, board.is_legal, board.push
        sign = "-" if turn else "+"
        played = []
        for token in tokens[:valid] if valid < len(tokens) else tokens:
            if token[0] != sign:
                break
            move = move_from_csa(token[1:])
            if not move or not is_legal(move):
                break
            destination_rank = (move & 0x7F) % 9
            if move & _PROMOTION:
                zone = (0, 1, 2) if turn == 0 else (6, 7, 8)
                if destination_rank not in zone and ((move >> 7) & 0x7F) % 9 not in zone:
                    break
            elif destination_rank in _LAST_RANKS[turn]:
                origin = (move >> 7) & 0x7F
                kind = origin - 80 if origin >= 81 else (move >> 16) & 0xF
                last = destination_rank == (0 if turn == 0 else 8)
                if kind == 3 or (kind in (1, 2) and last):
                    break
            push(move)
            usi = _USI_CACHE.get(move & 0xFFFF)
            if usi is None:
                usi = _USI_CACHE[move & 0xFFFF] = cshogi.move_to_usi(move)
            played.append(usi)
            turn ^= 1
            sign = "-" if turn else "+"
        return played

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
