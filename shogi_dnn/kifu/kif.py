"""KIF reader and writer (Kifu for Windows format, also Shogi Wars, Shogidokoro and Piyo Shogi exports).

A KIF game is: header lines `key：value` (先手/後手/下手/上手, 棋戦, 手合割, ...), optionally a board
diagram (`後手の持駒：`, nine `|...|` rows, `先手の持駒：`, `後手番`), then one move a line,
`   1 ７六歩(77)   ( 0:01/00:00:01)`, ending with a result word as a move (`  91 投了`) and/or a
summary line `まで90手で後手の勝ち`. Comments (`*`) are skipped except the engine evaluations GUIs
write (ShogiHome, ShogiGUI, Shogidokoro; see shogi_dnn.kifu.evals); bookmarks (`&`) and `#` lines are skipped; the
`変化：N手` variation blocks after the main line are ignored. A new header after moves starts the
next game (files with several games concatenated).

The line-level machinery here (`GameState`, `read_games`) is shared with the KI2 reader, which only
reads its move lines differently.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import japanese as ja
from shogi_dnn.kifu.evals import evals_by_position, kif_comment_eval, to_black_view
from shogi_dnn.kifu.record import Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import BLACK, WHITE, IllegalMoveError, Position, new_position, square_usi

# Header keys that open a new game when they follow the moves of the previous one.
NEW_GAME_KEYS = frozenset({"開始日時", "対局日", "棋戦", "手合割", "先手", "後手", "下手", "上手", "表題",
                           "後手の持駒", "先手の持駒", "上手の持駒", "下手の持駒"})
HAND_KEYS = {"先手の持駒": BLACK, "下手の持駒": BLACK, "後手の持駒": WHITE, "上手の持駒": WHITE}
TURN_LINES = {"先手番": BLACK, "下手番": BLACK, "後手番": WHITE, "上手番": WHITE}
_HEADER = re.compile(r"^([^\s：:*&#|+]+?)[：:](.*)$")
_BOARD_ROW = re.compile(r"^\|(.*)\|")
_BOARD_CELL = re.compile(r"([ vV^]?)(・|[歩香桂銀金角飛玉王と杏圭全馬龍竜])")
_MOVE_LINE = re.compile(r"^\s*(\d+)\s+(\S.*)$")
_SAME = re.compile(r"同[\s　]+")
_KIF_MOVE = re.compile(
    rf"^(?:(?P<file>[1-9１-９])(?P<rank>[1-9１-９一二三四五六七八九])|(?P<same>同))(?P<piece>{ja.PIECE_PATTERN})"
    r"(?P<act>成|不成|生|打)?(?:\((?P<origin>\d\d)\))?$")
_SUMMARY_WINNER = {"先手": Winner.BLACK, "下手": Winner.BLACK, "後手": Winner.WHITE, "上手": Winner.WHITE}
_OTHER = {Winner.BLACK: Winner.WHITE, Winner.WHITE: Winner.BLACK}


@dataclasses.dataclass
class GameState:
    """One game while its lines are read (mutable; `record()` freezes it into a GameRecord)."""

    path: str
    fmt: str
    start_line: int
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    board_rows: list[str] = dataclasses.field(default_factory=list)
    hands: dict[int, str] = dataclasses.field(default_factory=dict)
    turn: int | None = None              # explicit 先手番/後手番 line
    position: Position | None = None     # built at the first move or result
    start: str = ""                      # the start SFEN, once built
    moves: list[str] = dataclasses.field(default_factory=list)
    last_to: str = ""                    # destination of the last move, for 同
    outcome: ja.Outcome | None = None    # from a result word
    outcome_turn: int = BLACK            # side to move when the result word was read
    summary: re.Match[str] | None = None
    max_moves_comment: bool = False
    in_variation: bool = False
    error: KifuError | None = None
    illegal_pending: bool = False        # the error is an illegal move that a `*反則…` comment may confirm
    declared: bool = False               # a board diagram or the `手数----指手` line: a game even with no moves
    evals: dict[int, int] = dataclasses.field(default_factory=dict)   # position index -> Black-view score

    @property
    def started(self) -> bool:
        """True once the game has moves or a result: a header line then starts the next game."""
        return bool(self.moves) or self.outcome is not None or self.summary is not None or self.in_variation

    @property
    def finished(self) -> bool:
        """True when no more main-line moves are taken (error, result word or variations reached)."""
        return self.error is not None or self.outcome is not None or self.in_variation

    def fail(self, line: int, reason: str, ply: int = 0) -> None:
        """Record the game's first error; the rest of the game is skipped."""
        if self.error is None:
            self.error = KifuError(self.path, line, reason, ply)

    def board(self, line: int) -> Position:
        """The current position, building the start position on first use (raises KifuError)."""
        if self.position is None:
            start = start_sfen(self, line)
            try:
                self.position = new_position(start)
            except IllegalMoveError as exc:
                raise KifuError(self.path, line, f"bad start position: {exc}") from exc
            self.start = start
        return self.position

    def play(self, usi: str, line: int, text: str = "") -> None:
        """Play one main-line move (`text` is how the record wrote it); an illegal move fails the game."""
        try:
            position = self.board(line)
        except KifuError as exc:
            self.error = self.error or exc
            return
        try:
            position.push_usi(usi)
        except IllegalMoveError:
            self.fail(line, f"illegal move {text + ' = ' if text else ''}{usi}", len(self.moves) + 1)
            self.illegal_pending = True
            return
        self.moves.append(usi)
        self.last_to = usi[2:4]

    def set_result(self, word: str, line: int) -> None:
        """A result word read where the next move would be."""
        self.outcome = ja.RESULT_WORDS[word]
        self.outcome_turn = self.board(line).turn


