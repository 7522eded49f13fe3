"""Move labels for a policy head: dlshogi's encoding, from the side to move's view (numpy only).

label = direction * 81 + destination, NUM_MOVE_LABELS = 27 * 81 = 2187, in features.py's rotated view.
A move code maps to a label without the position (`move_labels`), and back given the board
(`label_to_move`: a sliding move's origin is the first piece on the ray). Squares are features'
indices: row * 9 + col, row 0 the opponent's side. Direction d (origin -> destination):

  d      name         step (row, col)   note
  0      UP           (-n, 0)           toward row 0
  1      UP_LEFT      (-n, -n)          toward col 0 (file 9 from Black's seat)
  2      UP_RIGHT     (-n, +n)
  3      LEFT         (0, -n)
  4      RIGHT        (0, +n)
  5      DOWN         (+n, 0)
  6      DOWN_LEFT    (+n, -n)
  7      DOWN_RIGHT   (+n, +n)
  8      UP2_LEFT     (-2, -1)          a knight's move
  9      UP2_RIGHT    (-2, +1)          a knight's move
  10..19 the same ten, the move promotes (d - 10 is its direction)
  20..26 a drop of HAND_PIECE_TYPES[d - 20]: P L N S G B R (origin 81 + d - 20 in the move code)

  label  = d * 81 + destination            int16, 0..2186
  LABEL_NONE = -1                          no move: MOVE_NONE (a game's final position)

Two legal moves never share a label (only the first piece on a ray reaches the destination). The
orders are dlshogi's, with the destination renumbered rank-major. The left-right mirror swaps LEFT and
RIGHT in each pair and mirrors the destination (`mirror_labels`). Legal moves (`legal_label_mask`) come
from the rules backend on the decoded position, without the record's history.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shogi_dnn.dataset.features import (
    HAND_SIZE,
    MOVE_NONE,
    NUM_HAND_TYPES,
    NUM_PIECE_TYPES,
    absolute_move_code,
    decode_position,
)
from shogi_dnn.rules import BLACK, NUM_SQUARES, Position, position_factory

UP, UP_LEFT, UP_RIGHT, LEFT, RIGHT, DOWN, DOWN_LEFT, DOWN_RIGHT, UP2_LEFT, UP2_RIGHT = range(10)
DIRECTION_NAMES = ("UP", "UP_LEFT", "UP_RIGHT", "LEFT", "RIGHT", "DOWN", "DOWN_LEFT", "DOWN_RIGHT",
                   "UP2_LEFT", "UP2_RIGHT")
NUM_MOVE_DIRECTIONS = len(DIRECTION_NAMES)                   # 10 board-move directions
PROMOTION_OFFSET = NUM_MOVE_DIRECTIONS                       # d + 10: the same direction, promoting
DROP_OFFSET = 2 * NUM_MOVE_DIRECTIONS                        # 20: the first drop direction (a pawn)
NUM_DIRECTIONS = DROP_OFFSET + NUM_HAND_TYPES                # 27
NUM_MOVE_LABELS = NUM_DIRECTIONS * NUM_SQUARES               # 2187
LABEL_NONE = -1                                              # the label of MOVE_NONE
# One step of each board-move direction as (row, col); rows grow downward, cols to the right.
DIRECTION_STEPS = ((-1, 0), (-1, -1), (-1, 1), (0, -1), (0, 1), (1, 0), (1, -1), (1, 1), (-2, -1), (-2, 1))
_KNIGHT_DIRECTIONS = (UP2_LEFT, UP2_RIGHT)
_MIRROR_DIRECTION = (UP, UP_RIGHT, UP_LEFT, RIGHT, LEFT, DOWN, DOWN_RIGHT, DOWN_LEFT, UP2_RIGHT, UP2_LEFT)
_NOT_A_MOVE = -2                  # in _CODE_LABEL: a code no move of the side to move's view has


def _direction(row_step: int, col_step: int) -> int:
    """The direction of a board move by (rows, cols), or _NOT_A_MOVE when it is on no ray nor a knight's."""
    if (row_step, col_step) in ((-2, -1), (-2, 1)):
        return UP2_LEFT if col_step < 0 else UP2_RIGHT
    if (row_step, col_step) == (0, 0) or (row_step and col_step and abs(row_step) != abs(col_step)):
        return _NOT_A_MOVE
    return DIRECTION_STEPS.index((int(np.sign(row_step)), int(np.sign(col_step))))


