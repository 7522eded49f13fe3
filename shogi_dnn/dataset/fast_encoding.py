"""Compiled kernels of features.py's per-position work (the C extension shogi_dnn.dataset._encode, built at
install time when a C compiler is there; features.py keeps its numpy path otherwise, and
tests/dataset/test_fast_encoding.py pins both to the same arrays and shard bytes).

Why compiled: a game's positions follow from each other move by move, and the shards' slot form sorts
each position's pieces; in numpy that costs ~2 us a position for packing alone, more than dlshogi-style
converters spend on a whole position. The C loops replay a game in ~0.1 us and pack in ~0.1 us a
position. (numba did the same work as fast, but loading it cost ~0.7 s in every process, the whole
conversion time of a small corpus.)

  replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes[, pieces,
              promoted]) -> int
      start_board [81] uint8 codes and start_hands [14] uint8 (Black's, then White's) from Black's
      view; first_turn 0 or 1; moves [M] int64 *absolute* move codes (features.absolute_move_code:
      Black's view whoever moves); writes board [M + 1, 81], hands [M + 1, 14] (side to move's view)
      and move_codes [M + 1] uint16 (features.encode_move, MOVE_NONE last), and with pieces
      [M + 1, 40] / promoted [M + 1, 5] uint8 the same rows packed (pack_rows' bytes, from each
      kind's list of squares kept up to date move by move instead of sorting every board again).
      Returns -1, or the first move that cannot be played (no piece of the mover on its origin, its
      own piece or a king on the destination, a drop from an empty hand or onto a piece, a promotion
      of a piece that cannot promote; packing, also a start position or a move leaving more pieces
      of a kind than one set): the readers check legality, so that means a bug.
  pack_rows(board, hands, pieces, promoted) -> int
      features.pack_positions into out [N, 40] / [N, 5] uint8. Returns -1, or the first row holding
      more pieces of a kind than one set (or an invalid code).

  fourfold_rows(pieces, promoted, first_turn) -> int
      The index of the first row of a game's packed rows (replay_game's pieces [N, 40] / promoted [N, 5];
      row i's side to move: first_turn + i, mod 2) that is the same position as three earlier rows, or
      -1: features.first_fourfold on the packed rows, in one pass with a hash table (convert asks it of
      every game: features.repeated_games).

  in_check_rows(board) -> bytes
      For each row of board [N, 81] (the side to move's view), 1 when the side to move's king is in
      check: rules.in_check(row, BLACK) row by row (convert.worker._repeat_span's checks); a kernel of
      the rules' extension (rules/native.py, rules/_native.c).

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
