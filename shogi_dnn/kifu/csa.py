"""CSA records (V2, V2.1, V2.2 and V3.0) -> GameRecord, and GameRecord -> CSA V2.2 (`format_csa`).

Covered: `N+`/`N-` names, `$EVENT` (other `$` keys are read and ignored), start positions given by
`PI` (with removed pieces: handicaps), `P1`..`P9` rows (3-character or single-space cells; text after
nine 3-character cells is ignored, as cshogi does, unless it reads as a tenth cell), `P+`/`P-`
piece lines including `00AL`, the `+`/`-` side to move, `'` comments (floodgate's `'black_rate:`,
`'white_rate:`, `'summary:` and `'** <score> <pv>` engine evaluations, see shogi_dnn.kifu.evals),
`T` time lines (V3.0 fractions too), several statements on one line separated by commas, several
games in one file separated by a `/` line, every `%` special move, and
Shogi Wars' non-standard endings (`SENTE_WIN_TORYO`, `GOTE_WIN_TIMEOUT`, `DRAW_SENNICHI`, ...).

Results: the `%` ending decides (a floodgate `'summary:` line that contradicts it is ignored); the
summary is used only when there is no `%` ending, its entries matched to the players by the `N+`/`N-`
names (not by their order); a summary that names neither player order makes the game a KifuError.
Every move is replayed with `shogi_dnn.rules` and checked legal; a bad game is yielded as a
KifuError (file, line, ply) and parsing continues with the next game of the file.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterator

from shogi_dnn import rules
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu.evals import csa_comment_eval, evals_by_position
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules.native import csa_position_factory, move_line_counter

# CSA piece names in python-shogi type order (1 FU .. 8 OU, 9 TO .. 14 RY), see shogi_dnn.rules.
CSA_PIECES = ("FU", "KY", "KE", "GI", "KI", "KA", "HI", "OU", "TO", "NY", "NK", "NG", "UM", "RY")
PIECE_TYPE = {name: index + 1 for index, name in enumerate(CSA_PIECES)}
PROMOTED = {1: 9, 2: 10, 3: 11, 4: 12, 6: 13, 7: 14}      # piece type -> promoted piece type
UNPROMOTED = {v: k for k, v in PROMOTED.items()}
SFEN_LETTERS = "PLNSGBRK"                                  # python-shogi types 1..8
PIECE_TOTALS = {1: 18, 2: 4, 3: 4, 4: 4, 5: 4, 6: 2, 7: 2, 8: 2}
USI_DROP_LETTER = {t: SFEN_LETTERS[t - 1] for t in rules.HAND_PIECE_TYPES}

# Handicap boards (SFEN board field; the giver, White, moves first) by their 手合割 name, as KIF uses.
HANDICAP_BOARDS = {
    "lnsgkgsn1/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "香落ち",
    "1nsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "右香落ち",
    "lnsgkgsnl/1r7/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "角落ち",
    "lnsgkgsnl/7b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "飛車落ち",
    "lnsgkgsn1/7b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "飛香落ち",
    "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "二枚落ち",
    "lnsgkgsn1/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "三枚落ち",
    "1nsgkgsn1/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "四枚落ち",
    "2sgkgsn1/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "五枚落ち",
    "1nsgkgs2/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "左五枚落ち",
    "2sgkgs2/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "六枚落ち",
    "3gkg3/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "八枚落ち",
    "4k4/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL": "十枚落ち",
}


class Loser(enum.Enum):
    """Who loses, relative to the side to move when the special move is recorded."""

    SIDE_TO_MOVE = "side_to_move"
    LAST_MOVER = "last_mover"
    BLACK = "black"
    WHITE = "white"
    NOBODY = "nobody"            # a draw
    UNKNOWN = "unknown"          # no result (interrupted)
    CHECKING_SIDE = "checking"   # perpetual check: decided from the final position


# `%` special moves: token -> (ending, who loses). CSA V2.2 section 4 and V3.0.
SPECIAL_MOVES: dict[str, tuple[Ending, Loser]] = {
    "%TORYO": (Ending.RESIGN, Loser.SIDE_TO_MOVE),
    "%TSUMI": (Ending.CHECKMATE, Loser.SIDE_TO_MOVE),          # the side that gave mate won
    "%SENNICHITE": (Ending.SENNICHITE, Loser.NOBODY),
    "%OUTE_SENNICHITE": (Ending.OUTE_SENNICHITE, Loser.CHECKING_SIDE),
    "%KACHI": (Ending.ENTERING_KING, Loser.LAST_MOVER),        # side to move declares and wins
    "%JISHOGI": (Ending.JISHOGI, Loser.NOBODY),
    "%HIKIWAKE": (Ending.DRAW, Loser.NOBODY),
    "%MAX_MOVES": (Ending.MAX_MOVES, Loser.NOBODY),
    "%TIME_UP": (Ending.TIME_UP, Loser.SIDE_TO_MOVE),
    "%ILLEGAL_MOVE": (Ending.ILLEGAL_MOVE, Loser.SIDE_TO_MOVE),
    "%+ILLEGAL_ACTION": (Ending.ILLEGAL_MOVE, Loser.BLACK),
    "%-ILLEGAL_ACTION": (Ending.ILLEGAL_MOVE, Loser.WHITE),
    "%CHUDAN": (Ending.INTERRUPTED, Loser.UNKNOWN),
    "%MATTA": (Ending.MATTA, Loser.UNKNOWN),
    "%ERROR": (Ending.INTERRUPTED, Loser.UNKNOWN),
    "%FUZUMI": (Ending.INTERRUPTED, Loser.UNKNOWN),            # tsume problems: "no mate"
}
ILLEGAL_ENDINGS = ("%ILLEGAL_MOVE", "%+ILLEGAL_ACTION", "%-ILLEGAL_ACTION")

# Shogi Wars exports end with `<SENTE|GOTE>_WIN_<KIND>` or `DRAW_<KIND>` (sometimes with a `%`).
WARS_ENDING = re.compile(r"^%?(SENTE_WIN|GOTE_WIN|DRAW)_([A-Z_]+)$")
WARS_KINDS = {
    "TORYO": Ending.RESIGN,
    "CHECKMATE": Ending.CHECKMATE,
    "TIMEOUT": Ending.TIME_UP,
    "DISCONNECT": Ending.TIME_UP,          # the loser's connection dropped: lost on time
    "ENTERINGKING": Ending.ENTERING_KING,
    "TRY": Ending.ENTERING_KING,           # try rule: the king reached the opponent's king square
    "OUTE_SENNICHI": Ending.OUTE_SENNICHITE,
    "SENNICHI": Ending.SENNICHITE,
    "PLY_LIMIT": Ending.MAX_MOVES,
    "INVALID": Ending.DRAW,
    "PLAYER_DISCONNECT": Ending.DRAW,
    "TIMEOUT_DRAW": Ending.DRAW,
}

# floodgate `'summary:<kind>:<black> <win|lose|draw>:<white> <win|lose|draw>` kinds.
SUMMARY_KINDS = {
    "toryo": Ending.RESIGN,
    "tsumi": Ending.CHECKMATE,
    "time up": Ending.TIME_UP,
    "illegal move": Ending.ILLEGAL_MOVE,
    "uchifuzume": Ending.ILLEGAL_MOVE,
    "oute_kaihimore": Ending.ILLEGAL_MOVE,
    "sennichite": Ending.SENNICHITE,
    "oute_sennichite": Ending.OUTE_SENNICHITE,
    "kachi": Ending.ENTERING_KING,
    "max_moves": Ending.MAX_MOVES,
    "jishogi": Ending.JISHOGI,
}

# CSA square `77` -> (square index, USI square `7g`).
_SQUARES = {f"{f}{r}": (rules.square_index(f, r), rules.square_usi(f, r)) for f in range(1, 10) for r in range(1, 10)}
_TIME = re.compile(r"^T\d*(\.\d*)?$")
_WARS_TIME = re.compile(r"^L\d+$")
_TOKEN_SPLIT = re.compile(r"[,\s]+")
# Consecutive lines that each hold one well-formed move (`+7776FU`): parse's hot path.
_MOVE_RUN = re.compile(r"(?:[+-][0-9]{4}[A-Z]{2}\n)+")


@dataclasses.dataclass
class _Game:
    """What one game's lines said, before the position is built and the moves replayed."""

    start_line: int
    black: str = ""
    white: str = ""
    event: str = ""
    black_rating: float | None = None
    white_rating: float | None = None
    pi: tuple[int, str] | None = None                       # (line, removed pieces after "PI")
    rows: dict[int, tuple[int, str]] = dataclasses.field(default_factory=dict)   # rank -> (line, text)
    piece_lines: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)  # (line, colour, text)
    turn: int | None = None
    # The move tokens (`+7776FU`, 7 characters), each followed by "\n", in chunks as read (a run of
    # move lines is kept as the text the reader matched; `moves` splits them only when asked).
    move_text: list[str] = dataclasses.field(default_factory=list)
    move_count: int = 0
    move_lines: list[int] = dataclasses.field(default_factory=list)            # the line of each
    ending: tuple[int, str] | None = None
    summary: str = ""
    summary_line: int = 0
    evals: dict[int, int] = dataclasses.field(default_factory=dict)   # position index -> Black-view score
    pending: str = ""                                        # header whose value is on the next line
    repairs: list[str] = dataclasses.field(default_factory=list)   # GameRecord.repairs
    has_content: bool = False                                # anything beyond comments and a version
    error: KifuError | None = None

    @property
    def moves(self) -> list[str]:
        """The move tokens in order."""
        return "".join(self.move_text).split("\n")[:-1]

    def add_move(self, token: str, number: int) -> None:
        """One move token (7 characters) read on line `number`."""
        self.move_text.append(token + "\n")
        self.move_count += 1
        self.move_lines.append(number)


