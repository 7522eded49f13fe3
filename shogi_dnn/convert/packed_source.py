"""convert of position files (hcpe, PackedSfenValue: dataset/packed.py) into the games convert keeps.

Such files hold positions, not games. Rows that continue each other (a row's position is the previous row's
after its move, the other side to move, the same result) are one game, as dlshogi's csa_to_hcpe and a
game-ordered gensfen write them; every other row is a game of one position. The game is what the split,
--dedup and the leakage checks see: a shuffled file is split by position (inspect and the report say how
many games it made). A row that does not decode, or whose position is not one piece set with both kings,
is an error line (`file:record N: reason`), never training data; the rest of the file is converted.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from shogi_dnn.convert.filters import SKIP_ERROR, ConvertSettings, assign_split
from shogi_dnn.dataset import features, packed
from shogi_dnn.dataset.features import EncodedGame
from shogi_dnn.kifu.evals import MATE_EVAL
from shogi_dnn.kifu.record import Ending
from shogi_dnn.rules import (
    HAND_PIECE_TYPES,
    NUM_PIECE_TYPES,
    NUM_SQUARES,
    PROMOTED,
    UNPROMOTED,
    format_sfen,
    square_name,
)

CHUNK_ROWS = 1 << 16
_ROTATE = np.arange(NUM_SQUARES - 1, -1, -1)
_SWAP = np.array([0] + [t + NUM_PIECE_TYPES for t in range(1, NUM_PIECE_TYPES + 1)]
                 + list(range(1, NUM_PIECE_TYPES + 1)), np.uint8)
_BASE_TYPE = np.array([0] + [UNPROMOTED.get(t, t) for t in range(1, NUM_PIECE_TYPES + 1)] * 2, np.int16)
_HAND_OF_TYPE = np.array([HAND_PIECE_TYPES.index(t) if t in HAND_PIECE_TYPES else -1
                          for t in range(NUM_PIECE_TYPES + 1)], np.int16)
# A piece code's promoted code (itself where it cannot promote).
_PROMOTE = np.array([0] + [colour * NUM_PIECE_TYPES + PROMOTED.get(t, t) for colour in (0, 1)
                           for t in range(1, NUM_PIECE_TYPES + 1)], np.uint8)


def kind_of(name: str) -> str | None:
    """HCPE or PSV by the file name's suffix, else None (a record file)."""
    lowered = name.lower()
    return next((kind for suffix, kind in packed.SUFFIXES.items() if lowered.endswith(suffix)), None)


def _after_move(d: packed.Decoded) -> tuple[np.ndarray, np.ndarray]:
    """Each row's board and hands after its move (absolute), where the move can be played on them."""
    n = d.board.shape[0]
    rows = np.arange(n)
    board, hands = d.board.copy(), d.hands.astype(np.int16).copy()
    mover = d.turn.astype(np.int64)
    drop = d.move_from < 0
    origin = np.where(drop, 0, d.move_from)
    piece = np.where(drop, (mover * NUM_PIECE_TYPES + np.array(HAND_PIECE_TYPES, np.int64)[
        np.clip(-1 - d.move_from, 0, 6)]).astype(np.uint8), board[rows, origin])
    piece = np.where(d.promote, _PROMOTE[piece], piece)
    captured = board[rows, d.move_to]
    hand_index = _HAND_OF_TYPE[_BASE_TYPE[captured]]
    took = (captured > 0) & (hand_index >= 0)
    np.add.at(hands, (rows[took], mover[took], hand_index[took]), 1)
    dropped = drop & (d.move_from >= -7)
    np.add.at(hands, (rows[dropped], mover[dropped], (-1 - d.move_from[dropped]).astype(np.int64)), -1)
    board[rows[~drop], origin[~drop]] = 0
    board[rows, d.move_to] = piece
    return board, np.clip(hands, 0, 255).astype(np.uint8)


