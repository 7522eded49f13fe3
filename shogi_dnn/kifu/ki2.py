"""KI2 reader: KIF headers and board diagrams, moves written without their origin square.

A KI2 move (`▲７六歩`, `△同　銀`, `▲５八金右`, `△２二角成`, `▲５五角打`) is resolved against the
legal moves: exactly one must fit, else the game is a KifuError. Results are read as in KIF.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import japanese as ja
from shogi_dnn.kifu.kif import GameState, destination, read_games
from shogi_dnn.kifu.record import GameRecord
from shogi_dnn.rules import BLACK, SFEN_TYPE, WHITE, Position, parse_square

MARKS = {"▲": BLACK, "☗": BLACK, "▼": BLACK, "△": WHITE, "☖": WHITE, "▽": WHITE}
_TOKEN = re.compile(r"([▲△☗☖▼▽])\s*([^▲△☗☖▼▽\s]+)")
_SAME = re.compile(r"同[\s　]+")
_KI2_MOVE = re.compile(
    r"^(?:(?P<file>[1-9１-９])(?P<rank>[1-9１-９一二三四五六七八九])|(?P<same>同))"
    rf"(?P<piece>{ja.PIECE_PATTERN})"
    r"(?P<side>[右左])?(?P<motion>[直上寄引行入])?(?P<act>成|不成|生|打)?$")


def read_ki2_move_line(state: GameState, line: str, line_no: int) -> bool:
    """Read a line of `▲７六歩    △３四歩` moves into the game; False when it is not a move line."""
    if line.lstrip()[:1] not in MARKS:
        return False
    for mark, token in _TOKEN.findall(_SAME.sub("同", line)):
        if state.finished:
            if state.outcome is not None and not state.in_variation and token in ja.RESULT_WORDS:
                state.set_result(token, line_no)   # a second result word: checked against the first
            continue
        try:
            _read_token(state, MARKS[mark], token, line_no)
        except KifuError as exc:
            state.error = exc
    return True


def _read_token(state: GameState, colour: int, token: str, line_no: int) -> None:
    """One `▲７六歩` token: a result word or a move, checked to be played by the side to move."""
    ply = len(state.moves) + 1
    _check_side(state, colour, line_no)
    if token in ja.RESULT_WORDS:
        state.set_result(token, line_no)
        return
    move = _KI2_MOVE.match(token)
    if move is None:
        state.fail(line_no, f"unreadable move {token!r}", ply)
        return
    to = destination(state, move, line_no)
    candidates = resolve_move(state.board(line_no), move, to)
    if len(candidates) != 1:
        what = "ambiguous" if candidates else "impossible"
        listed = f": {' '.join(candidates)}" if candidates else ""
        state.fail(line_no, f"{what} move {token!r}{listed}", ply)
        return
    state.play(candidates[0], line_no)


def _check_side(state: GameState, colour: int, line_no: int) -> None:
    """▲ moves must be Black's and △ White's. A board diagram without 手番 takes the first mover's side."""
    position = state.board(line_no)
    if position.turn == colour:
        return
    if not state.moves and state.turn is None and (state.board_rows or state.hands):
        state.turn = colour
        state.position = None
        state.board(line_no)
        return
    side = "▲" if colour == BLACK else "△"
    raise KifuError(state.path, line_no, f"{side} move but the other side is to move", len(state.moves) + 1)


def resolve_move(position: Position, move: re.Match[str], to: str) -> list[str]:
    """Every legal USI move from `position` that fits a KI2 move (a `_KI2_MOVE` match) landing on `to`."""
    piece_type = ja.PIECE_TYPES[move.group("piece")]
    act = move.group("act") or ""
    board_moves, drops = _moves_to(position, to, piece_type)
    if act == "打":
        return drops
    promote = act == "成"
    board_moves = [usi for usi in board_moves if usi.endswith("+") == promote]
    if not board_moves and not act and not move.group("side") and not move.group("motion"):
        return drops                     # 打 is only written when a board piece could also go there
    return _relative(board_moves, position.turn, move.group("side"), move.group("motion"))


def _moves_to(position: Position, to: str, piece_type: int) -> tuple[list[str], list[str]]:
    """Legal board moves of `piece_type` pieces to `to`, and legal drops of it there."""
    board_moves, drops = [], []
    for usi in position.legal_usi():
        if usi[2:4] != to:
            continue
        if usi[1] == "*":
            if SFEN_TYPE[usi[0]] == piece_type:
                drops.append(usi)
            continue
        found = position.piece_type_at(parse_square(usi[:2]))
        if found is not None and found[0] == piece_type:
            board_moves.append(usi)
    return board_moves, drops


def _relative(moves: list[str], turn: int, side: str | None, motion: str | None) -> list[str]:
    """Filter by motion (上/行/入 forward, 引 back, 寄 sideways, 直 straight ahead), then 右/左."""
    sign = 1 if turn == BLACK else -1    # Black moves towards rank 1 (a)

    def forward(usi: str) -> int:        # > 0 when the piece moves forward from its owner's view
        return sign * (ord(usi[1]) - ord(usi[3]))

    if motion in ("上", "行", "入"):
        moves = [u for u in moves if forward(u) > 0]
    elif motion == "引":
        moves = [u for u in moves if forward(u) < 0]
    elif motion == "寄":
        moves = [u for u in moves if forward(u) == 0]
    elif motion == "直":
        moves = [u for u in moves if forward(u) > 0 and u[0] == u[2]]
    if side and moves:
        # The mover's right is the low file numbers for Black and the high ones for White.
        rightness = [-sign * int(u[0]) for u in moves]
        best = max(rightness) if side == "右" else min(rightness)
        moves = [u for u, r in zip(moves, rightness) if r == best]
    return moves


def parse(text: str, path: str) -> Iterator[GameRecord | KifuError]:
    """Yield each game of a KI2 text (already decoded) as a GameRecord, or a KifuError for a bad one."""
    yield from read_games(text, path, "ki2", read_ki2_move_line)


__all__ = ["parse", "read_ki2_move_line", "resolve_move"]
