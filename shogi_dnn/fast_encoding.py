"""Compiled kernels of features.py's per-position work: replaying a game's (already legal) moves into
side-to-move positions, and packing positions into the shards' slot form. Byte-identical to the numpy
reference in features.py (tests/test_fast_encoding.py pins both on real and random games); used when
numba is installed (extra `fast`), else features.py keeps its numpy path.

Why compiled: a game's positions depend on each other move by move, and the canonical slot order
sorts each position's pieces; in numpy that costs ~1.7 us a position for packing alone, more than a
whole position costs dlshogi-style converters. A loop compiled with numba does both in ~0.2 us.

Conventions are features.py's (package square index, piece codes 0 / 1..14 Black / 15..28 White,
hands in HAND_PIECE_TYPES order P L N S G B R, Black's then White's). Moves enter as *absolute* move
codes (Black's view whoever moves): ((origin * 81) + destination) * 2 + promote, origin 81 + i a drop
of HAND_PIECE_TYPES[i]; features.absolute_move_code makes them from USI.
"""

from __future__ import annotations

import numpy as np

try:                                     # optional: extra `fast`
    import numba
except ImportError:                      # pragma: no cover - the numpy path is used instead
    numba = None

AVAILABLE = numba is not None
NUM_SQUARES = 81
NUM_TYPES = 14
HAND_KINDS = 7
SLOTS = 40
SLOT_IN_HAND = 81
SLOT_OPPONENT = 0x80
SLOT_ABSENT = 0x7F
MOVE_NONE = 0xFFFF
# Per piece type 0..14: its promoted type (0 = cannot promote) and its unpromoted kind 0..8.
PROMOTES_TO = np.array([0, 9, 10, 11, 12, 0, 13, 14, 0, 0, 0, 0, 0, 0, 0], np.uint8)
UNPROMOTED = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 6, 7], np.uint8)
# Slots of each kind 1..8 (P L N S G B R K): first slot and how many (a set: 18 4 4 4 4 2 2 2).
KIND_FIRST_SLOT = np.array([0, 0, 18, 22, 26, 30, 34, 36, 38], np.int64)
KIND_SLOTS = np.array([0, 18, 4, 4, 4, 4, 2, 2, 2], np.int64)


def _jit(function):
    return numba.njit(cache=True, nogil=True)(function) if AVAILABLE else function


@_jit
def replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes):  # pragma: no cover
    """Play `moves` from the start position, writing every position from its side to move's view.

    Args:
        start_board: [81] uint8 codes (Black's view); start_hands: [14] uint8 (Black's, White's);
        first_turn: 0 Black or 1 White to move at the start; moves: [M] int64 absolute move codes.
        board: out [M + 1, 81] uint8; hands: out [M + 1, 14] uint8; move_codes: out [M + 1] uint16,
            the move played next from the mover's view (features.encode_move), MOVE_NONE last.
    Returns:
        -1, or the index of the first move that cannot be played (no piece of the mover on its
        origin, its own piece or a king on the destination, a drop from an empty hand or onto a piece,
        a promotion of a piece that cannot promote): the readers check legality, so this is a bug.
    """
    squares = start_board.copy()
    held = start_hands.copy()
    turn = first_turn
    count = moves.shape[0]
    for ply in range(count + 1):
        if turn == 0:
            for s in range(NUM_SQUARES):
                board[ply, s] = squares[s]
            for k in range(2 * HAND_KINDS):
                hands[ply, k] = held[k]
        else:
            for s in range(NUM_SQUARES):
                code = squares[NUM_SQUARES - 1 - s]
                board[ply, s] = code + NUM_TYPES if 0 < code <= NUM_TYPES else (code - NUM_TYPES if code else 0)
            for k in range(HAND_KINDS):
                hands[ply, k] = held[HAND_KINDS + k]
                hands[ply, HAND_KINDS + k] = held[k]
        if ply == count:
            move_codes[ply] = MOVE_NONE
            break
        code = moves[ply]
        promote = code & 1
        origin = (code >> 1) // NUM_SQUARES
        destination = (code >> 1) % NUM_SQUARES
        if turn == 0:
            move_codes[ply] = code
        else:
            view_origin = origin if origin >= NUM_SQUARES else NUM_SQUARES - 1 - origin
            move_codes[ply] = ((view_origin * NUM_SQUARES) + NUM_SQUARES - 1 - destination) * 2 + promote
        offset = NUM_TYPES * turn
        target = squares[destination]
        if origin >= NUM_SQUARES:                                   # a drop
            kind = origin - NUM_SQUARES
            if promote or target != 0 or held[HAND_KINDS * turn + kind] == 0:
                return ply
            held[HAND_KINDS * turn + kind] -= 1
            squares[destination] = kind + 1 + offset
        else:
            piece = squares[origin]
            if piece == 0 or (piece > NUM_TYPES) != (turn == 1):
                return ply
            if target != 0:
                if (target > NUM_TYPES) == (turn == 1):
                    return ply                                       # onto its own piece
                captured = UNPROMOTED[target - NUM_TYPES if target > NUM_TYPES else target]
                if captured == 8:
                    return ply                                       # a king is never captured
                held[HAND_KINDS * turn + captured - 1] += 1
            piece_type = piece - offset
            if promote:
                piece_type = PROMOTES_TO[piece_type]
                if piece_type == 0:
                    return ply
            squares[origin] = 0
            squares[destination] = piece_type + offset
        turn = 1 - turn
    return -1


@_jit
def pack_rows(board, hands, pieces, promoted):  # pragma: no cover
    """features.pack_positions, row by row: [N, 81] / [N, 14] uint8 into out [N, 40] / [N, 5] uint8.

    Returns:
        -1, or the first row holding more pieces of a kind than one set (the caller names it).
    """
    placed = np.zeros(9, np.int64)
    for row in range(board.shape[0]):
        placed[:] = 0
        for b in range(5):
            promoted[row, b] = 0
        for s in range(NUM_SQUARES):
            code = board[row, s]
            if code == 0:
                continue
            opponent = code > NUM_TYPES
            piece_type = code - NUM_TYPES if opponent else code
            kind = UNPROMOTED[piece_type]
            if placed[kind] == KIND_SLOTS[kind]:
                return row
            slot = KIND_FIRST_SLOT[kind] + placed[kind]
            placed[kind] += 1
            pieces[row, slot] = s | (SLOT_OPPONENT if opponent else 0)
            if piece_type > 8:
                promoted[row, slot >> 3] |= np.uint8(1 << (slot & 7))
        for kind in range(1, 9):
            slot = KIND_FIRST_SLOT[kind] + placed[kind]
            end = KIND_FIRST_SLOT[kind] + KIND_SLOTS[kind]
            if kind <= HAND_KINDS:
                own = hands[row, kind - 1]
                other = hands[row, HAND_KINDS + kind - 1]
                if placed[kind] + own + other > KIND_SLOTS[kind]:
                    return row
                for _ in range(own):
                    pieces[row, slot] = SLOT_IN_HAND
                    slot += 1
                for _ in range(other):
                    pieces[row, slot] = SLOT_IN_HAND | SLOT_OPPONENT
                    slot += 1
            while slot < end:
                pieces[row, slot] = SLOT_ABSENT
                slot += 1
    return -1