def start_sfen(state: GameState, line: int) -> str:
    """The start position from the board diagram, else the 手合割, else the even-game start.

    Raises:
        KifuError: a malformed board diagram or an unknown 手合割 without a diagram.
    """
    if state.board_rows or state.hands:
        sfen = board_sfen(state, line)
    else:
        name = state.headers.get("手合割", "平手")
        sfen = ja.handicap_sfen(name) or ""
        if not sfen:
            raise KifuError(state.path, line, f"unknown 手合割 {name!r} and no board diagram")
    return sfen


def board_sfen(state: GameState, line: int) -> str:
    """SFEN of a KIF/KI2 board diagram (`|v香v桂...|一` rows, 持駒 lines, 手番 line)."""
    if len(state.board_rows) != 9:
        raise KifuError(state.path, line, f"board diagram has {len(state.board_rows)} rows, expected 9")
    rows = []
    for text in state.board_rows:
        cells = _BOARD_CELL.findall(text)
        if len(cells) != 9:
            raise KifuError(state.path, line, f"board row {text!r} does not have 9 squares")
        row, empty = "", 0
        for mark, name in cells:
            if name == "・":
                empty += 1
                continue
            row += (str(empty) if empty else "") + _sfen_piece(ja.PIECE_TYPES[name], mark in "vV^")
            empty = 0
        rows.append(row + (str(empty) if empty else ""))
    hands = "".join(_sfen_hand(state, colour, line) for colour in (BLACK, WHITE)) or "-"
    turn = "w" if state.turn == WHITE else "b"
    return f"{'/'.join(rows)} {turn} {hands} 1"


def _sfen_piece(piece_type: int, white: bool) -> str:
    base = ja.PROMOTED_BASE.get(piece_type, piece_type)
    letter = ("+" if piece_type in ja.PROMOTED_BASE else "") + ja.SFEN_LETTERS[base]
    return letter.lower() if white else letter


def _sfen_hand(state: GameState, colour: int, line: int) -> str:
    """SFEN hand part of one side from `歩五　桂　角` / `金 歩2` / `なし`."""
    counts: dict[int, int] = {}
    for token in re.split(r"[\s　、,]+", state.hands.get(colour, "").strip()):
        if not token or token == "なし":
            continue
        piece_type = ja.PIECE_TYPES.get(token[0])
        try:
            count = ja.parse_number(token[1:])
        except ValueError:
            piece_type = None
        if piece_type is None or piece_type > 7:
            raise KifuError(state.path, line, f"bad piece in hand {token!r}")
        counts[piece_type] = counts.get(piece_type, 0) + count
    out = ""
    for piece_type in (7, 6, 5, 4, 3, 2, 1):       # SFEN order R B G S N L P
        n = counts.get(piece_type, 0)
        if n:
            letter = ja.SFEN_LETTERS[piece_type]
            out += (str(n) if n > 1 else "") + (letter if colour == BLACK else letter.lower())
    return out


