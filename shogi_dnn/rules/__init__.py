"""Move rules behind one small interface, so readers and the encoder never touch a library directly.

  position.py          the `Position` protocol, IllegalMoveError, the square/piece/colour conventions
  pyshogi_backend.py   `ShogiPosition` on python-shogi (always installed, the reference)
  cshogi_backend.py    `CshogiPosition` on cshogi (extra `fast`; identical results, faster)
  factory.py           `new_position`, `position_factory`, `resolve_backend`: picks a backend;
                       `position_from_sfen`: new_position after the full check of a hand-given position
  validity.py          `check_sfen`, IllegalPositionError: the positions no game can reach, refused

Callers outside this folder import from `shogi_dnn.rules`; the modules inside import each other directly
(position <- validity <- backends <- factory), so there is no import cycle.
"""

from shogi_dnn.rules.factory import (
    BACKEND_ENV,
    BACKENDS,
    available_backends,
    new_position,
    position_factory,
    position_from_sfen,
    resolve_backend,
)
from shogi_dnn.rules.position import (
    BLACK,
    HAND_PIECE_TYPES,
    NUM_PIECE_TYPES,
    NUM_SQUARES,
    SFEN_PIECE,
    WHITE,
    IllegalMoveError,
    Position,
    format_sfen,
    square_index,
    square_usi,
)
from shogi_dnn.rules.pyshogi_backend import ShogiPosition
from shogi_dnn.rules.validity import IllegalPositionError, check_sfen

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "BLACK",
    "HAND_PIECE_TYPES",
    "NUM_PIECE_TYPES",
    "NUM_SQUARES",
    "SFEN_PIECE",
    "WHITE",
    "IllegalMoveError",
    "IllegalPositionError",
    "Position",
    "ShogiPosition",
    "available_backends",
    "check_sfen",
    "format_sfen",
    "new_position",
    "position_factory",
    "position_from_sfen",
    "resolve_backend",
    "square_index",
    "square_usi",
]
