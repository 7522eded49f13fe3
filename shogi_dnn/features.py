"""Compact position encoding, from the side to move's view, and its expansion into input planes.

A position is stored as (board, hands, turn, ply); the move played next as one uint16. When White is
to move, the board is rotated 180 degrees and the colours swapped, so the network always sees
"own" pieces moving up the board. `decode_position` inverts this exactly (the test pins it).

Piece codes on `board` (uint8, 81 squares in SFEN order of the *rotated* view):
  0                 empty
  1..14             own piece of type t (rules: 1 P, 2 L, 3 N, 4 S, 5 G, 6 B, 7 R, 8 K, 9..14 promoted)
  15..28            opponent piece of type t, code 14 + t
`hands` (uint8 [14]): own counts in HAND_PIECE_TYPES order (P L N S G B R), then the opponent's.

Move code (uint16), from the side to move's view: ((origin * 81) + destination) * 2 + promote,
origin 0..80 a square or 81 + i a drop of HAND_PIECE_TYPES[i]; MOVE_NONE marks a final position.

Input planes (expand_planes), [N, 9, 9, NUM_PLANES] float32:
  planes 0..13      own pieces, one plane per piece type 1..14 (one-hot)
  planes 14..27     opponent pieces, likewise
  planes 28..34     own hand counts / HAND_MAX, broadcast over the board
  planes 35..41     opponent hand counts / HAND_MAX
This module is numpy-only; the TensorFlow expansion (model.py) must give the same planes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shogi_dnn.kifu.record import GameRecord, Winner
from shogi_dnn.rules import (BLACK, HAND_PIECE_TYPES, NUM_PIECE_TYPES, NUM_SQUARES, WHITE, IllegalMoveError,
                             Position, new_position)

SFEN_PIECE = {1: "P", 2: "L", 3: "N", 4: "S", 5: "G", 6: "B", 7: "R", 8: "K",
              9: "+P", 10: "+L", 11: "+N", 12: "+S", 13: "+B", 14: "+R"}
NUM_PIECE_CODES = 1 + 2 * NUM_PIECE_TYPES          # 29: empty, own 1..14, opponent 15..28
NUM_HAND_TYPES = len(HAND_PIECE_TYPES)             # 7
HAND_SIZE = 2 * NUM_HAND_TYPES                     # 14: own then opponent
# The most pieces of a kind one side can hold: 18 pawns, 4 lances/knights/silvers/golds, 2 bishops/rooks.
HAND_MAX = (18, 4, 4, 4, 4, 2, 2)
PLANE_OWN_PIECES = 0
PLANE_OPP_PIECES = PLANE_OWN_PIECES + NUM_PIECE_TYPES
PLANE_OWN_HAND = PLANE_OPP_PIECES + NUM_PIECE_TYPES
PLANE_OPP_HAND = PLANE_OWN_HAND + NUM_HAND_TYPES
NUM_PLANES = PLANE_OPP_HAND + NUM_HAND_TYPES       # 42
FEATURE_SHAPE = (9, 9, NUM_PLANES)
NUM_MOVE_ORIGINS = NUM_SQUARES + NUM_HAND_TYPES    # squares, then one drop origin per hand kind
MOVE_NONE = np.iinfo(np.uint16).max                # no next move (the game's final position)
# Value labels from the side to move: win, loss, draw.
LABEL_WIN, LABEL_LOSS, LABEL_DRAW = 1.0, 0.0, 0.5

# Square index in the rotated view: square i from Black's side is 80 - i from White's side.
_ROTATE = np.arange(NUM_SQUARES - 1, -1, -1)
# Swap own/opponent piece codes: 0 stays 0, 1..14 <-> 15..28.
_SWAP_COLOURS = np.array([0] + [t + NUM_PIECE_TYPES for t in range(1, 15)] + list(range(1, 15)), np.uint8)


@dataclasses.dataclass(frozen=True)
class EncodedGame:
    """Every position of one game (before each move, and the final one), side to move's view.

    Attributes:
        board: [P, 81] uint8 piece codes.
        hands: [P, 14] uint8 hand counts, own then opponent.
        turn:  [P] uint8 colour to move (0 black, 1 white): needed to decode the real position.
        ply:   [P] int16 moves played before the position (0 = start position).
        move:  [P] uint16 the move played next (MOVE_NONE for the final position).
        win:   [P] float32 1 win, 0 loss, 0.5 draw for the side to move.
    """

    board: np.ndarray
    hands: np.ndarray
    turn: np.ndarray
    ply: np.ndarray
    move: np.ndarray
    win: np.ndarray

    def __len__(self) -> int:
        return int(self.board.shape[0])


def encode_position(position: Position) -> tuple[np.ndarray, np.ndarray]:
    """Board and hands of a position from its side to move's view.

    Returns:
        board [81] uint8 and hands [14] uint8 (see the module docstring).
    """
    fast = getattr(position, "piece_array", None)     # cshogi backend: already a uint8 array
    codes = fast() if fast is not None else np.asarray(position.piece_codes(), dtype=np.uint8)
    black_hand, white_hand = position.hand_counts()
    if position.turn == WHITE:
        codes = _SWAP_COLOURS[codes[_ROTATE]]
        hands = np.asarray(white_hand + black_hand, dtype=np.uint8)
    else:
        hands = np.asarray(black_hand + white_hand, dtype=np.uint8)
    return codes, hands


def decode_position(board: np.ndarray, hands: np.ndarray, turn: int, ply: int) -> str:
    """The real (unrotated) position as SFEN, e.g. 'lnsgkgsnl/1r5b1/... b - 1'."""
    codes = np.asarray(board, dtype=np.uint8)
    own, opp = tuple(int(c) for c in hands[:NUM_HAND_TYPES]), tuple(int(c) for c in hands[NUM_HAND_TYPES:])
    if turn == WHITE:
        codes = _SWAP_COLOURS[codes[_ROTATE]]
        black_hand, white_hand = opp, own
    else:
        black_hand, white_hand = own, opp
    rows = []
    for rank in range(9):
        row, empty = "", 0
        for code in codes[rank * 9:(rank + 1) * 9]:
            if code == 0:
                empty += 1
                continue
            row += str(empty) if empty else ""
            empty = 0
            colour, piece_type = divmod(int(code) - 1, NUM_PIECE_TYPES)
            symbol = SFEN_PIECE[piece_type + 1]
            row += symbol if colour == BLACK else symbol.lower()
        rows.append(row + (str(empty) if empty else ""))
    return f"{'/'.join(rows)} {'w' if turn == WHITE else 'b'} {_sfen_hands(black_hand, white_hand)} {ply + 1}"


def _sfen_hands(black: tuple[int, ...], white: tuple[int, ...]) -> str:
    order = (7, 6, 5, 4, 3, 2, 1)   # SFEN lists hands R B G S N L P
    parts = []
    for counts, upper in ((black, True), (white, False)):
        for piece_type in order:
            n = counts[HAND_PIECE_TYPES.index(piece_type)]
            if n:
                symbol = SFEN_PIECE[piece_type] if upper else SFEN_PIECE[piece_type].lower()
                parts.append((str(n) if n > 1 else "") + symbol)
    return "".join(parts) or "-"


def encode_move(usi: str, turn: int) -> int:
    """uint16 code of a USI move from the mover's view (see module docstring)."""
    promote = int(usi.endswith("+"))
    destination = _usi_square(usi[2:4], turn)
    if usi[1] == "*":
        origin = NUM_SQUARES + HAND_PIECE_TYPES.index("PLNSGBR".index(usi[0]) + 1)
    else:
        origin = _usi_square(usi[0:2], turn)
    return (origin * NUM_SQUARES + destination) * 2 + promote


