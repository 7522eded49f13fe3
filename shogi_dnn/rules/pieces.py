"""Piece types and what belongs to each: the one place the package's piece numbers are written.

  type            value  SFEN  promotes to    set count (per kind, both sides together)
  PAWN            1      P     PROM_PAWN      18
  LANCE           2      L     PROM_LANCE     4
  KNIGHT          3      N     PROM_KNIGHT    4
  SILVER          4      S     PROM_SILVER    4
  GOLD            5      G     -              4
  BISHOP          6      B     PROM_BISHOP    2
  ROOK            7      R     PROM_ROOK      2
  KING            8      K     -              2
  PROM_PAWN       9      +P    (counted with its base kind)
  PROM_LANCE      10     +L
  PROM_KNIGHT     11     +N
  PROM_SILVER     12     +S
  PROM_BISHOP     13     +B    (also HORSE, 馬)
  PROM_ROOK       14     +R    (also DRAGON, 龍)

The values are python-shogi's numbering and are stored in shards, so they never change.
"""

from __future__ import annotations

import enum


class PieceType(enum.IntEnum):
    """A piece type: 1..8 unpromoted (P L N S G B R K), 9..14 promoted (+P +L +N +S +B +R)."""

    PAWN = 1
    LANCE = 2
    KNIGHT = 3
    SILVER = 4
    GOLD = 5
    BISHOP = 6
    ROOK = 7
    KING = 8
    PROM_PAWN = 9
    PROM_LANCE = 10
    PROM_KNIGHT = 11
    PROM_SILVER = 12
    PROM_BISHOP = 13
    PROM_ROOK = 14
    HORSE = 13           # alias of PROM_BISHOP
    DRAGON = 14          # alias of PROM_ROOK


NUM_PIECE_TYPES = len(PieceType)            # 14 (aliases are not counted)
# The kinds that can be held in hand, in the order every hand count is stored (P L N S G B R).
HAND_PIECE_TYPES: tuple[PieceType, ...] = (
    PieceType.PAWN, PieceType.LANCE, PieceType.KNIGHT, PieceType.SILVER, PieceType.GOLD, PieceType.BISHOP,
    PieceType.ROOK)
# The unpromoted kinds, P L N S G B R K (the kinds a set of pieces is counted in).
BASE_PIECE_TYPES: tuple[PieceType, ...] = (*HAND_PIECE_TYPES, PieceType.KING)
# Unpromoted type -> its promoted type (gold and king do not promote), and back. The tables below are keyed
# by int: piece types read from arrays and codes index them (a PieceType is an int).
PROMOTED: dict[int, PieceType] = {
    PieceType.PAWN: PieceType.PROM_PAWN, PieceType.LANCE: PieceType.PROM_LANCE,
    PieceType.KNIGHT: PieceType.PROM_KNIGHT, PieceType.SILVER: PieceType.PROM_SILVER,
    PieceType.BISHOP: PieceType.PROM_BISHOP, PieceType.ROOK: PieceType.PROM_ROOK}
UNPROMOTED: dict[int, PieceType] = {promoted: PieceType(base) for base, promoted in PROMOTED.items()}
# Pieces of each unpromoted kind in one set (both sides together); also the most one side can hold.
SET_COUNT: dict[int, int] = {
    PieceType.PAWN: 18, PieceType.LANCE: 4, PieceType.KNIGHT: 4, PieceType.SILVER: 4, PieceType.GOLD: 4,
    PieceType.BISHOP: 2, PieceType.ROOK: 2, PieceType.KING: 2}
# SFEN letter of each piece type (Black's; White's are lower case), and the type of an unpromoted letter.
SFEN_PIECE: dict[int, str] = {
    **{t: "PLNSGBRK"[t - 1] for t in BASE_PIECE_TYPES},
    **{promoted: "+" + "PLNSGBRK"[base - 1] for base, promoted in PROMOTED.items()}}
SFEN_TYPE: dict[str, PieceType] = {SFEN_PIECE[t]: t for t in BASE_PIECE_TYPES}
# YaneuraOu's (Bonanza 6's) piece values in centipawns; the king's only ranks it above every other piece.
PIECE_VALUES: dict[PieceType, int] = {
    PieceType.PAWN: 90, PieceType.LANCE: 315, PieceType.KNIGHT: 405, PieceType.SILVER: 495,
    PieceType.GOLD: 540, PieceType.BISHOP: 855, PieceType.ROOK: 990, PieceType.KING: 15000,
    PieceType.PROM_PAWN: 540, PieceType.PROM_LANCE: 540, PieceType.PROM_KNIGHT: 540,
    PieceType.PROM_SILVER: 540, PieceType.PROM_BISHOP: 945, PieceType.PROM_ROOK: 1395,
}


def piece_code(piece_type: int, colour: int) -> int:
    """The piece code of `colour`'s (0 black, 1 white) piece of `piece_type`: t Black's, 14 + t White's."""
    return int(piece_type) + NUM_PIECE_TYPES * colour