def parse(text: str, path: str) -> Iterator[GameRecord | KifuError]:
    """Yield each game of a CSA file: a GameRecord, or a KifuError for a game that cannot be read.

    Args:
        text: the decoded file (see shogi_dnn.kifu.text.decode_record); '\\n' or '\\r\\n' line ends.
        path: file name used in records and errors.

    Never raises on bad input: a bad game becomes a yielded KifuError naming the file, line and
    (for a move) ply, and parsing goes on with the next game after the `/` separator.
    """
    game: _Game | None = None
    found = 0
    new_game_position = csa_position_factory()
    # Lines are cut one at a time (str.find), not by text.split: the runs of move lines, most of a
    # record, are taken whole below and never become one string a line.
    length, find, match_run, count_run = len(text), text.find, _MOVE_RUN.match, move_line_counter()
    index, offset = 0, 0                  # the line's index and the offset of its first character
    while offset <= length:
        end = find("\n", offset)
        if end < 0:
            end = length
        raw = text[offset:end]
        number = index + 1
        # The hot path (most lines of a record): moves alone on their lines, in a game's move list,
        # taken as one run of well-formed lines by a regex (a move line it does not match goes alone).
        if len(raw) == 7 and raw[0] in "+-" and game is not None and game.ending is None \
                and game.error is None and game.has_content and not game.pending:
            if count_run is not None:                              # the regex's lines, counted in C
                count = count_run(text, offset)
                chunk = text[offset:offset + 8 * count] if count else raw + "\n"
            else:
                run = match_run(text, offset)
                chunk = run.group() if run else raw + "\n"       # lines of 7 characters and "\n"
            count = len(chunk) >> 3
            game.move_text.append(chunk)
            game.move_count += count
            game.move_lines += range(number, number + count)
            index += count
            offset += 8 * count
            continue
        index += 1
        offset = end + 1
        line = raw.strip()
        if not line:
            continue
        if line[0] == "'" and game is not None:      # a comment in a game: what _read_line would do
            if line[1:2] in _COMMENT_HEADS and game.error is None:
                _read_comment(game, line[1:], number)
            continue
        if game is not None and (line == "/" or (game.move_count or game.ending is not None)
                                 and line.startswith(_NEW_GAME_HEADS)):      # as _starts_new_game
            if game.has_content or game.error is not None:
                found += 1
                yield _finish(game, path, new_game_position)
            game = None
        if line == "/":
            continue
        if game is None:
            game = _Game(start_line=number)
        if game.error is None:
            try:
                _read_line(game, line, number, path)
            except KifuError as exc:
                game.error = exc
    if game is not None and (game.has_content or game.error is not None):
        found += 1
        yield _finish(game, path, new_game_position)
    if not found:
        yield KifuError(path, 1, "no CSA game in the file (only comments or blank lines)")


