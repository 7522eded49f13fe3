"""Fourfold repetition (千日手): where a game was over, and how, from its positions.

The game ends when the same position (board, hands, side to move) occurs for the fourth time: a draw,
unless every move of one side since the first occurrence gave check (連続王手の千日手): that side
loses. A record that plays on is cut there; a claimed repetition that did not happen is not believed.
`fourfold_index` finds the end from one key per position; `settle` turns it into the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu.record import Ending, GameRecord, Winner
from shogi_dnn.rules import BLACK, in_check, new_position, position_key

# Kinds of the repetition outcome, as convert-report.json counts them (`repetitions`).
CUT_SENNICHITE = "cut_sennichite"                  # played on past a fourfold repetition: cut, a draw
CUT_OUTE_SENNICHITE = "cut_oute_sennichite"        # the same with perpetual check: the checker lost
ENDED_SENNICHITE = "sennichite"                    # ended at the fourth occurrence, as recorded
ENDED_OUTE_SENNICHITE = "oute_sennichite"
RELABELLED = "relabelled"     # ended at the fourth occurrence, another result recorded: `relabelled_<ending>`
UNCONFIRMED_CLAIM = "unconfirmed_claim"            # 千日手 claimed, no position occurred four times

_CLAIMS = (Ending.SENNICHITE, Ending.OUTE_SENNICHITE)


def fourfold_index(keys: Sequence[Hashable]) -> int:
    """The index of the first position that occurs for the fourth time, or -1 (`keys`: one per position)."""
    counts: dict[Hashable, int] = {}
    for index, key in enumerate(keys):
        seen = counts.get(key, 0) + 1
        if seen == 4:
            return index
        counts[key] = seen
    return -1


@dataclasses.dataclass(frozen=True)
class Settled:
    """What the rule makes of a record: the record to use, the kind of change ('' for none), the plies cut."""

    record: GameRecord
    kind: str = ""
    plies_cut: int = 0


def settle(record: GameRecord, end: int, checks: Sequence[bool] | None = None, first: int = -1) -> Settled:
    """Apply the rule to `record` given `end` = fourfold_index of its positions.

    Args:
        checks, first: whether the side to move is in check in each position up to `end`, and the index
            of the first occurrence; else the game is replayed.
    Raises:
        KifuError: a claimed repetition with no fourfold one.
    """
    if end < 0:
        if record.ending in _CLAIMS:
            raise KifuError(record.source.path, record.source.line,
                            f"{UNCONFIRMED_CLAIM}: {record.ending.value} claimed after {len(record.moves)} "
                            "moves but no position occurred four times")
        return Settled(record)
    first_turn = 0 if record.start_sfen.split(" ")[1] == "b" else 1
    winner, ending = (repetition_result(record, end) if checks is None
                      else result_from_checks(first, end, checks, first_turn))
    cut = len(record.moves) - end
    if cut:
        kind = CUT_OUTE_SENNICHITE if ending is Ending.OUTE_SENNICHITE else CUT_SENNICHITE
    elif (winner, ending) == (record.winner, record.ending):
        kind = ENDED_OUTE_SENNICHITE if ending is Ending.OUTE_SENNICHITE else ENDED_SENNICHITE
    else:
        kind = f"{RELABELLED}_{ending.value}"
    evals = record.evals[:end + 1] if record.evals else ()
    codes = record.move_codes[:end] if record.move_codes is not None else None
    new = dataclasses.replace(record, moves=record.moves[:end], winner=winner, ending=ending, evals=evals,
                              move_codes=codes)
    return Settled(new, kind, cut)


def repetition_result(record: GameRecord, end: int) -> tuple[Winner, Ending]:
    """(winner, ending) of a game over at position `end`, the fourth occurrence of a position: a draw,
    or a loss for the side whose every move since the first occurrence gave check."""
    position = new_position(record.start_sfen)
    keys, checks = [], []           # per position: its key; whether the side to move is in check
    for index in range(end + 1):
        keys.append(position_key(position))
        checks.append(in_check(position.piece_codes(), position.turn))
        if index < end:
            position.push_usi(record.moves[index])
    return result_from_checks(keys.index(keys[end]), end, checks,
                              0 if record.start_sfen.split(" ")[1] == "b" else 1)


def result_from_checks(first: int, end: int, checks: Sequence[bool],
                       first_turn: int) -> tuple[Winner, Ending]:
    """Draw, or OUTE_SENNICHITE lost by the side that checked with every move after `first` up to `end`
    (`checks[i]`: the side to move is in check in position i).
    """
    for checker in (0, 1):
        # Positions after the checker's moves since the first occurrence: the other side to move.
        after = [checks[i] for i in range(first + 1, end + 1) if (first_turn + i) % 2 != checker]
        if after and all(after):
            return (Winner.WHITE if checker == BLACK else Winner.BLACK), Ending.OUTE_SENNICHITE
    return Winner.DRAW, Ending.SENNICHITE


__all__ = ["CUT_OUTE_SENNICHITE", "CUT_SENNICHITE", "ENDED_OUTE_SENNICHITE", "ENDED_SENNICHITE", "RELABELLED",
           "UNCONFIRMED_CLAIM", "Settled", "fourfold_index", "repetition_result", "result_from_checks",
           "settle"]