def decode_move(code: int, turn: int) -> str:
    """USI move of a move code (inverse of encode_move)."""
    rest, promote = divmod(int(code), 2)
    origin, destination = divmod(rest, NUM_SQUARES)
    to = _square_usi(destination, turn)
    if origin >= NUM_SQUARES:
        return f"{'PLNSGBR'[origin - NUM_SQUARES]}*{to}"
    return f"{_square_usi(origin, turn)}{to}{'+' if promote else ''}"


def _usi_square(name: str, turn: int) -> int:
    file, rank = int(name[0]), ord(name[1]) - ord("a") + 1
    index = (rank - 1) * 9 + (9 - file)
    return NUM_SQUARES - 1 - index if turn == WHITE else index


def _square_usi(index: int, turn: int) -> str:
    if turn == WHITE:
        index = NUM_SQUARES - 1 - index
    rank, col = divmod(index, 9)
    return f"{9 - col}{chr(ord('a') + rank)}"


def game_labels(winner: Winner, first_turn: int, count: int) -> np.ndarray:
    """[count] float32 labels for positions alternating sides, starting with `first_turn` to move."""
    turns = (first_turn + np.arange(count)) % 2
    if winner is Winner.DRAW:
        return np.full(count, LABEL_DRAW, np.float32)
    winning_colour = BLACK if winner is Winner.BLACK else WHITE
    return np.where(turns == winning_colour, LABEL_WIN, LABEL_LOSS).astype(np.float32)