_NEW_GAME_HEADS = ("V1", "V2", "V3", "N+")


def _starts_new_game(game: _Game, line: str) -> bool:
    """A version or black-name line after moves starts the next game even without a `/` line."""
    return (bool(game.move_count) or game.ending is not None) and line.startswith(_NEW_GAME_HEADS)


def _finish(game: _Game, path: str, new_game_position) -> GameRecord | KifuError:
    if game.error is not None:
        return game.error
    try:
        return _build_record(game, path, new_game_position)
    except KifuError as exc:
        return exc


def _read_line(game: _Game, line: str, number: int, path: str) -> None:
    """Record what one (stripped, non-empty) line says into `game`; raise KifuError if it is bad."""
    head = line[0]
    if head == "'":
        _read_comment(game, line[1:], number)
        return
    if head == "V" and line[1:2].isdigit():
        return
    game.has_content = True
    pending, game.pending = game.pending, ""
    if len(line) == 7 and head in "+-" and game.ending is None:
        game.add_move(line, number)                  # a move on its own line (parse's fast path too)
        return
    if line in _ONE_TOKEN_LINES:                     # `+` (side to move), `%TORYO`: one statement
        _read_token(game, line, number, path)
        return
    if head in "+-%T" or head in "SGD" and WARS_ENDING.match(line):     # SENTE_/GOTE_WIN_, DRAW_
        # Statements are separated by commas (Shogi Wars: tabs); a `'` starts a trailing comment.
        statements, quote, comment = line.partition("'")
        for token in _TOKEN_SPLIT.split(statements):
            if token:
                _read_token(game, token, number, path)
        if quote:
            _read_eval(game, comment)         # `+7776FU,'** 30 -3334FU`
        return
    if (game.move_count or game.ending is not None) and (head in "$P" or line.startswith(("N+", "N-"))):
        raise KifuError(path, number, f"header line after the moves: {line[:40]!r}")
    if line.startswith(("N+", "N-")):
        _set_header(game, line[:2], line[2:].strip())
    elif head == "$":
        key, _, value = line[1:].partition(":")
        _set_header(game, key, value.strip())
    elif head == "P":
        _read_position_line(game, line, number, path)
    elif pending and not (game.move_count or game.ending is not None):   # value on the next line
        _set_header(game, pending, line)
    else:
        raise KifuError(path, number, f"unrecognised line {line[:40]!r}")


_ONE_TOKEN_LINES = frozenset(("+", "-", *SPECIAL_MOVES))    # lines _TOKEN_SPLIT leaves whole


def _set_header(game: _Game, key: str, value: str) -> None:
    """Store a name or `$EVENT`; an empty value waits for the next line (game.pending)."""
    if not value:
        game.pending = key
    elif key == "N+":
        game.black = value
    elif key == "N-":
        game.white = value
    elif key == "EVENT":
        game.event = value


def _read_comment(game: _Game, comment: str, number: int = 0) -> None:
    """floodgate: `'black_rate:name+hash:3500.0`, `'white_rate:...`, `'summary:toryo:a win:b lose`,
    `'** 123 -3334FU` (an engine's evaluation, see shogi_dnn.kifu.evals)."""
    if comment[:1] not in _COMMENT_HEADS:          # most comments: none of these (one test, not four)
        return
    for key in ("black_rate:", "white_rate:"):
        if comment.startswith(key):
            try:
                rating = float(comment.rsplit(":", 1)[1])
            except ValueError:
                return
            if key[0] == "b":
                game.black_rating = rating
            else:
                game.white_rating = rating
            return
    if comment.startswith("summary:"):
        game.summary, game.summary_line = comment[len("summary:"):], number
    elif comment.startswith("**"):
        _read_eval(game, comment)


