"""Compact position encoding, from the side to move's view, and its expansion into input planes.

A position is (board, hands, turn, ply); the next move one uint16. When White is to move the board is
rotated 180 degrees and the colours swapped; `decode_position` inverts this exactly.

Piece codes on `board` (uint8, 81 squares in SFEN order of the *rotated* view):
  0                 empty
  1..14             own piece of type t (rules: 1 P, 2 L, 3 N, 4 S, 5 G, 6 B, 7 R, 8 K, 9..14 promoted)
  15..28            opponent piece of type t, code 14 + t
`hands` (uint8 [14]): own counts in HAND_PIECE_TYPES order (P L N S G B R), then the opponent's.

Move code (uint16), from the side to move's view: ((origin * 81) + destination) * 2 + promote,
origin 0..80 a square or 81 + i a drop of HAND_PIECE_TYPES[i]; MOVE_NONE marks a final position.

Input planes (expand_planes), [N, 9, 9, NUM_PLANES] float32; model.py must give the same:
  planes 0..13      own pieces, one plane per piece type 1..14 (one-hot)
  planes 14..27     opponent pieces, likewise
  planes 28..34     own hand counts / HAND_MAX, broadcast over the board
  planes 35..41     opponent hand counts / HAND_MAX

Packed form (what shards store): one slot per piece of PIECE_SET (18 pawns 0..17, 4 lances, 4 knights,
4 silvers, 4 golds, 2 bishops, 2 rooks, 2 kings 38..39), filled per kind in order: board by square, own
hand, opponent's hand, absent.
  pieces    [N, 40] uint8   bit 7 (SLOT_OPPONENT): the opponent's piece; bits 0..6: square 0..80
                            (rotated view, as `board`), SLOT_IN_HAND (81) or SLOT_ABSENT (127)
  promoted  [N, 5]  uint8   the 40 slot flags "promoted", np.packbits(bitorder="little")

Engine evaluations ([P] int16): centipawns from the side to move's view, clipped to ±MATE_EVAL (32000);
EVAL_NONE (-32768) where the record gives none.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from shogi_dnn.dataset import fast_encoding
from shogi_dnn.kifu.evals import MATE_EVAL
from shogi_dnn.kifu.record import GameRecord, Winner
from shogi_dnn.rules import (
    BASE_PIECE_TYPES,
    BLACK,
    HAND_PIECE_TYPES,
    NUM_PIECE_TYPES,
    NUM_SQUARES,
    PROMOTED,
    SET_COUNT,
    SFEN_PIECE,
    SFEN_TYPE,
    UNPROMOTED,
    WHITE,
    IllegalMoveError,
    Position,
    ShogiPosition,
    format_sfen,
    new_position,
    parse_square,
    square_name,
)

NUM_PIECE_CODES = 1 + 2 * NUM_PIECE_TYPES          # 29: empty, own 1..14, opponent 15..28
NUM_HAND_TYPES = len(HAND_PIECE_TYPES)             # 7
HAND_SIZE = 2 * NUM_HAND_TYPES                     # 14: own then opponent
# The most pieces of a kind one side can hold: 18 pawns, 4 lances/knights/silvers/golds, 2 bishops/rooks.
HAND_MAX = tuple(SET_COUNT[t] for t in HAND_PIECE_TYPES)   # (18, 4, 4, 4, 4, 2, 2)
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
# Engine evaluation of a position (side to move's view, centipawns): "none" below the clip ±MATE_EVAL.
EVAL_NONE = int(np.iinfo(np.int16).min)            # -32768

# Packed form: (piece type, pieces in one set); a slot per piece, in this order.
PIECE_SET = tuple(SET_COUNT.items())               # ((PAWN, 18), (LANCE, 4), ..., (ROOK, 2), (KING, 2))
NUM_SLOTS = sum(count for _, count in PIECE_SET)   # 40
PROMOTED_BYTES = (NUM_SLOTS + 7) // 8              # 5
SLOT_OPPONENT = 0x80
SLOT_LOCATION = 0x7F
SLOT_IN_HAND = NUM_SQUARES                         # 81
SLOT_ABSENT = 0x7F                                 # 127
SLOT_TYPE = np.repeat(np.array([t for t, _ in PIECE_SET], np.uint8), [n for _, n in PIECE_SET])   # [40]
# Promotion of each piece type (0 = cannot promote) and, per piece code, its unpromoted type and flag.
_PIECE_TYPES = range(NUM_PIECE_TYPES + 1)                       # 0 (none) and the types 1..14
_PROMOTES_TO = np.array([PROMOTED.get(t, 0) for t in _PIECE_TYPES], np.uint8)              # [15]
_UNPROMOTED = np.array([UNPROMOTED.get(t, t) for t in _PIECE_TYPES], np.uint8)             # [15]
_CODE_TYPE = np.array([0] + list(_PIECE_TYPES[1:]) * 2, np.uint8)                          # [29]
_CODE_BASE = _UNPROMOTED[_CODE_TYPE]
_CODE_PROMOTED = _CODE_TYPE > max(BASE_PIECE_TYPES)                                        # types 9..14
_SLOT_PROMOTION_STEP = np.where(_PROMOTES_TO[SLOT_TYPE] > 0, _PROMOTES_TO[SLOT_TYPE] - SLOT_TYPE,
                                0).astype(np.uint8)
_NUM_KINDS = 1 + len(BASE_PIECE_TYPES)           # 9: 0 (empty) and the unpromoted types 1..8
_SET_COUNT = np.array([0] + [n for _, n in PIECE_SET], np.int16)               # [9] pieces in a set
_TYPE_FIRST_SLOT = np.concatenate([[0, 0], np.cumsum(_SET_COUNT[1:-1])]).astype(np.int64)   # [9]
_SLOT_RANK = np.arange(NUM_SLOTS) - _TYPE_FIRST_SLOT[SLOT_TYPE]                   # [40] index within its kind
# pack_positions' sort keys (type << 12 | square << 5 | code) and lookups indexed by their fields.
_SQUARE_KEY = (np.arange(NUM_SQUARES, dtype=np.uint16) << 5)[None, :]
_SQUARE_RANK = np.arange(NUM_SQUARES, dtype=np.int16)[None, :]
_CODE_OPPONENT = np.where(np.arange(32) > NUM_PIECE_TYPES, SLOT_OPPONENT, 0).astype(np.uint8)
_KEY_PROMOTED = np.concatenate([_CODE_PROMOTED, np.zeros(32 - len(_CODE_PROMOTED), bool)])
_KIND_FIRST_SLOT = np.concatenate([_TYPE_FIRST_SLOT, np.zeros(16 - len(_TYPE_FIRST_SLOT))]).astype(np.int16)
# [40, 7]: 1 where slot s holds a piece of hand kind i (kings have none).
_SLOT_HAND_KIND = (SLOT_TYPE[:, None] == np.asarray(HAND_PIECE_TYPES)[None, :]).astype(np.float32)

# Square index in the rotated view: square i from Black's side is 80 - i from White's side.
_ROTATE = np.arange(NUM_SQUARES - 1, -1, -1)
# Swap own/opponent piece codes: 0 stays 0, 1..14 <-> 15..28.
_SWAP_COLOURS = np.array([0] + [t + NUM_PIECE_TYPES for t in _PIECE_TYPES[1:]] + list(_PIECE_TYPES[1:]),
                         np.uint8)


@dataclasses.dataclass(frozen=True)
class EncodedGame:
    """Every position of one game (before each move, and the final one), side to move's view.

    Attributes:
        board: [P, 81] uint8 piece codes.
        hands: [P, 14] uint8 hand counts, own then opponent.
        turn:  [P] uint8 colour to move (0 black, 1 white).
        ply:   [P] int16 moves played before the position.
        move:  [P] uint16 the move played next (MOVE_NONE for the final position).
        win:   [P] float32 1 win, 0 loss, 0.5 draw for the side to move.
        eval:  [P] int16 centipawns, side to move's view, clipped to ±MATE_EVAL; EVAL_NONE where none.
        pieces, promoted: [P, 40] and [P, 5] uint8 packed rows when the compiled encoder made them, else None.
    """

    board: np.ndarray
    hands: np.ndarray
    turn: np.ndarray
    ply: np.ndarray
    move: np.ndarray
    win: np.ndarray
    eval: np.ndarray
    pieces: np.ndarray | None = None
    promoted: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.board.shape[0])


def encode_position(position: Position) -> tuple[np.ndarray, np.ndarray]:
    """Board [81] uint8 and hands [14] uint8 of a position from its side to move's view."""
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
    return format_sfen(codes.tolist(), black_hand, white_hand, turn, ply + 1)


