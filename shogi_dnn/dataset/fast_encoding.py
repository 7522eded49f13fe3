"""Compiled kernels of features.py's per-position work (the C extension shogi_dnn.dataset._encode,
optional; features.py keeps its numpy path, and tests/dataset/test_fast_encoding.py pins both equal).

  replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes[, pieces,
              promoted]) -> int
      start_board [81] uint8 and start_hands [14] uint8 from Black's view; first_turn 0 or 1; moves
      [M] int64 absolute move codes (features.absolute_move_code); writes board [M + 1, 81], hands
      [M + 1, 14] (side to move's view), move_codes [M + 1] uint16 (MOVE_NONE last), and optionally
      pieces [M + 1, 40] / promoted [M + 1, 5] uint8 (pack_rows' bytes). Returns -1, or the index
      of the first move that cannot be played or packed (a bug: the readers check legality).
  pack_rows(board, hands, pieces, promoted) -> int
      features.pack_positions into [N, 40] / [N, 5] uint8. Returns -1, or the first row holding
      more pieces of a kind than one set (or an invalid code).
  fourfold_rows(pieces, promoted, first_turn) -> int
      The first packed row that repeats a position for the fourth time (same side to move), or -1
      (features.first_fourfold, one hashed pass).
  in_check_rows(board) -> bytes
      Per row of board [N, 81] (side to move's view), 1 when the side to move is in check (a kernel
      of rules/_native.c).

All arrays C-contiguous, of exactly those sizes (else ValueError).
"""

from __future__ import annotations

from collections.abc import Callable

from shogi_dnn.rules.native import in_check_rows

try:
    import shogi_dnn.dataset._encode as _encode
except ImportError:                          # no compiler at install time: features.py's numpy path
    _encode = None

pack_rows: Callable[..., int] | None = getattr(_encode, "pack_rows", None)
replay_game: Callable[..., int] | None = getattr(_encode, "replay_game", None)
# None in an extension built before them (convert then takes the numpy / Python path for these only)
fourfold_rows: Callable[..., int] | None = getattr(_encode, "fourfold_rows", None)

AVAILABLE = pack_rows is not None

__all__ = ["AVAILABLE", "fourfold_rows", "in_check_rows", "pack_rows", "replay_game"]