LineHandler = Callable[[GameState, str, int], bool]


def read_games(text: str, path: str, fmt: str,
               read_move_line: LineHandler) -> Iterator[GameRecord | KifuError]:
    """Split a KIF/KI2 text into games and yield each as a GameRecord or a KifuError.

    `read_move_line(state, line, line_no)` reads the format's move lines and returns True when the
    line was one (KIF: `  12 同　歩(23)`, KI2: `▲７六歩 △３四歩`).
    """
    state: GameState | None = None
    found = False
    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if state is not None and state.started and _opens_game(line):
            found = True
            yield finish_game(state)
            state = None
        if state is None:
            state = GameState(path, fmt, line_no)
        _read_line(state, line, line_no, read_move_line)
    if state is not None and (state.started or state.declared or state.error is not None):
        found = True
        yield finish_game(state)
    if not found:
        yield KifuError(path, 1 if text.strip() else 0, f"no {fmt.upper()} moves found")


def _opens_game(line: str) -> bool:
    if line.startswith("#KIF"):
        return True
    match = _HEADER.match(line)
    return match is not None and match.group(1) in NEW_GAME_KEYS


def _read_line(state: GameState, line: str, line_no: int, read_move_line: LineHandler) -> None:
    """Dispatch one non-empty line of a game."""
    head = line.lstrip()[:1]
    if head in "#&":
        return
    if state.illegal_pending and "反則" in line:
        _accept_recorded_foul(state)      # a まで line after it is still read: its winner prevails
    state.illegal_pending = False
    if head == "*":
        state.max_moves_comment |= "最大手数" in line
        if not state.finished:
            _read_eval(state, line.strip())
        return
    if line.startswith("変化") or state.error is not None:
        state.in_variation |= line.startswith("変化")
        return
    if _read_result_line(state, line, line_no) or _read_board_line(state, line):
        return
    if read_move_line(state, line, line_no):
        return
    header = _HEADER.match(line)
    if header:
        key, value = header.group(1), header.group(2).strip()
        if key in HAND_KEYS:
            state.hands[HAND_KEYS[key]] = value
        else:
            state.headers.setdefault(key, value)


def _read_eval(state: GameState, line: str) -> None:
    """An engine evaluation comment: the score of the position reached so far (the first one wins)."""
    found = kif_comment_eval(line)
    if found is None:
        return
    score, mover_view = found
    ply = len(state.moves)
    if mover_view:
        if ply == 0 or state.position is None:
            return                            # no move for the score to belong to
        score = to_black_view(score, 1 - state.position.turn)
    state.evals.setdefault(ply, score)


def _accept_recorded_foul(state: GameState) -> None:
    """An illegal last move followed by `*反則手にて終局`, a 反則 result word or a `まで…反則…` line is
    the game's result, not a broken record: the side that played it lost."""
    state.error = None
    state.illegal_pending = False
    state.outcome = ja.Outcome(Ending.ILLEGAL_MOVE, ja.Mover.OPPONENT)
    state.outcome_turn = state.board(state.start_line).turn


def _read_result_line(state: GameState, line: str, line_no: int) -> bool:
    match = ja.SUMMARY_LINE.match(line)
    if match is None:
        return False
    if not state.in_variation and state.summary is None:
        state.summary = match
        try:
            state.board(line_no)
        except KifuError as exc:
            state.error = exc
    return True


def _read_board_line(state: GameState, line: str) -> bool:
    stripped = line.strip()
    row = _BOARD_ROW.match(stripped)
    if row:
        state.board_rows.append(row.group(1))
        state.declared = True
        return True
    if stripped.startswith("手数-"):
        state.declared = True
        return True
    if stripped in TURN_LINES:
        state.turn = TURN_LINES[stripped]
        return True
    return stripped.startswith(("+---", "９ ８", "９\u3000８"))


