"""cshogi backend of the rules interface (optional extra `fast`): the same `Position` as rules.ShogiPosition.

cshogi's square is (file - 1) * 9 + (rank - 1) and its piece types order B, R before G (1 P, 2 L, 3 N,
4 S, 5 B, 6 R, 7 G, 8 K, 9..14 promoted, white = 16 + type); lookup tables translate both.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import cshogi
import numpy as np

from shogi_dnn.rules.pieces import HAND_PIECE_TYPES, NUM_PIECE_TYPES, PROMOTED, SFEN_PIECE, PieceType
from shogi_dnn.rules.position import NUM_SQUARES, IllegalMoveError, parse_square
from shogi_dnn.rules.pyshogi_backend import ShogiPosition

# Package square index i (rank-major from 9a) -> cshogi square (file-major from 1a).
_CSHOGI_SQUARE = np.array([(8 - i % 9) * 9 + i // 9 for i in range(NUM_SQUARES)], np.int64)
# cshogi piece type -> package PieceType, by cshogi's constant of the same name (only G/B/R differ).
_TYPE = {getattr(cshogi, piece_type.name): piece_type for piece_type in PieceType}
_WHITE_OFFSET = 16
_PROMOTABLE = frozenset(getattr(cshogi, PieceType(t).name) for t in PROMOTED)      # cshogi P L N S B R
# cshogi's type of a dropped piece by its USI letter, and the kinds that can be stuck (cshogi numbering).
_DROP_KIND = {SFEN_PIECE[piece_type]: getattr(cshogi, piece_type.name) for piece_type in HAND_PIECE_TYPES}
_STUCK_ON_LAST_RANK = frozenset((cshogi.PAWN, cshogi.LANCE))
_STUCK_ON_LAST_TWO_RANKS = cshogi.KNIGHT
# cshogi piece code (0..31) -> package code: 0 empty, t black, 14 + t white.
_CODE = np.zeros(32, np.uint8)
for _cs, _t in _TYPE.items():
    _CODE[_cs] = _t
    _CODE[_cs + _WHITE_OFFSET] = _t + NUM_PIECE_TYPES
# A run of well-formed CSA move tokens, each followed by "\n" (push_csa_moves matches them all at once).
_CSA_TOKENS = re.compile(
    r"(?:[+-](?:00|[1-9][1-9])[1-9][1-9](?:FU|KY|KE|GI|KI|KA|HI|OU|TO|NY|NK|NG|UM|RY)\n)*")
# cshogi's 32-bit move: destination bits 0-6, origin 7-13 (81 + type - 1 for a drop), promotion bit 14,
# the moved piece's type bits 16-19 (cshogi numbering: 1 P, 2 L, 3 N, ...).
_PROMOTION = 1 << 14
_ALTERNATING = ("+-" * 513, "-+" * 513)                  # the signs of a move list, by the first mover
# By mover and 16-bit move: 1 when push_csa_moves must look closer (a promotion, or a destination on
# the mover's last two ranks, where a pawn, lance or knight may be stuck); cshogi's square is
# (file - 1) * 9 + rank - 1.
_NEEDS_CHECK = tuple(bytes(int(bool(m & _PROMOTION) or (m & 0x7F) % 9 in ranks) for m in range(1 << 16))
                     for ranks in ((0, 1), (7, 8)))


@functools.lru_cache(maxsize=1)
def _usi_table() -> np.ndarray:
    """[65536] object: the USI of each 16-bit cshogi move (None where none is)."""
    table = np.full(1 << 16, None, object)
    for origin in range(81 + 7):
        for destination in range(81):
            for promote in (0, 1):
                move = destination | origin << 7 | promote << 14
                if origin != destination and not (origin >= 81 and promote):
                    table[move] = cshogi.move_to_usi(move)
    return table


def _usi_of(moves: list[int]) -> list[str]:
    """The USI of cshogi moves."""
    return _usi_table()[np.asarray(moves, np.int64) & 0xFFFF].tolist() if moves else []


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
        except IllegalMoveError:
            raise                       # python-shogi's or rules.validity's words, already naming the SFEN
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
        """Play CSA move tokens (`+7776FU`) in order; the USI of those played. Stops before the first that is
        malformed, by the wrong side, names the wrong piece or is illegal (push_usi's checks); the caller's
        reference path (kifu.csa) then gives its error.
        """
        if not tokens:
            return []
        joined = "\n".join(tokens) + "\n"
        tokens_run = _CSA_TOKENS.match(joined)                 # always matches: a run of zero tokens or more
        count = tokens_run.end() // 8 if tokens_run else 0    # well-formed tokens (8 characters each)
        board = self._board
        turn = board.turn
        signs, expected = joined[0:8 * count:8], _ALTERNATING[turn][:count]
        if signs != expected:                                   # a move by the side not to move
            count = next(i for i, (a, b) in enumerate(zip(signs, expected)) if a != b)
        move_from_csa, is_legal, push = board.move_from_csa, board.is_legal, board.push
        needs_check, other_check = _NEEDS_CHECK[turn], _NEEDS_CHECK[1 - turn]
        moves: list[int] = []
        append = moves.append
        for token in tokens[:count] if count < len(tokens) else tokens:
            move = move_from_csa(token[1:])
            if not move or not is_legal(move):
                break
            if needs_check[move & 0xFFFF] and not self._promotes_and_lands_well(move, board.turn):
                break
            push(move)
            append(move)
            needs_check, other_check = other_check, needs_check
        return _usi_of(moves)

    @staticmethod
    def _promotes_and_lands_well(move: int, turn: int) -> bool:
        """False for what cshogi's is_legal lets through: a promotion outside the zone, a dead piece."""
        destination_rank, origin = (move & 0x7F) % 9, (move >> 7) & 0x7F
        if move & _PROMOTION:
            zone = (0, 1, 2) if turn == 0 else (6, 7, 8)
            return destination_rank in zone or origin % 9 in zone
        kind = origin - 80 if origin >= 81 else (move >> 16) & 0xF       # cshogi: 1 P, 2 L, 3 N
        distance = destination_rank if turn == 0 else 8 - destination_rank   # 0 = the last rank
        return not (kind == _STUCK_ON_LAST_TWO_RANKS and distance <= 1
                    or kind in _STUCK_ON_LAST_RANK and distance == 0)

    def _may_promote(self, usi: str) -> bool:
        """cshogi's is_legal accepts '+' anywhere; promotion needs the zone and a promotable piece."""
        zone = "abc" if self._board.turn == 0 else "ghi"
        origin = int(_CSHOGI_SQUARE[parse_square(usi[0:2])])
        return (usi[1] in zone or usi[3] in zone) and self._board.piece(origin) % _WHITE_OFFSET in _PROMOTABLE

    def _dead_piece(self, usi: str) -> bool:
        """cshogi's is_legal also accepts a pawn, lance or knight moved or dropped where it can never move."""
        if usi.endswith("+") or usi[3] not in ("ab" if self._board.turn == 0 else "hi"):
            return False            # only the last two ranks can hold a piece that never moves again
        if usi[1] == "*":
            kind = _DROP_KIND[usi[0]]
        else:
            kind = self._board.piece(int(_CSHOGI_SQUARE[parse_square(usi[0:2])])) % _WHITE_OFFSET
        rank = ord(usi[3]) - ord("a") if self._board.turn == 0 else ord("i") - ord(usi[3])   # 0 = last rank
        return (kind in _STUCK_ON_LAST_RANK and rank == 0) or (kind == _STUCK_ON_LAST_TWO_RANKS and rank <= 1)

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

    def in_check(self) -> bool:
        return bool(self._board.is_check())

    def copy(self) -> CshogiPosition:
        twin = CshogiPosition.__new__(CshogiPosition)
        twin._board = self._board.copy()
        return twin

    def piece_type_at(self, square: int) -> tuple[int, int] | None:
        code = int(_CODE[self._board.piece(int(_CSHOGI_SQUARE[square]))])
        if code == 0:
            return None
        colour, piece_type = divmod(code - 1, NUM_PIECE_TYPES)
        return piece_type + 1, colour
