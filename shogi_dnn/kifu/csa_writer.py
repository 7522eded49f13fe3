"""GameRecord -> CSA V2.2 text (`format_csa`), which kifu/csa.py's `parse` reads back as the same game.

  V2.2, N+/N- names, $EVENT, 'black_rate:/'white_rate: ratings   from the record's fields
  start position      `PI` (with the removed pieces of a handicap) when it is the even-game board less
                      some pieces and no hands, else P1..P9 rows with P+/P- hand lines; then `+`/`-`
  moves               `+7776FU` (sign of the side to move, piece after the move), `'** <Black's view>`
                      after it where the record evaluates the position it leads to (kifu/evals.py)
  ending              the `%` special move (kifu/csa.py's SPECIAL_MOVES) whose implied winner is the
                      record's; none for Ending.NONE
  `header`, `tail`    comment lines before the start position, after the ending
"""

from __future__ import annotations

from collections.abc import Sequence

from shogi_dnn import rules
from shogi_dnn.kifu.csa import SPECIAL_MOVES, special_move_winner
from shogi_dnn.kifu.csa_board import CSA_PIECES, STANDARD_CODES
from shogi_dnn.kifu.record import Ending, GameRecord
from shogi_dnn.rules import HAND_PIECE_TYPES, PROMOTED, SFEN_TYPE


def format_csa(record: GameRecord, header: Sequence[str] = (), tail: Sequence[str] = ()) -> str:
    """Write `record` as a CSA V2.2 game (a start SFEN read back has move number 1).

    Raises:
        ValueError: a move is illegal, or the winner cannot be expressed with the record's ending.
    """
    lines = ["V2.2", f"N+{record.black}", f"N-{record.white}"]
    if record.event:
        lines.append(f"$EVENT:{record.event}")
    if record.black_rating is not None:
        lines.append(f"'black_rate:{record.black}:{record.black_rating}")
    if record.white_rating is not None:
        lines.append(f"'white_rate:{record.white}:{record.white_rating}")
    lines += [f"'{comment}" for comment in header]
    lines += _position_lines(record.start_sfen)
    position = rules.new_position(record.start_sfen)
    for ply, usi in enumerate(record.moves, start=1):
        lines.append(usi_to_csa_move(position, usi))
        position.push_usi(usi)
        score = record.evals[ply] if record.evals else None
        if score is not None:             # side to move's view -> Black's
            lines.append(f"'** {score if position.turn == rules.BLACK else -score}")
    if record.ending is not Ending.NONE:
        lines.append(_special_move(record, position))
    lines += [f"'{comment}" for comment in tail]
    return "\n".join(lines) + "\n"


def usi_to_csa_move(position: rules.Position, usi: str) -> str:
    """`7g7f` -> `+7776FU` (sign of the side to move; the piece after the move), read against `position`."""
    sign = "+" if position.turn == rules.BLACK else "-"
    to = _csa_square(usi[2:4])
    if usi[1] == "*":
        return f"{sign}00{to}{CSA_PIECES[SFEN_TYPE[usi[0]] - 1]}"
    here = position.piece_type_at(rules.parse_square(usi[:2]))
    if here is None:
        raise ValueError(f"move {usi}: no piece on {usi[:2]}")
    piece = PROMOTED[here[0]] if usi.endswith("+") and here[0] in PROMOTED else here[0]
    return f"{sign}{_csa_square(usi[:2])}{to}{CSA_PIECES[piece - 1]}"


def _csa_square(usi_square: str) -> str:
    """CSA's square of a USI square: file and rank digits ('7g' -> '77')."""
    return f"{usi_square[0]}{ord(usi_square[1]) - ord('a') + 1}"


def _position_lines(sfen: str) -> list[str]:
    _, turn, hand = sfen.split(" ")[:3]
    turn_line = "+" if turn == "b" else "-"
    codes = rules.new_position(sfen).piece_codes()
    if hand == "-" and all(c == s or (c == 0 and s > rules.NUM_PIECE_TYPES)
                           for c, s in zip(codes, STANDARD_CODES)):
        removed = "".join(
            f"{_csa_square(rules.square_name(index))}{CSA_PIECES[(s - 1) % rules.NUM_PIECE_TYPES]}"
            for index, (c, s) in enumerate(zip(codes, STANDARD_CODES)) if c != s)
        return [f"PI{removed}", turn_line]
    lines = []
    for rank in range(9):
        cells = []
        for code in codes[rank * 9:(rank + 1) * 9]:
            if code == 0:
                cells.append(" * ")
            else:
                colour, piece = divmod(code - 1, rules.NUM_PIECE_TYPES)
                cells.append(("+" if colour == rules.BLACK else "-") + CSA_PIECES[piece])
        lines.append(f"P{rank + 1}" + "".join(cells))
    black_hand, white_hand = rules.new_position(sfen).hand_counts()
    for sign, counts in (("+", black_hand), ("-", white_hand)):
        pieces = "".join(f"00{CSA_PIECES[t - 1]}" * n for t, n in zip(HAND_PIECE_TYPES, counts))
        if pieces:
            lines.append(f"P{sign}{pieces}")
    return lines + [turn_line]


def _special_move(record: GameRecord, position: rules.Position) -> str:
    """The `%` token for the record's ending whose implied winner is the record's winner."""
    for token, (ending, loser) in SPECIAL_MOVES.items():
        if ending is record.ending and special_move_winner(loser, position) is record.winner:
            return token
    to_move = "black" if position.turn == rules.BLACK else "white"
    raise ValueError(f"{record.source}: cannot write ending {record.ending.value} won by "
                     f"{record.winner.value} as CSA with {to_move} to move")