def finish_game(state: GameState) -> GameRecord | KifuError:
    """Freeze a game: its error if it has one, else the record with winner and ending."""
    if state.error is not None:
        return state.error
    try:
        position = state.board(state.start_line)
    except KifuError as exc:
        return exc
    winner, ending = _result(state, position)
    handicap = ja.handicap_name(state.start)
    return GameRecord(
        start_sfen=state.start, moves=tuple(state.moves), winner=winner, ending=ending,
        source=SourceLine(state.path, state.start_line), format=state.fmt,
        black=_header(state, ja.BLACK_KEYS), white=_header(state, ja.WHITE_KEYS),
        handicap="" if handicap in (None, "平手") else handicap, event=state.headers.get("棋戦", ""),
        evals=evals_by_position(state.evals, state.start, len(state.moves)))


def _header(state: GameState, keys: tuple[str, ...]) -> str:
    return next((state.headers[k] for k in keys if state.headers.get(k)), "")


def _result(state: GameState, position: Position) -> tuple[Winner, Ending]:
    """Winner and ending from the result word and the まで line (whose explicit winner prevails)."""
    ending, winner = Ending.NONE, Winner.UNKNOWN
    if state.outcome is not None:
        ending = state.outcome.ending
        winner = _relative_winner(state.outcome.winner, state.outcome_turn)
    if state.summary is not None:
        summary_winner, summary_ending = _summary_result(state.summary, position)
        if summary_winner is not Winner.UNKNOWN or state.outcome is None:
            winner = summary_winner
        if state.outcome is None:
            ending = summary_ending
    if ending is Ending.JISHOGI and state.max_moves_comment:
        ending = Ending.MAX_MOVES
    return winner, ending


def _relative_winner(mover: ja.Mover, turn: int) -> Winner:
    to_move = Winner.BLACK if turn == BLACK else Winner.WHITE
    return {ja.Mover.SIDE_TO_MOVE: to_move, ja.Mover.OPPONENT: _OTHER[to_move],
            ja.Mover.DRAW: Winner.DRAW, ja.Mover.NONE: Winner.UNKNOWN}[mover]


def _summary_result(match: re.Match[str], position: Position) -> tuple[Winner, Ending]:
    """Winner and ending of a `まで…手で…` line (ending guessed when no result word was written)."""
    word = match.group("word")
    if word:
        outcome = ja.RESULT_WORDS[word]
        return _relative_winner(outcome.winner, position.turn), outcome.ending
    side, kind, cause = match.group("side"), match.group("kind"), match.group("cause") or ""
    winner = _SUMMARY_WINNER[side]
    if kind in ("反則負け", "負け", "不戦敗"):
        winner = _OTHER[winner]
    if kind in ("不戦勝", "不戦敗"):
        return winner, Ending.FORFEIT
    if "反則" in kind or "反則" in cause:
        return winner, Ending.ILLEGAL_MOVE
    if "時間" in cause or "切れ" in cause:
        return winner, Ending.TIME_UP
    if kind in ("入玉勝ち", "宣言勝ち") or "入玉" in cause or "宣言" in cause:
        return winner, Ending.ENTERING_KING
    return winner, Ending.CHECKMATE if position.is_checkmate() else Ending.RESIGN


def read_kif_move_line(state: GameState, line: str, line_no: int) -> bool:
    """Read `  12 同　歩(23)   ( 0:01/00:00:05)+` into the game; False when it is not a move line."""
    match = _MOVE_LINE.match(line)
    if match is None:
        return False
    if state.finished:
        return True
    tokens = _SAME.sub("同", match.group(2)).split()
    token = tokens[0].rstrip("+").lstrip("▲△☗☖") if tokens else ""   # some sites write `1 ▲７六歩(77)`
    try:
        if token in ja.RESULT_WORDS:
            state.set_result(token, line_no)
            return True
        usi = kif_move_usi(state, token, line_no)
    except KifuError as exc:
        state.error = exc
        return True
    if usi:
        state.play(usi, line_no, token)
    return True