def _code_label_table() -> np.ndarray:
    """[65536] int16 label of every move code; LABEL_NONE for MOVE_NONE, _NOT_A_MOVE for non-moves."""
    table = np.full(1 << 16, _NOT_A_MOVE, np.int16)
    for origin in range(NUM_SQUARES):
        for destination in range(NUM_SQUARES):
            (r0, c0), (r1, c1) = divmod(origin, 9), divmod(destination, 9)
            direction = _direction(r1 - r0, c1 - c0)
            if direction != _NOT_A_MOVE:
                code = (origin * NUM_SQUARES + destination) * 2
                table[code] = direction * NUM_SQUARES + destination
                table[code + 1] = (direction + PROMOTION_OFFSET) * NUM_SQUARES + destination
    for i in range(NUM_HAND_TYPES):
        for destination in range(NUM_SQUARES):
            code = ((NUM_SQUARES + i) * NUM_SQUARES + destination) * 2
            table[code] = (DROP_OFFSET + i) * NUM_SQUARES + destination
    table[MOVE_NONE] = LABEL_NONE
    table.flags.writeable = False
    return table


def _mirror_table() -> np.ndarray:
    """[2187] int16: the label of each label's left-right mirror."""
    label = np.arange(NUM_MOVE_LABELS)
    direction, destination = np.divmod(label, NUM_SQUARES)
    row, col = np.divmod(destination, 9)
    on_board = direction < DROP_OFFSET
    base = np.where(on_board, direction % NUM_MOVE_DIRECTIONS, 0)
    mirrored = np.where(on_board, np.asarray(_MIRROR_DIRECTION)[base] + direction - base, direction)
    table = (mirrored * NUM_SQUARES + row * 9 + 8 - col).astype(np.int16)
    table.flags.writeable = False
    return table


_CODE_LABEL = _code_label_table()
_MIRROR_LABEL = _mirror_table()


def move_labels(codes: np.ndarray) -> np.ndarray:
    """The policy labels of move codes.

    Args:
        codes: [...] integer move codes, side to move's view; MOVE_NONE for no move.
    Returns:
        [...] int16 labels 0..NUM_MOVE_LABELS - 1, LABEL_NONE (-1) where the code is MOVE_NONE.
    Raises:
        ValueError: a code that is no move (off every ray, a promoting drop, out of range).
    """
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise ValueError(f"move codes must be integers, not {codes.dtype}")
    wide = codes.astype(np.int64)
    outside = (wide < 0) | (wide > MOVE_NONE)
    if outside.any():
        raise ValueError(f"move code {int(wide[outside].flat[0])}: outside 0..{MOVE_NONE}")
    labels = _CODE_LABEL[wide]
    bad = labels == _NOT_A_MOVE
    if bad.any():
        code = int(wide[bad].flat[0])
        rest, promote = divmod(code, 2)
        origin, destination = divmod(rest, NUM_SQUARES)
        raise ValueError(f"move code {code} (origin {origin}, destination {destination}, promote {promote}): "
                         "no move of the side to move has it")
    return labels


def label_to_move(board: np.ndarray, label: int) -> int:
    """The uint16 move code (as an int) of `label` 0..2186 in board [81] uint8 (side to move's view).

    Legality is not checked (legal_label_mask tells).
    Raises:
        ValueError: a label out of range, or a board move whose ray holds no own piece.
    """
    label = int(label)
    if not 0 <= label < NUM_MOVE_LABELS:
        raise ValueError(f"label {label}: outside 0..{NUM_MOVE_LABELS - 1}")
    direction, destination = divmod(label, NUM_SQUARES)
    if direction >= DROP_OFFSET:
        return ((NUM_SQUARES + direction - DROP_OFFSET) * NUM_SQUARES + destination) * 2
    promote, base = divmod(direction, PROMOTION_OFFSET)
    row_step, col_step = DIRECTION_STEPS[base]
    row, col = divmod(destination, 9)
    while True:
        row, col = row - row_step, col - col_step
        if not (0 <= row < 9 and 0 <= col < 9):
            break
        piece = int(board[row * 9 + col])
        if piece or base in _KNIGHT_DIRECTIONS:
            if 1 <= piece <= NUM_PIECE_TYPES:
                return ((row * 9 + col) * NUM_SQUARES + destination) * 2 + promote
            break
    raise ValueError(f"label {label} ({_label_name(direction)} to square {destination}): "
                     "no own piece can come from that direction")


