"""The field's position files: dlshogi's hcpe and YaneuraOu's PackedSfenValue, decoded in bulk (numpy).

  format  suffix        record (little-endian)                                             bytes
  hcpe    .hcpe         hcp[32] eval:int16 move:uint16 result:uint8 pad:uint8               38
  psv     .bin .psv     sfen[32] score:int16 move:uint16 ply:uint16 result:int8 pad:uint8   40

hcp and sfen are 256-bit Huffman codes of a position, read bit by bit from the least significant bit of
byte 0: the side to move (1 bit), Black's and White's king squares (7 bits each), then every other square
in the format's square order (a code from BOARD_CODES), then the pieces in hand (HAND_CODES) up to bit 256.
The two formats share that layout and differ in their tables and square order (the tables below):

  field        hcpe (dlshogi, Apery's HuffmanCodedPos)          psv (YaneuraOu's PackedSfen)
  squares      file-major from 1a: sq = 9 (file - 1) + rank - 1  the same
  eval/score   side to move's view, centipawns                   side to move's view
  move         Apery move16: to | from << 7 | promote << 14;     YaneuraOu Move16: the same fields; a
               a drop's `from` is 81 + piece type - 1 (P L N S   drop sets bit 14 and `from` is the piece
               B R G: cshogi's order)                             type (P L N S B R G); promote bit 15
  result       1 Black won, 2 White won, 0 draw                  1 side to move won, -1 lost, 0 draw
  ply          none (0)                                          moves played before the position

"""

from __future__ import annotations

import dataclasses

import numpy as np

from shogi_dnn.rules import HAND_PIECE_TYPES, NUM_PIECE_TYPES, NUM_SQUARES, PieceType

HCPE, PSV = "hcpe", "psv"
SUFFIXES = {".hcpe": HCPE, ".bin": PSV, ".psv": PSV}
HCPE_DTYPE = np.dtype([("pos", "u1", 32), ("eval", "<i2"), ("move", "<u2"), ("result", "u1"), ("pad", "u1")])
PSV_DTYPE = np.dtype([("pos", "u1", 32), ("eval", "<i2"), ("move", "<u2"), ("ply", "<u2"), ("result", "i1"),
                      ("pad", "u1")])
DTYPES = {HCPE: HCPE_DTYPE, PSV: PSV_DTYPE}
assert HCPE_DTYPE.itemsize == 38 and PSV_DTYPE.itemsize == 40

P, L, N, S, G, B, R, K = (PieceType.PAWN, PieceType.LANCE, PieceType.KNIGHT, PieceType.SILVER, PieceType.GOLD,
                          PieceType.BISHOP, PieceType.ROOK, PieceType.KING)
_PROMOTED = {P: PieceType.PROM_PAWN, L: PieceType.PROM_LANCE, N: PieceType.PROM_KNIGHT,
             S: PieceType.PROM_SILVER, B: PieceType.PROM_BISHOP, R: PieceType.PROM_ROOK}
# The codes, bits in the order they are read (colour 1: White). On the board: "1", the type's code, then the
# flags (hcpe: colour, promoted; psv: promoted, colour; a gold has the colour bit alone). In hand: the
# type's hand code, then the colour bit. In the box (a piece neither on the board nor in a hand: the pieces a
# handicap game removes): one code a type, colour 0 (a gold's is the box silver's with colour 1).
#                 type: (on the board, in hand, in the box)
_TYPE_CODES = {HCPE: {P: ("0", "00", "010"), L: ("100", "1000", "10010"), N: ("110", "1100", "11010"),
                      S: ("101", "1010", "10110"), G: ("1110", "1110", "10111"),
                      B: ("11110", "111110", "1111000"), R: ("11111", "111111", "1111010")},
               PSV: {P: ("0", "00", "010"), L: ("100", "1000", "10010"), N: ("101", "1010", "10110"),
                     S: ("110", "1100", "11010"), G: ("1110", "1110", "11011"),
                     B: ("11110", "111100", "1111010"), R: ("11111", "111110", "1111110")}}
BOX = 64                          # the hand symbol of a piece in the box (not a hand's)