_COMMENT_HEADS = frozenset("bws*")       # the first letters of the comments _read_comment reads


def _read_eval(game: _Game, comment: str) -> None:
    """`'** <score> <pv>`: the Black-view score of the position reached so far (the first one wins).

    Comments after the ending are not read; a malformed score is no evaluation.
    """
    if game.ending is not None:
        return
    score = csa_comment_eval(comment)
    if score is not None:
        game.evals.setdefault(game.move_count, score)


def _read_position_line(game: _Game, line: str, number: int, path: str) -> None:
    kind = line[1:2]
    if kind == "I":
        game.pi = (number, line[2:].strip())
    elif kind and kind in "123456789":
        game.rows[int(kind)] = (number, line[2:])
    elif kind and kind in "+-":
        game.piece_lines.append((number, rules.BLACK if kind == "+" else rules.WHITE, line[2:].strip()))
    else:
        raise KifuError(path, number, f"unrecognised position line {line[:40]!r}")


def _read_token(game: _Game, token: str, number: int, path: str) -> None:
    """One statement of a move line: a move, a side to move, a time, or an ending."""
    if token in ("+", "-"):
        if game.move_count or game.ending is not None:
            raise KifuError(path, number, f"side-to-move line {token!r} after the moves")
        game.turn = rules.BLACK if token == "+" else rules.WHITE
    elif _TIME.match(token) or _WARS_TIME.match(token):
        return
    elif token[0] == "%" and token in SPECIAL_MOVES or WARS_ENDING.match(token):
        if game.ending is None:                 # a second ending (e.g. %TORYO then %CHUDAN) is ignored
            game.ending = (number, token)
    elif token[0] in "+-" and len(token) == 7:
        if game.ending is not None:
            raise KifuError(path, number, f"move {token} after the end of the game ({game.ending[1]})")
        game.add_move(token, number)
    else:
        raise KifuError(path, number, f"unrecognised statement {token[:40]!r}")


# --- start position -------------------------------------------------------------------------------

def _standard_codes() -> list[int]:
    return rules.ShogiPosition(STANDARD_START_SFEN).piece_codes()   # no backend choice at import


STANDARD_CODES = _standard_codes()


_PI_STARTS: dict[tuple[str | None, int | None, bool], tuple[str, str]] = {}   # _start_position of PI games
_PI_STARTS_MAX = 1024


def _start_position(game: _Game, path: str) -> tuple[str, str]:
    """(start SFEN, handicap name) from the PI / P1..P9 / P+ P- lines and the side to move.
    Games given by a `PI` line alone (nearly all) are looked up once per distinct line and side."""
    if game.rows or game.piece_lines:
        return _build_start_position(game, path)
    key = (None if game.pi is None else game.pi[1], game.turn, bool(game.move_count) and game.move_text[0][0] == "-")
    start = _PI_STARTS.get(key)
    if start is None:
        start = _build_start_position(game, path)          # raises for a bad PI line, naming it
        if len(_PI_STARTS) < _PI_STARTS_MAX:
            _PI_STARTS[key] = start
    return start


def _build_start_position(game: _Game, path: str) -> tuple[str, str]:
    if game.pi is not None and game.rows:
        raise KifuError(path, game.pi[0], "both PI and P1..P9 give the start position")
    if game.rows:
        board = _board_from_rows(game, path)
    elif game.pi is not None or not game.piece_lines:
        board = _board_from_pi(game.pi, path)
    else:
        board = [0] * rules.NUM_SQUARES          # only P+/P- lines: pieces placed one by one
    hands = [[0] * 9, [0] * 9]                   # [colour][piece type 1..8]
    _apply_piece_lines(game, board, hands, path)
    turn = game.turn
    if turn is None:                              # Shogi Wars and small test files omit the `+` line
        turn = rules.WHITE if game.move_count and game.move_text[0][0] == "-" else rules.BLACK
    sfen = _to_sfen(board, hands, turn)
    board_field = sfen.split(" ", 1)[0]
    handicap = HANDICAP_BOARDS.get(board_field, "") if not any(map(any, hands)) else ""
    if game.pi is not None and game.pi[1] and not handicap:
        handicap = "PI" + game.pi[1]
    return sfen, handicap


def _board_from_rows(game: _Game, path: str) -> list[int]:
    missing = [rank for rank in range(1, 10) if rank not in game.rows]
    if missing:
        raise KifuError(path, min(number for number, _ in game.rows.values()),
                        f"board rows P{missing[0]} missing")
    board = [0] * rules.NUM_SQUARES
    for rank, (number, text) in sorted(game.rows.items()):
        board[(rank - 1) * 9:rank * 9], repair = _parse_row(text, number, path)
        if repair:
            game.repairs.append(f"{REPAIRED_ROW} P{rank} line {number}: {repair}")
    return board


REPAIRED_ROW = "csa_board_row"     # the kind of repair a GameRecord.repairs entry names (see _parse_row)