def encode_move(usi: str, turn: int) -> int:
    """uint16 code of a USI move from the mover's view (see module docstring)."""
    promote = int(usi.endswith("+"))
    destination = _usi_square(usi[2:4], turn)
    if usi[1] == "*":
        origin = NUM_SQUARES + HAND_PIECE_TYPES.index(SFEN_TYPE[usi[0]])
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
    """The mover's-view square index of a USI square name."""
    index = parse_square(name)
    return NUM_SQUARES - 1 - index if turn == WHITE else index


def _square_usi(index: int, turn: int) -> str:
    """The USI square name of a mover's-view square index."""
    return square_name(NUM_SQUARES - 1 - index if turn == WHITE else index)


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
        ValueError: no result, a start position with more than one set, or a move that cannot be played.
    """
    if not record.has_result:
        raise ValueError(f"{record.source}: game has no result; it is not training data")
    if fast_encoding.AVAILABLE:
        return _encode_compiled(record)
    board, hands, turn, move = _replay_positions(record, position_factory)
    count = len(record.moves) + 1
    start_ply = _start_arrays(record.start_sfen)[3]
    ply = (start_ply + np.arange(count)).astype(np.int16)
    return EncodedGame(board, hands, turn, ply, move, game_labels(record.winner, int(turn[0]), count),
                       game_evals(record.evals, count))


def repeated_games(games: list[EncodedGame]) -> list[int]:
    """Indices of the games in which some position may occur four times (a superset; first_fourfold tells)."""
    long = [game for game in games if len(game) >= 13]         # four occurrences need 12 moves
    if not long:
        return []
    if fast_encoding.fourfold_rows is not None and all(g.pieces is not None and g.promoted is not None
                                                       for g in long):
        # compiled: each game's packed rows in one hashed pass, exactly the games with a fourfold one
        fourfold = fast_encoding.fourfold_rows
        return [i for i, game in enumerate(games) if len(game) >= 13
                and fourfold(np.ascontiguousarray(game.pieces), np.ascontiguousarray(game.promoted),
                             int(game.turn[0])) >= 0]
    index = np.fromiter((i for i, game in enumerate(games) if len(game) >= 13), np.int64, len(long))
    owner = np.repeat(index, [len(game) for game in long])
    if all(game.pieces is not None for game in long):
        keys = np.concatenate([game.pieces for game in long]).view(np.uint64).sum(axis=1)
    else:
        keys = np.concatenate([game.board for game in long]).astype(np.uint64) @ _BOARD_WEIGHTS
        keys += np.concatenate([game.hands for game in long]).astype(np.uint64) @ _HAND_WEIGHTS
    keys += np.concatenate([game.turn for game in long])
    keys += owner.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)     # wraps modulo 2**64
    ordered = np.sort(keys)
    repeated = ordered[3:][ordered[3:] == ordered[:-3]]      # keys held by four positions or more
    if not len(repeated):
        return []
    return sorted({int(i) for i in owner[np.isin(keys, repeated)]})


_BOARD_WEIGHTS = (np.uint64(1_000_003) ** np.arange(NUM_SQUARES, dtype=np.uint64)) | np.uint64(1)
_HAND_WEIGHTS = (np.uint64(7_919) ** np.arange(1, HAND_SIZE + 1, dtype=np.uint64)) | np.uint64(1)


def first_fourfold(game: EncodedGame) -> int:
    """Index of the first position of `game` that occurs for the fourth time (same side to move), or -1."""
    if len(game) < 13:
        return -1
    from shogi_dnn.kifu.repetition import fourfold_index
    rows = np.concatenate([game.board, game.hands, game.turn[:, None]], axis=1)
    return fourfold_index([row.tobytes() for row in rows])


def _replay_positions(record: GameRecord, position_factory) -> tuple[np.ndarray, ...]:
    """board, hands, turn, move arrays read from a rules backend's position after each move."""
    position = position_factory(record.start_sfen)
    count = len(record.moves) + 1
    board = np.empty((count, NUM_SQUARES), np.uint8)
    hands = np.empty((count, HAND_SIZE), np.uint8)
    turn = np.empty(count, np.uint8)
    move = np.full(count, MOVE_NONE, np.uint16)
    for i in range(count):
        board[i], hands[i] = encode_position(position)
        if i == 0:
            check_piece_set(board[0], hands[0])     # moves keep the set: checking the start suffices
        turn[i] = position.turn
        if i < len(record.moves):
            move[i] = encode_move(record.moves[i], position.turn)
            try:
                position.push_usi(record.moves[i])
            except IllegalMoveError as exc:
                raise ValueError(f"{record.source}: ply {i + 1}: {exc}") from exc
    return board, hands, turn, move


