"""Move rules behind one small interface (Position, its backends, pieces, moves, validity), so readers and
the encoder never touch a library directly; docs/architecture.md maps the modules.
"""

from shogi_dnn.rules.entering_king import ENTERING_KING_RULE, ENTERING_KING_RULES, declaration_win
from shogi_dnn.rules.factory import (
    BACKEND_ENV,
    BACKENDS,
    available_backends,
    new_position,
    position_factory,
    position_from_sfen,
    resolve_backend,
)
from shogi_dnn.rules.moves import MOVES, PieceMoves, attacks, in_check
from shogi_dnn.rules.pieces import (
    BASE_PIECE_TYPES,
    HAND_PIECE_TYPES,
    NUM_PIECE_TYPES,
    PIECE_VALUES,
    PROMOTED,
    SET_COUNT,
    SFEN_PIECE,
    SFEN_TYPE,
    UNPROMOTED,
    PieceType,
)
from shogi_dnn.rules.position import (
    BLACK,
    NUM_SQUARES,
    WHITE,
    IllegalMoveError,
    Position,
    format_sfen,
    parse_square,
    position_key,
    square_index,
    square_name,
    square_usi,
)
from shogi_dnn.rules.pyshogi_backend import ShogiPosition
from shogi_dnn.rules.validity import IllegalPositionError, check_sfen

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "BASE_PIECE_TYPES",
    "BLACK",
    "ENTERING_KING_RULE",
    "ENTERING_KING_RULES",
    "HAND_PIECE_TYPES",
    "MOVES",
    "NUM_PIECE_TYPES",
    "NUM_SQUARES",
    "PIECE_VALUES",
    "PROMOTED",
    "SET_COUNT",
    "SFEN_PIECE",
    "SFEN_TYPE",
    "UNPROMOTED",
    "WHITE",
    "IllegalMoveError",
    "IllegalPositionError",
    "PieceMoves",
    "PieceType",
    "Position",
    "ShogiPosition",
    "attacks",
    "available_backends",
    "check_sfen",
    "declaration_win",
    "format_sfen",
    "in_check",
    "new_position",
    "parse_square",
    "position_factory",
    "position_from_sfen",
    "position_key",
    "resolve_backend",
    "square_index",
    "square_name",
    "square_usi",
]