def _label_name(direction: int) -> str:
    if direction >= DROP_OFFSET:
        return f"drop of {'PLNSGBR'[direction - DROP_OFFSET]}"
    promote, base = divmod(direction, PROMOTION_OFFSET)
    return DIRECTION_NAMES[base] + ("+promote" if promote else "")


def mirror_labels(labels: np.ndarray) -> np.ndarray:
    """[...] int16 labels of the left-right mirrored moves (an involution; LABEL_NONE stays).

    Raises:
        ValueError: a label outside LABEL_NONE..NUM_MOVE_LABELS - 1.
    """
    labels = np.asarray(labels).astype(np.int64)
    if ((labels < LABEL_NONE) | (labels >= NUM_MOVE_LABELS)).any():
        raise ValueError(f"labels must lie in {LABEL_NONE}..{NUM_MOVE_LABELS - 1}")
    return np.where(labels == LABEL_NONE, LABEL_NONE, _MIRROR_LABEL[np.maximum(labels, 0)]).astype(np.int16)


def legal_move_codes(board: np.ndarray, hands: np.ndarray,
                     factory: Callable[[str], Position] | None = None) -> np.ndarray:
    """[M] uint16 legal move codes of board [81] / hands [14] uint8, in the backend's order.

    factory: sfen -> Position (default: rules.position_factory()).
    """
    position = (factory or position_factory())(decode_position(board, hands, BLACK, 0))
    usi = position.legal_usi()
    return np.fromiter(map(absolute_move_code, usi), np.uint16, len(usi))


def legal_label_mask(board: np.ndarray, hands: np.ndarray,
                     factory: Callable[[str], Position] | None = None) -> np.ndarray:
    """[NUM_MOVE_LABELS] bool, True at the label of every legal move of board [81] / hands [14] uint8."""
    mask = np.zeros(NUM_MOVE_LABELS, bool)
    mask[move_labels(legal_move_codes(board, hands, factory))] = True
    return mask


def legal_label_masks(board: np.ndarray, hands: np.ndarray,
                      factory: Callable[[str], Position] | None = None) -> np.ndarray:
    """[N, NUM_MOVE_LABELS] bool legal_label_mask of board [N, 81] / hands [N, 14] uint8."""
    board = np.asarray(board, np.uint8).reshape(-1, NUM_SQUARES)
    hands = np.asarray(hands, np.uint8).reshape(-1, HAND_SIZE)
    factory = factory or position_factory()
    masks = np.zeros((board.shape[0], NUM_MOVE_LABELS), bool)
    for i in range(board.shape[0]):
        masks[i, move_labels(legal_move_codes(board[i], hands[i], factory))] = True
    return masks


__all__ = [
    "DIRECTION_NAMES",
    "DIRECTION_STEPS",
    "DOWN",
    "DOWN_LEFT",
    "DOWN_RIGHT",
    "DROP_OFFSET",
    "LABEL_NONE",
    "LEFT",
    "NUM_DIRECTIONS",
    "NUM_MOVE_DIRECTIONS",
    "NUM_MOVE_LABELS",
    "PROMOTION_OFFSET",
    "RIGHT",
    "UP",
    "UP2_LEFT",
    "UP2_RIGHT",
    "UP_LEFT",
    "UP_RIGHT",
    "label_to_move",
    "legal_label_mask",
    "legal_label_masks",
    "legal_move_codes",
    "mirror_labels",
    "move_labels",
]