def kif_move_usi(state: GameState, token: str, line_no: int) -> str:
    """USI of a KIF move token (`７六歩(77)`, `同歩(23)`, `５五角打`, `２二角成(88)`); '' after failing."""
    ply = len(state.moves) + 1
    move = _KIF_MOVE.match(token)
    if move is None:
        state.fail(line_no, f"unreadable move {token!r}", ply)
        return ""
    to = destination(state, move, line_no)
    piece_type = ja.PIECE_TYPES[move.group("piece")]
    origin, act = move.group("origin"), move.group("act") or ""
    if act == "打" or origin in (None, "00"):
        if piece_type > 7:
            state.fail(line_no, f"cannot drop {move.group('piece')}", ply)
            return ""
        return f"{ja.SFEN_LETTERS[piece_type]}*{to}"
    source = square_usi(int(origin[0]), int(origin[1]))
    found = state.board(line_no).piece_type_at(usi_square_index(source))
    if found is None or found[0] != piece_type:
        state.fail(line_no, f"{token!r}: no {move.group('piece')} on {origin}", ply)
        return ""
    return source + to + ("+" if act == "成" else "")


def destination(state: GameState, move: re.Match[str], line_no: int) -> str:
    """USI destination of a move match with `file`/`rank` or `same` (同) groups."""
    if move.group("same"):
        if not state.last_to:
            raise KifuError(state.path, line_no, "同 with no previous move", len(state.moves) + 1)
        return state.last_to
    return square_usi(ja.DIGITS[move.group("file")], ja.DIGITS[move.group("rank")])


def usi_square_index(usi_square: str) -> int:
    """Square index (rules numbering) of a USI square such as '7g'."""
    return (ord(usi_square[1]) - ord("a")) * 9 + (9 - int(usi_square[0]))


def parse(text: str, path: str) -> Iterator[GameRecord | KifuError]:
    """Yield each game of a KIF text (already decoded) as a GameRecord, or a KifuError for a bad one."""
    yield from read_games(text, path, "kif", read_kif_move_line)


# Result words the writer uses for each ending (ILLEGAL_MOVE and FORFEIT depend on who won, see _ending_word).
_ENDING_WORDS = {Ending.RESIGN: "投了", Ending.CHECKMATE: "詰み", Ending.SENNICHITE: "千日手",
                 Ending.OUTE_SENNICHITE: "千日手", Ending.JISHOGI: "持将棋", Ending.MAX_MOVES: "持将棋",
                 Ending.DRAW: "引き分け", Ending.TIME_UP: "切れ負け", Ending.ENTERING_KING: "入玉勝ち",
                 Ending.INTERRUPTED: "中断", Ending.MATTA: "中断"}
_TIME = "   ( 0:00/00:00:00)"


def format_kif(record: GameRecord) -> str:
    """Write a record as KIF (UTF-8 text): 手合割 or board diagram, moves with origins, result.

    The result is written as a result word and a `まで…` line carrying the winner, so `parse` gives
    back the same start, moves and winner.

    Raises:
        IllegalMoveError: a move of the record is not legal (records from `parse` never have one).
    """
    name = ja.handicap_name(record.start_sfen)
    black_key, white_key = ("先手", "後手") if name in (None, "平手") else ("下手", "上手")
    lines = ["#KIF version=2.0 encoding=UTF-8"] + ([f"棋戦：{record.event}"] if record.event else [])
    position = new_position(record.start_sfen)
    lines += [f"手合割：{name}"] if name else board_diagram(position)
    lines += [f"{black_key}：{record.black}", f"{white_key}：{record.white}", "手数----指手---------消費時間--"]
    previous = ""
    for ply, usi in enumerate(record.moves, start=1):
        lines.append(f"{ply:>4} {move_text(position, usi, previous)}{_TIME}")
        position.push_usi(usi)
        previous = usi[2:4]
    plies = len(record.moves)
    word = _ending_word(record, position.turn)
    if word:
        if record.ending is Ending.MAX_MOVES:
            lines.append("*最大手数に到達したため引き分け")
        lines.append(f"{plies + 1:>4} {word}{_TIME}")
    lines += _summary_lines(record, plies, (black_key, white_key))
    return "\n".join(lines) + "\n"