def continues(d: packed.Decoded, after: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """[N] bool: row i + 1 is row i's position after row i's move (`after`: _after_move), the same game."""
    if d.board.shape[0] < 2:
        return np.zeros(d.board.shape[0], bool)
    board, hands = after
    same = (board[:-1] == d.board[1:]).all(axis=1) & (hands[:-1] == d.hands[1:]).all(axis=(1, 2))
    same &= d.turn[:-1] != d.turn[1:]
    same &= (d.win[:-1] == 1 - d.win[1:])           # one result, seen from the other side
    return np.concatenate([same, [False]])


def encode_rows(d: packed.Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """features' side-to-move view of decoded rows: board [N, 81], hands [N, 14], move [N] uint16."""
    white = d.turn == 1
    board = np.where(white[:, None], _SWAP[d.board[:, _ROTATE]], d.board)
    own = np.where(white[:, None], d.hands[:, 1], d.hands[:, 0])
    other = np.where(white[:, None], d.hands[:, 0], d.hands[:, 1])
    hands = np.concatenate([own, other], axis=1).astype(np.uint8)
    to = np.where(white, NUM_SQUARES - 1 - d.move_to, d.move_to).astype(np.int64)
    origin = np.where(d.move_from < 0, NUM_SQUARES + (-1 - d.move_from),
                      np.where(white, NUM_SQUARES - 1 - d.move_from, d.move_from)).astype(np.int64)
    move = ((origin * NUM_SQUARES + to) * 2 + d.promote).astype(np.uint16)
    return board.astype(np.uint8), hands, move


def _row_problems(d: packed.Decoded) -> np.ndarray:
    """[N] bool: rows that did not decode, or are not one piece set with both kings."""
    bad = ~d.ok
    bad |= ((d.board == 8).sum(axis=1) != 1) | ((d.board == 8 + NUM_PIECE_TYPES).sum(axis=1) != 1)
    base = _BASE_TYPE[d.board]
    for piece_type, limit in features.PIECE_SET:
        count = (base == piece_type).sum(axis=1)
        if piece_type in HAND_PIECE_TYPES:
            count = count + d.hands[:, :, HAND_PIECE_TYPES.index(piece_type)].sum(axis=1)
        bad |= count > limit
    return bad


PackedGame = tuple[str, tuple, EncodedGame, bytes]      # split, games-table row, positions, game key


_SQUARE_NAMES = [square_name(i) for i in range(NUM_SQUARES)]     # SFEN order -> USI


def usi_moves(d: packed.Decoded, rows: np.ndarray) -> list[str]:
    """The USI moves of decoded rows (absolute squares: no rotation)."""
    moves = []
    for origin, to, promote in zip(d.move_from[rows].tolist(), d.move_to[rows].tolist(),
                                   d.promote[rows].tolist()):
        if origin < 0:
            moves.append(f"{'PLNSGBR'[-1 - origin]}*{_SQUARE_NAMES[to]}")
        else:
            moves.append(f"{_SQUARE_NAMES[origin]}{_SQUARE_NAMES[to]}{'+' if promote else ''}")
    return moves


def _final_position(d: packed.Decoded, after: tuple[np.ndarray, np.ndarray],
                    row: int) -> packed.Decoded | None:
    """The position after row `row`'s move (the game's end, which position files leave out), None where
    it is not a position (a corrupt move)."""
    board, hands = after
    one = slice(row, row + 1)
    final = packed.Decoded(board[one], hands[one], 1 - d.turn[one], d.move_from[one], d.move_to[one],
                           d.promote[one], np.full(1, features.EVAL_NONE, np.int16), 1 - d.win[one],
                           d.ply[one] + 1, d.ok[one])
    return None if _row_problems(final)[0] else final


def convert_rows(data: bytes, name: str, kind: str, settings: ConvertSettings,
                 result: Any) -> list[PackedGame]:
    """The games of `data` (a whole file); its errors and counts go to `result` (worker.FileResult).

    A game of two rows or more is as convert makes it from the same game's record: its positions in order
    and the final one (the position after the last row's move, no move, which the file leaves out), its key
    filters.game_key's (start SFEN and USI moves: the same split and --dedup as the record); an hcpe game's
    plies count from 0. A lone row stays one position.
    """
    games: list[PackedGame] = []
    dtype = packed.DTYPES[kind]
    whole, tail = divmod(len(data), dtype.itemsize)
    if tail:
        result.errors.append(f"{name}:record {whole + 1}: truncated ({tail} of {dtype.itemsize} bytes): "
                             "the complete records before it are converted")
    records = np.frombuffer(data, dtype=dtype, count=whole)
    for start in range(0, whole, CHUNK_ROWS):
        d = packed.decode(records[start:start + CHUNK_ROWS], kind)
        board, hands, move = encode_rows(d)
        bad = _row_problems(d)
        after = _after_move(d)
        link = continues(d, after) & ~bad
        link[:-1] &= ~bad[1:]
        for row in np.flatnonzero(bad)[:20]:
            result.errors.append(f"{name}:record {start + row + 1}: not a position (bad code, piece set or "
                                 "kings): skipped")
        result.found += int(bad.sum())
        result.skipped[SKIP_ERROR] += int(bad.sum())
        ends = np.flatnonzero(~link)                      # each game's last row
        starts = np.concatenate([[0], ends[:-1] + 1])
        evals = np.where(np.abs(d.eval.astype(np.int32)) > MATE_EVAL, np.sign(d.eval) * MATE_EVAL,
                         d.eval).astype(np.int16)
        for first, last in zip(starts.tolist(), ends.tolist()):
            if bad[first]:
                continue
            result.found += 1
            rows = np.arange(first, last + 1)
            ply = np.arange(len(rows), dtype=np.int16) if kind == packed.HCPE else d.ply[rows]
            parts = [(board[rows], hands[rows], d.turn[rows], ply, move[rows], d.win[rows], evals[rows])]
            final = _final_position(d, after, last) if last > first else None    # a game, not a position
            if final is not None:
                f_board, f_hands, _ = encode_rows(final)
                none = np.full(1, features.MOVE_NONE, np.uint16)
                parts.append((f_board, f_hands, final.turn, ply[-1:] + 1, none, final.win, final.eval))
            positions = EncodedGame(*(np.concatenate(column) for column in zip(*parts)))
            first_turn = int(d.turn[first])
            sfen = format_sfen(d.board[first].tolist(), d.hands[first, 0].tolist(),
                               d.hands[first, 1].tolist(), first_turn, int(ply[0]) + 1)
            key = hashlib.sha1((sfen + "\n" + " ".join(usi_moves(d, rows))).encode("utf-8")).digest()
            split = assign_split(key, settings.val_fraction, settings.test_fraction)
            win = float(d.win[first])
            winner = "draw" if win == 0.5 else ("black" if (win == 1.0) == (first_turn == 0) else "white")
            row = (name, start + first + 1, "", "", float("nan"), float("nan"), winner,
                   Ending.NONE.value, len(rows), sfen, "")
            games.append((split, row, positions, key))
    return games
