"""SFEN/USI game lines -> GameRecord: one game a line, no result.

Accepted lines (an optional leading `position ` as a USI engine receives it):

    startpos
    startpos moves 7g7f 3c3d
    sfen lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1 moves 5a4b 7g7f
    lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2     (a bare position)

The move number may be left out (1). Blank lines and `#` comments are skipped. The result is unknown,
except for a final `resign` or `win` token. A bad line is a KifuError for that line only.
"""

from __future__ import annotations

from collections.abc import Iterator

from shogi_dnn import rules
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner

# A last token some GUIs append to the move list (USI `bestmove resign` / `bestmove win`):
# the side to move resigned, or declared an entering-king win.
USI_ENDINGS = {"resign": Ending.RESIGN, "win": Ending.ENTERING_KING}


def parse(text: str, path: str) -> Iterator[GameRecord | KifuError]:
    """Yield one GameRecord (or a KifuError) per game line of `text` ('\\n' or '\\r\\n' line ends); one
    KifuError for a file without any game line.
    """
    found = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found += 1
        try:
            yield parse_line(line, number, path)
        except KifuError as exc:
            yield exc
    if not found:
        yield KifuError(path, 1, "no SFEN/USI game line in the file")


def parse_line(line: str, number: int = 1, path: str = "<sfen>") -> GameRecord:
    """One `[position] startpos|sfen ... [moves ...]` line as a GameRecord.

    Raises:
        KifuError: bad syntax or position (ply 0), or an illegal move (naming its ply).
    """
    tokens = line.split()
    if tokens[0] == "position":
        tokens = tokens[1:]
    start_sfen, rest = _start(tokens, number, path)
    try:
        position = rules.new_position(start_sfen)
    except rules.IllegalMoveError as exc:
        raise KifuError(path, number, str(exc)) from exc
    start_sfen = position.sfen()        # canonical form (hand order), as the other readers give it
    if rest and rest[0] != "moves":
        raise KifuError(path, number, f"expected 'moves' after the position, got {rest[0]!r}")
    moves = rest[1:]
    winner, ending = Winner.UNKNOWN, Ending.NONE
    if moves and moves[-1] in USI_ENDINGS:
        ending = USI_ENDINGS[moves.pop()]
    for ply, usi in enumerate(moves, start=1):
        try:
            position.push_usi(usi)
        except rules.IllegalMoveError as exc:
            raise KifuError(path, number, str(exc), ply) from exc
    if ending is not Ending.NONE:
        to_move = Winner.BLACK if position.turn == rules.BLACK else Winner.WHITE
        other = Winner.WHITE if to_move is Winner.BLACK else Winner.BLACK
        winner = other if ending is Ending.RESIGN else to_move
    return GameRecord(start_sfen=start_sfen, moves=tuple(moves), winner=winner, ending=ending,
                      source=SourceLine(path, number), format="sfen")


def _start(tokens: list[str], number: int, path: str) -> tuple[str, list[str]]:
    """(start SFEN with move number, the tokens after the position)."""
    if not tokens:
        raise KifuError(path, number, "empty position line")
    if tokens[0] == "startpos":
        return STANDARD_START_SFEN, tokens[1:]
    if tokens[0] == "sfen":
        tokens = tokens[1:]
    elif "/" not in tokens[0]:          # a bare SFEN (a position list) has no `sfen` keyword
        raise KifuError(path, number, f"expected 'startpos' or 'sfen', got {tokens[0][:20]!r}")
    fields = tokens[:3]
    if len(fields) < 3 or "moves" in fields:
        raise KifuError(path, number, "SFEN needs board, side to move and hands")
    rest = tokens[3:]
    if rest and rest[0].isascii() and rest[0].isdigit():
        move_number, rest = rest[0], rest[1:]
    else:
        move_number = "1"
    return " ".join(fields + [move_number]), rest