def board_codes(kind: str) -> dict[int, str]:
    """Rules piece code (colour * 14 + type; 0 empty) -> its board code."""
    codes = {0: "0"}
    for piece_type, (on_board, _, _) in _TYPE_CODES[kind].items():
        for colour in (0, 1):
            if piece_type == G:
                codes[colour * NUM_PIECE_TYPES + G] = f"1{on_board}{colour}"
                continue
            for promoted in (0, 1):
                flags = f"{colour}{promoted}" if kind == HCPE else f"{promoted}{colour}"
                shown = _PROMOTED[piece_type] if promoted else piece_type
                codes[colour * NUM_PIECE_TYPES + shown] = f"1{on_board}{flags}"
    return codes


def hand_codes(kind: str) -> dict[int, str]:
    """Hand symbol (colour * 8 + index in HAND_PIECE_TYPES + 1; BOX + index + 1 in the box) -> its code."""
    codes = {}
    for piece_type, (_, in_hand, in_box) in _TYPE_CODES[kind].items():
        index = HAND_PIECE_TYPES.index(piece_type)
        for colour in (0, 1):
            codes[colour * 8 + index + 1] = f"{in_hand}{colour}"
        codes[BOX + index + 1] = in_box
    return codes


@dataclasses.dataclass(frozen=True)
class Decoded:
    """N positions of a position file, absolute (Black's view); ok: False where a row does not decode."""

    # board [N, 81] uint8 rules piece codes (colour * 14 + type) in SFEN square order; hands [N, 2, 7] uint8
    # (Black, White) in HAND_PIECE_TYPES order; turn [N] uint8; move_from [N] int16 a square, or -1 - hand
    # index for a drop; move_to [N] int16; promote [N] bool; eval [N] int16 side to move's view; win [N]
    # float32 side to move (1, 0, 0.5); ply [N] int16; ok [N] bool (bits left over or missing, a bad square)
    board: np.ndarray
    hands: np.ndarray
    turn: np.ndarray
    move_from: np.ndarray
    move_to: np.ndarray
    promote: np.ndarray
    eval: np.ndarray
    win: np.ndarray
    ply: np.ndarray
    ok: np.ndarray