def board_diagram(position: Position) -> list[str]:
    """The KIF board diagram of a position: 持駒 lines, nine `|...|` rows, the side to move."""
    black_hand, white_hand = position.hand_counts()
    lines = [f"後手の持駒：{_hand_text(white_hand)}", "  ９ ８ ７ ６ ５ ４ ３ ２ １", "+" + "-" * 27 + "+"]
    codes = position.piece_codes()
    for rank in range(9):
        cells = ""
        for code in codes[rank * 9:(rank + 1) * 9]:
            if code == 0:
                cells += " ・"
            else:
                white, piece_type = divmod(code - 1, 14)
                cells += ("v" if white else " ") + ja.BOARD_NAMES[piece_type + 1]
        lines.append(f"|{cells}|{ja.KANJI_DIGITS[rank + 1]}")
    lines += ["+" + "-" * 27 + "+", f"先手の持駒：{_hand_text(black_hand)}"]
    return lines + (["後手番"] if position.turn == WHITE else [])


def _hand_text(counts: tuple[int, ...]) -> str:
    parts = [ja.PIECE_NAMES[t] + (ja.kanji_number(n) if n > 1 else "")
             for t, n in zip((1, 2, 3, 4, 5, 6, 7), counts) if n]
    return "　".join(reversed(parts)) or "なし"


def move_text(position: Position, usi: str, previous: str) -> str:
    """KIF text of a legal USI move before it is played: `７六歩(77)`, `同　銀(31)`, `５五角打`."""
    to = usi[2:4]
    where = "同　" if to == previous else ja.square_text(int(to[0]), ord(to[1]) - ord("a") + 1)
    if usi[1] == "*":
        return f"{where}{ja.PIECE_NAMES['PLNSGBR'.index(usi[0]) + 1]}打"
    found = position.piece_type_at(usi_square_index(usi[:2]))
    if found is None:
        raise IllegalMoveError(f"no piece on {usi[:2]}")
    piece_type, colour = found
    suffix = "成" if usi.endswith("+") else ""
    if not suffix and piece_type in (1, 2, 3, 4, 6, 7) and _in_zone(usi, colour):
        suffix = "不成"
    return f"{where}{ja.PIECE_NAMES[piece_type]}{suffix}({usi[0]}{ord(usi[1]) - ord('a') + 1})"


def _in_zone(usi: str, colour: int) -> bool:
    ranks = (ord(usi[1]) - ord("a") + 1, ord(usi[3]) - ord("a") + 1)
    return any(r <= 3 for r in ranks) if colour == BLACK else any(r >= 7 for r in ranks)


def _ending_word(record: GameRecord, turn: int) -> str:
    if record.ending is Ending.ILLEGAL_MOVE:
        to_move = Winner.BLACK if turn == BLACK else Winner.WHITE
        return "反則勝ち" if record.winner is to_move else "反則負け"
    if record.ending is Ending.FORFEIT:
        to_move = Winner.BLACK if turn == BLACK else Winner.WHITE
        return "不戦勝" if record.winner is to_move else "不戦敗"
    return _ENDING_WORDS.get(record.ending, "")


def _summary_lines(record: GameRecord, plies: int, keys: tuple[str, str]) -> list[str]:
    if record.winner in (Winner.BLACK, Winner.WHITE):
        side = keys[0] if record.winner is Winner.BLACK else keys[1]
        kind = "反則勝ち" if record.ending is Ending.ILLEGAL_MOVE else "勝ち"
        return [f"まで{plies}手で{side}の{kind}"]
    if record.winner is Winner.DRAW:
        return [f"まで{plies}手で{'千日手' if record.ending is Ending.SENNICHITE else '持将棋'}"]
    return [f"まで{plies}手で中断"] if record.ending in (Ending.INTERRUPTED, Ending.MATTA) else []


__all__ = ["GameState", "board_diagram", "destination", "finish_game", "format_kif", "move_text", "parse",
           "read_games", "start_sfen", "usi_square_index"]