def _parse_row(text: str, number: int, path: str) -> tuple[list[int], str]:
    """9 piece codes (file 9 first) from a `P1` row, and '' or what was repaired; cells are ` * ` or
    `+FU`, any spacing.

    Read as cshogi reads a row (nine cells at fixed columns), where the meaning is unambiguous: text
    after nine well-formed 3-character cells is ignored (`P1-KY-KE-GI-KI-OU-KI-GI-KE-KY *.` is the
    even-game rank 1), and a last cell written ` *` followed by another character (` *.`, ` *\t`,
    ` *x`) is the empty square cshogi reads there. Refused (as cshogi's undefined reading of them):
    text after the cells that starts like a tenth cell (`-KY`, ` * `, ` *` at the end of the line),
    since which cell is one too many cannot be told, and any other malformed cell.
    """
    try:
        cells = _row_cells(text, number, path)
    except KifuError as exc:
        fixed = _fixed_row(text)
        if fixed is None:
            raise
        if not fixed[0]:
            _refuse_extra_cell(text, number, path, exc)
        return fixed
    if len(cells) != 9:
        fixed = _fixed_row(text) if len(cells) > 9 else None
        if fixed and fixed[0]:
            return fixed
        raise KifuError(path, number, f"board row has {len(cells)} cells, expected 9")
    return cells, ""


def _row_cells(text: str, number: int, path: str) -> list[int]:
    """Every cell of a row, any spacing (KifuError at the first malformed one)."""
    cells: list[int] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in " \t":
            i += 1
        elif char == "*":
            cells.append(0)
            i += 1
        elif char in "+-" and text[i + 1:i + 3] in PIECE_TYPE:
            cells.append(PIECE_TYPE[text[i + 1:i + 3]] + (rules.NUM_PIECE_TYPES if char == "-" else 0))
            i += 3
        else:
            raise KifuError(path, number, f"bad board cell {text[i:i + 3]!r}")
    return cells


def _fixed_cell(cell: str) -> int | None:
    """A well-formed 3-character cell (` * `, `+FU`, `-KY`) -> piece code (0: empty); else None."""
    if cell == " * ":
        return 0
    if cell[:1] in ("+", "-") and cell[1:] in PIECE_TYPE:
        return PIECE_TYPE[cell[1:]] + (rules.NUM_PIECE_TYPES if cell[0] == "-" else 0)
    return None


def _fixed_row(text: str) -> tuple[list[int], str] | None:
    """The 9 cells at fixed columns, repaired as _parse_row says: (codes, what was repaired); ([], '')
    when the text after them starts like a tenth cell (ambiguous); None when the cells are not there."""
    if len(text) < 26:
        return None
    codes = [_fixed_cell(text[k:k + 3]) for k in range(0, 24, 3)]
    if any(code is None for code in codes):
        return None
    last, repair = _fixed_cell(text[24:27]), ""
    if last is None:
        if text[24:26] != " *" or text[26:27] in ("+", "-"):
            return None
        last, repair = 0, f"last cell {text[24:27]!r} read as empty"
    tail = text[27:]
    if tail:
        if _fixed_cell(tail[:3].ljust(3)) is not None:
            return [], ""
        repair = "; ".join(filter(None, (repair, f"text after the 9 cells ignored: {tail[:10]!r}")))
    return codes + [last], repair        # type: ignore[operator]


def _refuse_extra_cell(text: str, number: int, path: str, exc: KifuError) -> list[int]:
    raise KifuError(path, number, f"board row has text after its 9 cells that reads as a 10th cell "
                                  f"{text[27:30]!r}: which cell is extra cannot be told") from exc


def _board_from_pi(pi: tuple[int, str] | None, path: str) -> list[int]:
    """The even-game board with the pieces listed after `PI` (e.g. `82HI22KA`) removed."""
    board = list(STANDARD_CODES)
    if pi is None:
        return board
    number, removed = pi
    if len(removed) % 4:
        raise KifuError(path, number, f"bad PI piece list {removed!r}")
    for k in range(0, len(removed), 4):
        square, name = removed[k:k + 2], removed[k + 2:k + 4]
        index = _square(square, number, path)
        code = board[index]
        if name not in PIECE_TYPE or code == 0 or (code - 1) % rules.NUM_PIECE_TYPES + 1 != PIECE_TYPE[name]:
            raise KifuError(path, number, f"PI removes {square}{name} but that square does not hold it")
        board[index] = 0
    return board


def _square(text: str, number: int, path: str) -> int:
    if len(text) != 2 or not text.isdigit() or "0" in text:
        raise KifuError(path, number, f"bad square {text!r}")
    return rules.square_index(int(text[0]), int(text[1]))


def _apply_piece_lines(game: _Game, board: list[int], hands: list[list[int]], path: str) -> None:
    """`P+63TO00KI` places pieces and fills hands; `P-00AL` gives that side every piece left over."""
    all_to: int | None = None
    for number, colour, text in game.piece_lines:
        if len(text) % 4:
            raise KifuError(path, number, f"bad piece list {text!r}")
        for k in range(0, len(text), 4):
            square, name = text[k:k + 2], text[k + 2:k + 4]
            if square == "00" and name == "AL":
                all_to = colour
                continue
            piece = PIECE_TYPE.get(name)
            if piece is None:
                raise KifuError(path, number, f"unknown piece {name!r}")
            if square == "00":
                if piece not in rules.HAND_PIECE_TYPES:
                    raise KifuError(path, number, f"{name} cannot be held in hand")
                hands[colour][piece] += 1
            else:
                board[_square(square, number, path)] = piece + rules.NUM_PIECE_TYPES * colour
    used = _piece_counts(board, hands)
    for piece, total in PIECE_TOTALS.items():
        if used[piece] > total:
            line = game.piece_lines[0][0] if game.piece_lines else game.start_line
            raise KifuError(path, line, f"too many {CSA_PIECES[piece - 1]} pieces ({used[piece]} > {total})")
        if all_to is not None and piece != 8:
            hands[all_to][piece] += total - used[piece]