def _tables(kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Lookup tables indexed by the next 8 bits (LSB = the next bit): board symbol (a rules piece code, 255:
    no code) and length, hand symbol (colour * 8 + index + 1, 0: no code) and length."""
    board_sym = np.full(256, 255, np.uint8)
    board_len = np.zeros(256, np.uint8)
    hand_sym = np.zeros(256, np.uint8)
    hand_len = np.zeros(256, np.uint8)

    def put(sym_table: np.ndarray, len_table: np.ndarray, code: str, symbol: int) -> None:
        value = sum(int(bit) << i for i, bit in enumerate(code))
        for rest in range(1 << (8 - len(code))):
            index = value | rest << len(code)
            assert len_table[index] == 0, f"{kind}: codes overlap at {code}"
            sym_table[index], len_table[index] = symbol, len(code)

    for symbol, code in board_codes(kind).items():
        put(board_sym, board_len, code, symbol)
    for symbol, code in hand_codes(kind).items():
        put(hand_sym, hand_len, code, symbol)
    return board_sym, board_len, hand_sym, hand_len


_TABLES = {kind: _tables(kind) for kind in (HCPE, PSV)}
# The formats' square order (file-major from 1a) -> SFEN order (rank-major from 9a).
_FORMAT_TO_SFEN = np.array([(sq % 9) * 9 + (8 - sq // 9) for sq in range(NUM_SQUARES)], np.int16)
# Drop piece order of the move fields (P L N S B R G) -> index in HAND_PIECE_TYPES (P L N S G B R).
_DROP_INDEX = np.array([HAND_PIECE_TYPES.index(t) for t in (P, L, N, S, B, R, G)], np.int16)


def _read(words: np.ndarray, cursor: np.ndarray, width: int) -> np.ndarray:
    """The `width` (<= 8) bits at each row's cursor as integers (LSB first); words: [N, 6] uint64, the
    position's 256 bits and zero words after them. [N] int64."""
    index = (cursor >> 6)[:, None]
    shift = (cursor & 63).astype(np.uint64)
    low = np.take_along_axis(words, index, axis=1)[:, 0] >> shift
    high = np.take_along_axis(words, index + 1, axis=1)[:, 0] << (np.uint64(64) - shift) % np.uint64(64)
    high = np.where(shift == 0, np.uint64(0), high)
    return ((low | high) & np.uint64((1 << width) - 1)).astype(np.int64)


def decode(records: np.ndarray, kind: str) -> Decoded:
    """Decode a structured array of DTYPES[kind] records (module docstring)."""
    n = records.shape[0]
    board_sym, board_len, hand_sym, hand_len = _TABLES[kind]
    words = np.zeros((n, 6), np.uint64)
    words[:, :4] = np.ascontiguousarray(records["pos"]).view("<u8").reshape(n, 4)
    turn = (words[:, 0] & np.uint64(1)).astype(np.uint8)
    kings = np.stack([_read(words, np.full(n, 1), 7), _read(words, np.full(n, 8), 7)],
                     axis=1).astype(np.int16)
    ok = (kings < NUM_SQUARES).all(axis=1) & (kings[:, 0] != kings[:, 1])
    kings = np.where(ok[:, None], kings, np.array([[0, 1]], np.int16))
    board_format = np.zeros((n, NUM_SQUARES), np.uint8)
    rows = np.arange(n)
    board_format[rows, kings[:, 0]] = K
    board_format[rows, kings[:, 1]] = NUM_PIECE_TYPES + K
    cursor = np.full(n, 15, np.int64)
    for square in range(NUM_SQUARES):
        is_king = (kings[:, 0] == square) | (kings[:, 1] == square)
        window = _read(words, np.minimum(cursor, 256), 8)
        symbol, length = board_sym[window], board_len[window]
        take = ~is_king
        ok &= is_king | (symbol != 255)
        board_format[:, square] = np.where(take, symbol, board_format[:, square])
        cursor += length * take
    hands = np.zeros((n, 2, len(HAND_PIECE_TYPES)), np.uint8)
    for _ in range(40):
        live = cursor < 256
        if not live.any():
            break
        window = _read(words, np.minimum(cursor, 256), 8)
        symbol, length = hand_sym[window], hand_len[window]
        ok &= ~live | (symbol != 0)
        got = live & (symbol != 0)
        held = got & (symbol < BOX)                      # a piece in the box is in no hand
        colour, index = (symbol.astype(np.int64) - 1) // 8, (symbol.astype(np.int64) - 1) % 8
        np.add.at(hands, (rows[held], colour[held], index[held]), 1)
        cursor += np.where(got, length, 256)
    ok &= cursor == 256
    board = np.zeros_like(board_format)
    board[:, _FORMAT_TO_SFEN] = board_format
    move = records["move"].astype(np.int32)
    to = _FORMAT_TO_SFEN[np.minimum(move & 0x7F, NUM_SQUARES - 1)]
    ok &= (move & 0x7F) < NUM_SQUARES
    if kind == HCPE:
        origin = (move >> 7) & 0x7F
        drop = origin >= NUM_SQUARES
        piece = np.clip(origin - NUM_SQUARES, 0, 6)
        promote = ((move >> 14) & 1).astype(bool)
        result = records["result"].astype(np.int16)
        win = np.where(result == 0, 0.5, np.where((result == 1) == (turn == 0), 1.0, 0.0)).astype(np.float32)
        ok &= result <= 2
        ply = np.zeros(n, np.int16)
    else:
        origin = (move >> 7) & 0x7F
        drop = ((move >> 14) & 1).astype(bool)
        piece = np.clip(origin - 1, 0, 6)
        promote = ((move >> 15) & 1).astype(bool)
        result = records["result"].astype(np.int16)
        win = np.select([result == 1, result == -1], [1.0, 0.0], 0.5).astype(np.float32)
        ok &= np.abs(result) <= 1
        ply = np.clip(records["ply"].astype(np.int32), 0, np.iinfo(np.int16).max).astype(np.int16)
    ok &= drop | (origin < NUM_SQUARES)
    move_from = np.where(drop, -1 - _DROP_INDEX[piece], _FORMAT_TO_SFEN[np.minimum(origin, NUM_SQUARES - 1)])
    return Decoded(board, hands, turn, move_from.astype(np.int16), to.astype(np.int16), promote,
                   records["eval"].astype(np.int16), win, ply, ok)