def _encode_compiled(record: GameRecord) -> EncodedGame:
    """encode_game with fast_encoding.replay_game."""
    start_board, start_hands, first_turn, start_ply = _start_arrays(record.start_sfen)
    count = len(record.moves) + 1
    moves = record.move_codes          # the CSA reader's compiled checker gives them (kifu.record)
    if moves is None or len(moves) != count - 1:
        try:
            moves = np.fromiter(map(_absolute_move_codes().__getitem__, record.moves), np.int64, count - 1)
        except KeyError as exc:
            raise ValueError(f"{record.source}: malformed move {exc.args[0]!r}") from None
    board = np.empty((count, NUM_SQUARES), np.uint8)
    hands = np.empty((count, HAND_SIZE), np.uint8)
    move = np.empty(count, np.uint16)
    pieces = np.empty((count, NUM_SLOTS), np.uint8)
    promoted = np.empty((count, PROMOTED_BYTES), np.uint8)
    replay_game = fast_encoding.replay_game
    assert replay_game is not None           # encode_game comes here only when fast_encoding.AVAILABLE
    failed = replay_game(start_board, start_hands, first_turn, moves, board, hands, move, pieces, promoted)
    if failed >= 0:
        raise ValueError(f"{record.source}: ply {failed + 1}: move {record.moves[failed]} cannot be played")
    if count > _SHARED_LENGTH or not 0 <= start_ply <= _SHARED_LENGTH:
        turn = ((first_turn + np.arange(count)) % 2).astype(np.uint8)
        ply = (start_ply + np.arange(count)).astype(np.int16)
        return EncodedGame(board, hands, turn, ply, move, game_labels(record.winner, first_turn, count),
                           game_evals(record.evals, count), pieces, promoted)
    if record.winner is Winner.DRAW:
        win = _SHARED_DRAWS[:count]
    else:
        winning_colour = BLACK if record.winner is Winner.BLACK else WHITE
        win = _SHARED_WINS[int(winning_colour != first_turn)][:count]
    evals = game_evals(record.evals, count) if record.evals else _SHARED_NO_EVALS[:count]
    return EncodedGame(board, hands, _SHARED_TURNS[first_turn][:count],
                       _SHARED_PLIES[start_ply:start_ply + count], move, win, evals, pieces, promoted)