def encode_game(record: GameRecord, position_factory=new_position) -> EncodedGame:
    """Encode every position of a game with a result (before each move, plus the final one).

    Raises:
        ValueError: the record has no result, or a move is illegal (records are checked by the
            readers, so this means a bug or a corrupted record).
    """
    if not record.has_result:
        raise ValueError(f"{record.source}: game has no result; it is not training data")
    position = position_factory(record.start_sfen)
    count = len(record.moves) + 1
    board = np.empty((count, NUM_SQUARES), np.uint8)
    hands = np.empty((count, HAND_SIZE), np.uint8)
    turn = np.empty(count, np.uint8)
    move = np.full(count, MOVE_NONE, np.uint16)
    start_ply = int(record.start_sfen.split()[3]) - 1 if len(record.start_sfen.split()) > 3 else 0
    for i in range(count):
        board[i], hands[i] = encode_position(position)
        turn[i] = position.turn
        if i < len(record.moves):
            move[i] = encode_move(record.moves[i], position.turn)
            try:
                position.push_usi(record.moves[i])
            except IllegalMoveError as exc:
                raise ValueError(f"{record.source}: ply {i + 1}: {exc}") from exc
    ply = (start_ply + np.arange(count)).astype(np.int16)
    return EncodedGame(board, hands, turn, ply, move, game_labels(record.winner, int(turn[0]), count))


def expand_planes(board: np.ndarray, hands: np.ndarray) -> np.ndarray:
    """Expand compact positions into input planes (numpy reference of the on-device expansion).

    Args:
        board: [N, 81] uint8 piece codes; hands: [N, 14] uint8 counts.
    Returns:
        [N, 9, 9, NUM_PLANES] float32.
    """
    n = board.shape[0]
    onehot = np.eye(NUM_PIECE_CODES, dtype=np.float32)[board.astype(np.int64)][..., 1:]   # [N, 81, 28]
    scale = np.asarray(HAND_MAX * 2, np.float32)
    hand_planes = np.broadcast_to((hands.astype(np.float32) / scale)[:, None, :], (n, NUM_SQUARES, HAND_SIZE))
    return np.concatenate([onehot, hand_planes], axis=-1).reshape(n, 9, 9, NUM_PLANES)


def mirror_board(board: np.ndarray) -> np.ndarray:
    """Left-right mirror of [N, 81] boards (file f <-> 10 - f): a symmetric augmentation for value."""
    return board.reshape(-1, 9, 9)[:, :, ::-1].reshape(board.shape)