def _piece_counts(board: list[int], hands: list[list[int]]) -> dict[int, int]:
    counts = {piece: hands[0][piece] + hands[1][piece] for piece in PIECE_TOTALS}
    for code in board:
        if code:
            piece = (code - 1) % rules.NUM_PIECE_TYPES + 1
            counts[UNPROMOTED.get(piece, piece)] += 1
    return counts


def _to_sfen(board: list[int], hands: list[list[int]], turn: int) -> str:
    """SFEN of a CSA start position; `hands[colour][piece type]` counts."""
    black, white = ([hands[colour][t] for t in rules.HAND_PIECE_TYPES] for colour in (rules.BLACK, rules.WHITE))
    return rules.format_sfen(board, black, white, turn)


# --- moves and result ------------------------------------------------------------------------------

def _build_record(game: _Game, path: str, new_game_position=None) -> GameRecord:
    start_sfen, handicap = _start_position(game, path)
    try:
        position = (new_game_position or csa_position_factory())(start_sfen)
    except rules.IllegalMoveError as exc:
        raise KifuError(path, game.start_line, f"bad start position: {exc}") from exc
    moves = _replay(game, position, path)
    winner, ending = _result(game, position, path)
    codes = getattr(position, "move_codes", None)            # rules.native: the moves' codes at hand
    codes = codes() if codes is not None else None
    return GameRecord(
        start_sfen=start_sfen, moves=tuple(moves), winner=winner, ending=ending,
        source=SourceLine(path, game.start_line), format="csa", black=game.black, white=game.white,
        black_rating=game.black_rating, white_rating=game.white_rating, handicap=handicap,
        event=game.event, evals=evals_by_position(game.evals, start_sfen, len(moves)),
        repairs=tuple(game.repairs), move_codes=codes if codes is not None and len(codes) == len(moves) else None)


def _replay(game: _Game, position: rules.Position, path: str) -> list[str]:
    """Play every move on `position` (legality checked by push_usi); USI moves in order.

    A position with `push_csa_moves` (rules.native's compiled checker, or the cshogi backend) plays runs
    of moves in one call (rules.native's `push_csa_text` the whole move text as read, first); the move it
    stops at (malformed, illegal, by the wrong side) is played here the reference way, which gives
    the error (or plays it, should the fast path be stricter), and the run goes on after it.
    A last move that is illegal and followed by %ILLEGAL_MOVE / %±ILLEGAL_ACTION is the recorded
    offence, not a broken record: it is dropped, and the ending decides the result.
    """
    usi_moves: list[str] = []
    ply = 0
    whole = getattr(position, "push_csa_text", None)
    if whole is not None and game.move_count:
        usi_moves = whole("".join(game.move_text), game.move_count)
        ply = len(usi_moves)
        if ply == game.move_count:
            return usi_moves
    tokens = game.moves
    fast = getattr(position, "push_csa_moves", None)
    tried = whole is not None          # the fast path just stopped at this ply: the reference's move
    while ply < len(tokens):
        if fast is not None and not tried:
            played = fast(tokens[ply:] if ply else tokens)
            usi_moves += played
            ply += len(played)
            if ply == len(tokens):
                break
        tried = False
        token = tokens[ply]
        ply += 1
        try:
            usi = csa_move_to_usi(position, token)
            position.push_usi(usi)
        except rules.IllegalMoveError as exc:
            if ply == len(tokens) and game.ending is not None and game.ending[1] in ILLEGAL_ENDINGS:
                break
            raise KifuError(path, game.move_lines[ply - 1], f"{token}: {exc}", ply) from exc
        usi_moves.append(usi)
    return usi_moves


def csa_move_to_usi(position: rules.Position, token: str) -> str:
    """`+7776FU` -> `7g7f`, `+8822UM` -> `8h2b+`, `-0055KA` -> `B*5e`, read against `position`.

    Raises:
        rules.IllegalMoveError: malformed, by the side not to move, or naming the wrong piece.
    """
    # The hot path of the reader: plain dict look-ups, no regex (legality is push_usi's job).
    to = _SQUARES.get(token[3:5])
    piece = PIECE_TYPE.get(token[5:])
    if len(token) != 7 or token[0] not in "+-" or to is None or piece is None:
        raise rules.IllegalMoveError(f"malformed move {token!r}")
    colour = rules.BLACK if token[0] == "+" else rules.WHITE
    if colour != position.turn:
        raise rules.IllegalMoveError("move by the side not to move")
    if token[1:3] == "00":
        if piece not in USI_DROP_LETTER:
            raise rules.IllegalMoveError(f"{token[5:]} cannot be dropped")
        return f"{USI_DROP_LETTER[piece]}*{to[1]}"
    origin = _SQUARES.get(token[1:3])
    if origin is None:
        raise rules.IllegalMoveError(f"malformed move {token!r}")
    here = position.piece_type_at(origin[0])
    if here is None or here[1] != colour:
        raise rules.IllegalMoveError(f"no piece of the mover on {token[1:3]}")
    if here[0] == piece:
        return origin[1] + to[1]
    if PROMOTED.get(here[0]) == piece:
        return origin[1] + to[1] + "+"
    raise rules.IllegalMoveError(f"{token[1:3]} holds {CSA_PIECES[here[0] - 1]}, not {token[5:]}")