def _shared(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


# Read-only columns that games share as slices (_encode_compiled); longer games compute their own.
_SHARED_LENGTH = 4096
_SHARED_TURNS = tuple(_shared(((np.arange(_SHARED_LENGTH) + first) % 2).astype(np.uint8)) for first in (0, 1))
_SHARED_WINS = tuple(
    _shared(np.where(np.arange(_SHARED_LENGTH) % 2 == loser, LABEL_LOSS, LABEL_WIN).astype(np.float32))
    for loser in (1, 0))       # [0]: the first mover wins, [1]: it loses
_SHARED_DRAWS = _shared(np.full(_SHARED_LENGTH, LABEL_DRAW, np.float32))
_SHARED_PLIES = _shared(np.arange(2 * _SHARED_LENGTH + 1, dtype=np.int16))
_SHARED_NO_EVALS = _shared(np.full(_SHARED_LENGTH, EVAL_NONE, np.int16))


@functools.lru_cache(maxsize=256)
def _start_arrays(sfen: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A start position: [81] uint8 codes, [14] uint8 hands (Black's view), colour to move, ply. Cached.

    Raises:
        ValueError: an invalid SFEN or more pieces of a kind than one set.
    """
    try:
        position = ShogiPosition(sfen)
    except IllegalMoveError as exc:
        raise ValueError(str(exc)) from exc
    codes = np.asarray(position.piece_codes(), np.uint8)
    black_hand, white_hand = position.hand_counts()
    hands = np.asarray(black_hand + white_hand, np.uint8)
    turn = position.turn
    viewed = _SWAP_COLOURS[codes[_ROTATE]] if turn == WHITE else codes
    check_piece_set(viewed, hands if turn == BLACK
                    else np.concatenate([hands[NUM_HAND_TYPES:], hands[:NUM_HAND_TYPES]]))
    fields = sfen.split()
    start_ply = int(fields[3]) - 1 if len(fields) > 3 else 0
    codes.flags.writeable = hands.flags.writeable = False
    return codes, hands, turn, start_ply


def absolute_move_code(usi: str) -> int:
    """A USI move's code from Black's view whoever plays it. Raises KeyError for a malformed move."""
    return _absolute_move_codes()[usi]


@functools.lru_cache(maxsize=1)
def _absolute_move_codes() -> dict[str, int]:
    """Every well-formed USI move (board moves with and without `+`, drops) -> its absolute code."""
    names = [_square_usi(index, BLACK) for index in range(NUM_SQUARES)]
    table = {}
    for origin, origin_name in enumerate(names):
        for destination, destination_name in enumerate(names):
            if origin != destination:
                code = (origin * NUM_SQUARES + destination) * 2
                table[origin_name + destination_name] = code
                table[origin_name + destination_name + "+"] = code + 1
    for i, letter in enumerate("PLNSGBR"):
        for destination, destination_name in enumerate(names):
            table[f"{letter}*{destination_name}"] = ((NUM_SQUARES + i) * NUM_SQUARES + destination) * 2
    return table


def game_evals(evals, count: int) -> np.ndarray:
    """[count] int16 evaluations, clipped to ±MATE_EVAL, EVAL_NONE where there is none.

    Raises:
        ValueError: evals is neither empty nor one entry per position.
    """
    out = np.full(count, EVAL_NONE, np.int16)
    if not evals:
        return out
    if len(evals) != count:
        raise ValueError(f"{len(evals)} evaluations for {count} positions")
    # A few numpy calls for the game, not one assignment per position (the readers give ints).
    values = np.array([_NO_EVAL if value is None else value for value in evals])
    absent = values == _NO_EVAL
    if values.dtype.kind != "i" or int(np.count_nonzero(absent)) != evals.count(None):
        for i, value in enumerate(evals):          # floats, ints beyond 64 bits: one by one
            if value is not None:
                out[i] = max(-MATE_EVAL, min(MATE_EVAL, int(value)))
        return out
    out = np.minimum(np.maximum(values, -MATE_EVAL), MATE_EVAL).astype(np.int16)
    out[absent] = EVAL_NONE
    return out


_NO_EVAL = -(1 << 62)          # game_evals' stand-in for None


def check_piece_set(board: np.ndarray, hands: np.ndarray) -> None:
    """Raise ValueError unless the position ([81] board, [14] hands) holds at most one set of pieces."""
    counts = np.bincount(_CODE_BASE[np.asarray(board, np.intp)], minlength=9)
    for i, hand_type in enumerate(HAND_PIECE_TYPES):
        counts[hand_type] += int(hands[i]) + int(hands[NUM_HAND_TYPES + i])
    for piece_type, limit in PIECE_SET:
        if counts[piece_type] > limit:
            name = SFEN_PIECE[piece_type]
            raise ValueError(f"{counts[piece_type]} pieces of kind {name} (a shogi set has {limit})")


def pack_positions(board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Packed form of positions: pieces [N, 40] uint8 and promoted [N, 5] uint8.

    Args:
        board: [N, 81] uint8 piece codes; hands: [N, 14] uint8 counts.
    Raises:
        ValueError: a position holds more pieces of a kind than one set has.
    """
    board = np.ascontiguousarray(board, np.uint8)
    hands = np.ascontiguousarray(hands, np.uint8)
    n = board.shape[0]
    if fast_encoding.AVAILABLE:
        assert fast_encoding.pack_rows is not None        # AVAILABLE: the extension has pack_rows
        pieces = np.empty((n, NUM_SLOTS), np.uint8)
        promoted = np.empty((n, PROMOTED_BYTES), np.uint8)
        row = fast_encoding.pack_rows(board, hands, pieces, promoted)
        if row >= 0:
            if int(board[row].max()) >= NUM_PIECE_CODES:
                raise ValueError(f"row {row}: a piece code outside 0..{NUM_PIECE_CODES - 1}")
            check_piece_set(board[row], hands[row])      # raises, naming the kind
            raise ValueError(f"row {row}: more pieces than one set")
        return pieces, promoted
    invalid = (board >= NUM_PIECE_CODES).any(axis=1)
    if invalid.any():
        raise ValueError(f"row {int(np.argmax(invalid))}: a piece code outside 0..{NUM_PIECE_CODES - 1}")
    base = _CODE_BASE[board]                                                    # [N, 81] type 0..8
    on_board = np.bincount((np.arange(n)[:, None] * _NUM_KINDS + base).ravel(),
                           minlength=n * _NUM_KINDS).reshape(n, _NUM_KINDS).astype(np.int16)
    on_board[:, 0] = 0                                                          # [N, 9] per type
    own = np.zeros_like(on_board)
    other = np.zeros_like(on_board)
    own[:, HAND_PIECE_TYPES] = hands[:, :NUM_HAND_TYPES]
    other[:, HAND_PIECE_TYPES] = hands[:, NUM_HAND_TYPES:]
    too_many = on_board + own + other > _SET_COUNT
    if too_many.any():
        row = int(np.argmax(too_many.any(axis=1)))
        check_piece_set(board[row], hands[row])
    # Off-board slots of each kind, after its pieces on the board: own hand, opponent's hand, absent.
    j = _SLOT_RANK[None, :]
    held = (on_board + own)[:, SLOT_TYPE]
    pieces = np.zeros((n, NUM_SLOTS + 1), np.uint8)     # C order (written through ravel()) + a dummy slot
    pieces[:, :NUM_SLOTS] = np.where(j < held, SLOT_IN_HAND,
                                     np.where(j < held + other[:, SLOT_TYPE], SLOT_IN_HAND | SLOT_OPPONENT,
                                              SLOT_ABSENT))
    flags = np.zeros((n, NUM_SLOTS + 1), bool)
    # Board pieces sorted by (type, square) in each row: key = type << 12 | square << 5 | code, empty
    # squares last. The i-th piece of a row goes to its type's first slot + i - the row's board pieces
    # of smaller types; empty squares go to the dummy slot.
    key = np.where(base > 0, (base.astype(np.uint16) << 12) | _SQUARE_KEY | board, 0xFFFF).astype(np.uint16)
    key.sort(axis=1)
    kind = (key >> 12).astype(np.int16)                                         # 15 = empty
    smaller = (np.cumsum(on_board, axis=1) - on_board).astype(np.int16)         # [N, 9]
    smaller = np.ascontiguousarray(
        np.concatenate([smaller, np.zeros((n, 16 - smaller.shape[1]), np.int16)], axis=1))
    row_base = np.arange(n, dtype=np.intp)[:, None]
    slot = _KIND_FIRST_SLOT[kind] + _SQUARE_RANK - smaller.ravel()[row_base * 16 + kind]
    slot[key == 0xFFFF] = NUM_SLOTS
    target = (row_base * (NUM_SLOTS + 1) + slot).ravel()
    codes = (key & 0x1F).astype(np.uint8).ravel()
    pieces.ravel()[target] = ((key >> 5) & 0x7F).astype(np.uint8).ravel() | _CODE_OPPONENT[codes]
    flags.ravel()[target] = _KEY_PROMOTED[codes]
    return pieces[:, :NUM_SLOTS].copy(), np.packbits(flags[:, :NUM_SLOTS], axis=1, bitorder="little")


def unpack_positions(pieces: np.ndarray, promoted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Board [N, 81] and hands [N, 14] uint8 of pieces [N, 40] / promoted [N, 5] (pack_positions' inverse)."""
    n = pieces.shape[0]
    location = pieces & SLOT_LOCATION
    opponent = pieces >= SLOT_OPPONENT
    flags = np.unpackbits(promoted, axis=1, count=NUM_SLOTS, bitorder="little")
    codes = SLOT_TYPE + flags * _SLOT_PROMOTION_STEP + opponent * np.uint8(NUM_PIECE_TYPES)   # [N, 40]
    on_board = location < NUM_SQUARES
    board = np.zeros((n, NUM_SQUARES + 1), np.uint8)          # column 81 collects pieces off the board
    target = np.arange(n)[:, None] * (NUM_SQUARES + 1) + np.where(on_board, location, NUM_SQUARES)
    board.ravel()[target.ravel()] = (codes * on_board).ravel()
    in_hand = location == SLOT_IN_HAND
    own = (in_hand & ~opponent).astype(np.float32) @ _SLOT_HAND_KIND
    other = (in_hand & opponent).astype(np.float32) @ _SLOT_HAND_KIND
    return board[:, :NUM_SQUARES].copy(), np.concatenate([own, other], axis=1).astype(np.uint8)


def expand_planes(board: np.ndarray, hands: np.ndarray) -> np.ndarray:
    """Input planes [N, 9, 9, NUM_PLANES] float32 of board [N, 81] and hands [N, 14] uint8."""
    n = board.shape[0]
    onehot = np.eye(NUM_PIECE_CODES, dtype=np.float32)[board.astype(np.int64)][..., 1:]   # [N, 81, 28]
    scale = np.asarray(HAND_MAX * 2, np.float32)
    hand_planes = np.broadcast_to((hands.astype(np.float32) / scale)[:, None, :], (n, NUM_SQUARES, HAND_SIZE))
    return np.concatenate([onehot, hand_planes], axis=-1).reshape(n, 9, 9, NUM_PLANES)


def mirror_board(board: np.ndarray) -> np.ndarray:
    """Left-right mirror of [N, 81] boards (file f <-> 10 - f): a symmetric augmentation for value."""
    return board.reshape(-1, 9, 9)[:, :, ::-1].reshape(board.shape)
