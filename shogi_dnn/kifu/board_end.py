"""A record with no result whose last position is checkmate: the side that made the last move won."""

# Records cut at the mating move (no 投了 / %TORYO / %TSUMI) are decided by the rules; a tsume problem (a
# start with one king) is not. The repair is written into the record (`mate_on_board`), counted by convert.

from __future__ import annotations

import dataclasses

from shogi_dnn.kifu.record import Ending, GameRecord, Winner
from shogi_dnn.rules import BLACK, new_position

MATE_ON_BOARD = "mate_on_board"


def settle_board_mate(record: GameRecord) -> GameRecord:
    """`record` decided by a checkmate in its last position when it has no result, else unchanged."""
    if record.has_result or record.ending is not Ending.NONE or not record.moves or record.format == "sfen":
        return record                     # SFEN / USI lines are positions to look at, not games
    board = record.start_sfen.split(" ", 1)[0]
    if "K" not in board or "k" not in board:        # a tsume problem's solution, not a game
        return record
    position = new_position(record.start_sfen)
    for move in record.moves:
        position.push_usi(move)
    if not position.is_checkmate():
        return record
    winner = Winner.WHITE if position.turn == BLACK else Winner.BLACK
    repair = (f"{MATE_ON_BOARD} {record.source}: no result recorded; the position after move "
              f"{len(record.moves)} ({record.moves[-1]}) is checkmate, {winner.value} won")
    return dataclasses.replace(record, winner=winner, ending=Ending.CHECKMATE,
                               repairs=(*record.repairs, repair))


__all__ = ["MATE_ON_BOARD", "settle_board_mate"]