def _result(game: _Game, position: rules.Position, path: str) -> tuple[Winner, Ending]:
    """Winner and ending: the `%`/Shogi Wars ending first, else a floodgate summary, else none."""
    if game.ending is None:
        return _summary_result(game, path)
    number, token = game.ending
    special = SPECIAL_MOVES.get(token)
    if special is None:
        return _wars_result(WARS_ENDING.match(token), number, path)     # _read_token matched it
    ending, loser = special
    return special_move_winner(loser, position), ending


def special_move_winner(loser: Loser, position: rules.Position) -> Winner:
    """The winner implied by a special move's `Loser` rule in the position where it is recorded."""
    to_move = Winner.BLACK if position.turn == rules.BLACK else Winner.WHITE
    last_mover = Winner.WHITE if to_move is Winner.BLACK else Winner.BLACK
    if loser is Loser.CHECKING_SIDE:
        # The repetition ends on a checking move (side to move in check) or on an escape (the side
        # to move is the one that has been checking).
        loser = Loser.LAST_MOVER if in_check(position.piece_codes(), position.turn) else Loser.SIDE_TO_MOVE
    if loser is Loser.SIDE_TO_MOVE:
        return last_mover
    if loser is Loser.LAST_MOVER:
        return to_move
    return _FIXED_WINNER[loser]


_FIXED_WINNER = {Loser.BLACK: Winner.WHITE, Loser.WHITE: Winner.BLACK, Loser.NOBODY: Winner.DRAW,
                 Loser.UNKNOWN: Winner.UNKNOWN}


def _wars_result(match: re.Match[str], number: int, path: str) -> tuple[Winner, Ending]:
    side, kind = match.groups()
    ending = WARS_KINDS.get(kind)
    if side == "DRAW":
        return Winner.DRAW, ending or Ending.DRAW
    if ending is None:
        raise KifuError(path, number, f"unknown Shogi Wars ending {match.group(0)!r}")
    return (Winner.BLACK if side == "SENTE_WIN" else Winner.WHITE), ending


def _summary_result(game: _Game, path: str) -> tuple[Winner, Ending]:
    """A floodgate summary `summary:toryo:alice win:bob lose` -> (winner, ending); no summary or an
    unknown kind -> no result.

    shogi-server writes Black's entry first, but the line names the players, so each entry is matched
    against the `N+`/`N-` names rather than trusted by position (a record with the entries swapped
    still gets the right winner). Entries that match neither order of the players (no names, other
    names, or one name for both players with a win/lose outcome, whose order cannot be told) cannot
    label the game: KifuError naming the summary line (only used when there is no `%` ending).
    """
    parts = game.summary.split(":")
    ending = SUMMARY_KINDS.get(parts[0].strip()) if len(parts) >= 3 else None
    if ending is None:
        return Winner.UNKNOWN, Ending.NONE
    entries = [part.strip().rsplit(" ", 1) for part in parts[1:3]]
    if any(len(entry) != 2 for entry in entries):
        return Winner.UNKNOWN, Ending.NONE
    (first, first_outcome), (second, second_outcome) = ((n.strip(), o.strip()) for n, o in entries)
    outcome = {("win", "lose"): "first", ("lose", "win"): "second", ("draw", "draw"): "draw"}.get(
        (first_outcome, second_outcome))
    if outcome is None:
        return Winner.UNKNOWN, Ending.NONE
    if outcome == "draw" and {first, second} == {game.black, game.white}:
        return Winner.DRAW, ending
    names = (first, second)
    if names == (game.black, game.white) and game.black != game.white:
        first_is = Winner.BLACK
    elif names == (game.white, game.black) and game.black != game.white:
        first_is = Winner.WHITE
    else:
        same = " (the same name for both players: the order cannot be told)" if game.black == game.white else ""
        raise KifuError(path, game.summary_line or game.start_line,
                        f"summary names {first!r} and {second!r} do not match the players "
                        f"N+{game.black!r} N-{game.white!r}{same}; no % ending: the result is unknown")
    other = Winner.WHITE if first_is is Winner.BLACK else Winner.BLACK
    return (first_is if outcome == "first" else other), ending


# Piece moves for the check test: (steps, slides) as (file delta, forward delta); forward is towards
# the opponent. Files are symmetric, so a step and its mirror are both listed.
_GOLD_STEPS = ((0, 1), (1, 1), (-1, 1), (1, 0), (-1, 0), (0, -1))
_DIAGONALS = ((1, 1), (-1, 1), (1, -1), (-1, -1))
_ORTHOGONALS = ((0, 1), (0, -1), (1, 0), (-1, 0))
_PIECE_MOVES: dict[int, tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]] = {
    1: (((0, 1),), ()),
    2: ((), ((0, 1),)),
    3: (((1, 2), (-1, 2)), ()),
    4: (((0, 1), (1, 1), (-1, 1), (1, -1), (-1, -1)), ()),
    5: (_GOLD_STEPS, ()),
    6: ((), _DIAGONALS),
    7: ((), _ORTHOGONALS),
    8: (_DIAGONALS + _ORTHOGONALS, ()),
    9: (_GOLD_STEPS, ()), 10: (_GOLD_STEPS, ()), 11: (_GOLD_STEPS, ()), 12: (_GOLD_STEPS, ()),
    13: (_ORTHOGONALS, _DIAGONALS),
    14: (_DIAGONALS, _ORTHOGONALS),
}


def in_check(codes: list[int], colour: int) -> bool:
    """True when `colour`'s king is attacked in `codes` (81 piece codes, see rules.piece_codes)."""
    king_code = 8 + rules.NUM_PIECE_TYPES * colour
    if king_code not in codes:
        return False
    king = codes.index(king_code)
    for index, code in enumerate(codes):
        if code == 0 or (code - 1) // rules.NUM_PIECE_TYPES == colour:
            continue
        piece = (code - 1) % rules.NUM_PIECE_TYPES + 1
        if _attacks(codes, index, piece, 1 - colour, king):
            return True
    return False


def _attacks(codes: list[int], index: int, piece: int, colour: int, target: int) -> bool:
    rank, column = divmod(index, 9)
    forward = -1 if colour == rules.BLACK else 1          # Black moves towards rank a (row 0)
    steps, slides = _PIECE_MOVES[piece]
    for d_col, d_fwd in steps:
        r, c = rank + d_fwd * forward, column + d_col
        if 0 <= r < 9 and 0 <= c < 9 and r * 9 + c == target:
            return True
    for d_col, d_fwd in slides:
        r, c = rank + d_fwd * forward, column + d_col
        while 0 <= r < 9 and 0 <= c < 9:
            if r * 9 + c == target:
                return True
            if codes[r * 9 + c]:
                break
            r, c = r + d_fwd * forward, c + d_col
    return False


# --- writer ----------------------------------------------------------------------------------------

def format_csa(record: GameRecord) -> str:
    """Write `record` as a CSA V2.2 game: names, event, ratings, start position, moves, ending.

    The start position is `PI` (with removed pieces for a standard handicap board) when it is one,
    else P1..P9 rows with P+/P- hand lines. CSA has no move number, so a start SFEN read back has
    move number 1. MAX_MOVES is written as `%MAX_MOVES` (the CSA V3.0 marker, read by `parse`).

    Raises:
        ValueError: a move is illegal, or the winner cannot be expressed with the record's ending
            (e.g. RESIGN won by the side to move).
    """
    lines = ["V2.2", f"N+{record.black}", f"N-{record.white}"]
    if record.event:
        lines.append(f"$EVENT:{record.event}")
    if record.black_rating is not None:
        lines.append(f"'black_rate:{record.black}:{record.black_rating}")
    if record.white_rating is not None:
        lines.append(f"'white_rate:{record.white}:{record.white_rating}")
    lines += _position_lines(record.start_sfen)
    position = rules.new_position(record.start_sfen)
    for usi in record.moves:
        lines.append(usi_to_csa_move(position, usi))
        position.push_usi(usi)
    if record.ending is not Ending.NONE:
        lines.append(_special_move(record, position))
    return "\n".join(lines) + "\n"


def usi_to_csa_move(position: rules.Position, usi: str) -> str:
    """`7g7f` -> `+7776FU` (sign of the side to move; the piece after the move), read against `position`."""
    sign = "+" if position.turn == rules.BLACK else "-"
    to = f"{usi[2]}{ord(usi[3]) - ord('a') + 1}"
    if usi[1] == "*":
        return f"{sign}00{to}{CSA_PIECES[SFEN_LETTERS.index(usi[0])]}"
    from_file, from_rank = int(usi[0]), ord(usi[1]) - ord("a") + 1
    here = position.piece_type_at(rules.square_index(from_file, from_rank))
    if here is None:
        raise ValueError(f"move {usi}: no piece on {usi[:2]}")
    piece = PROMOTED[here[0]] if usi.endswith("+") and here[0] in PROMOTED else here[0]
    return f"{sign}{from_file}{from_rank}{to}{CSA_PIECES[piece - 1]}"


def _position_lines(sfen: str) -> list[str]:
    _, turn, hand = sfen.split(" ")[:3]
    turn_line = "+" if turn == "b" else "-"
    codes = rules.new_position(sfen).piece_codes()
    if hand == "-" and all(c == s or (c == 0 and s > rules.NUM_PIECE_TYPES) for c, s in zip(codes, STANDARD_CODES)):
        removed = "".join(
            f"{9 - index % 9}{index // 9 + 1}{CSA_PIECES[(s - 1) % rules.NUM_PIECE_TYPES]}"
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
        pieces = "".join(f"00{CSA_PIECES[t - 1]}" * n for t, n in zip(rules.HAND_PIECE_TYPES, counts))
        if pieces:
            lines.append(f"P{sign}{pieces}")
    return lines + [turn_line]


def _special_move(record: GameRecord, position: rules.Position) -> str:
    """The `%` token for the record's ending whose implied winner is the record's winner."""
    for token, (ending, loser) in SPECIAL_MOVES.items():
        if ending is record.ending and special_move_winner(loser, position) is record.winner:
            return token
    raise ValueError(f"{record.source}: cannot write ending {record.ending.value} won by "
                     f"{record.winner.value} as CSA with {'black' if position.turn == 0 else 'white'} to move")
