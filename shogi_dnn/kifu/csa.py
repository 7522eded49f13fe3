"""CSA records (V2, V2.1, V2.2 and V3.0) -> GameRecord: the reader (`parse`).

Start positions: kifu/csa_board.py; the writer: kifu/csa_writer.py. Covered: `N+`/`N-`, `$EVENT` (other
`$` keys ignored), `PI`, `P1`..`P9`, `P+`/`P-` (`00AL`), the `+`/`-` side to move, `'` comments
(floodgate's ratings, `'summary:` and `'** <score>` evaluations: kifu/evals.py), `T` lines, comma-joined
statements, `/`-separated games, every `%` special move and Shogi Wars' endings (`SENTE_WIN_TORYO`, ...).

Results: the `%` ending decides; without one, the floodgate summary, its entries matched to the players
by name (a summary that matches neither order is a KifuError). Every move is replayed with
`shogi_dnn.rules` and checked legal.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterator

from shogi_dnn import rules
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu.csa_board import CSA_PIECES, PIECE_TYPE, StartLines, read_position_line, start_position
from shogi_dnn.kifu.evals import csa_comment_eval, csa_comment_wide_score, evals_by_position
from shogi_dnn.kifu.record import Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import HAND_PIECE_TYPES, PROMOTED, SFEN_PIECE, in_check
from shogi_dnn.rules.native import csa_position_factory, eval_run_reader, move_line_counter

USI_DROP_LETTER = {t: SFEN_PIECE[t] for t in HAND_PIECE_TYPES}       # the letter of a drop, P*5e


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
# The GameRecord.repairs kind of a score in full-width digits (`'** ９９`, evals.csa_comment_wide_score).
REPAIRED_EVAL = "csa_eval_digits"
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
_SQUARES = {f"{f}{r}": (rules.square_index(f, r), rules.square_usi(f, r))
            for f in range(1, 10) for r in range(1, 10)}
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
    start: StartLines = dataclasses.field(default_factory=StartLines)   # the PI, P1..P9, P+/P-, +/- lines
    # The move tokens (`+7776FU`, 7 characters), each followed by "\n", in chunks as read (a run of
    # move lines is kept as the text the reader matched; `moves` splits them only when asked).
    move_text: list[str] = dataclasses.field(default_factory=list)
    move_count: int = 0
    move_lines: list[int] = dataclasses.field(default_factory=list)            # the line of each
    ending: tuple[int, str] | None = None
    summary: str = ""
    summary_line: int = 0
    evals: dict[int, int] = dataclasses.field(default_factory=dict)   # position index -> Black-view score
    repairs: list[str] = dataclasses.field(default_factory=list)     # GameRecord.repairs beyond the board's
    pending: str = ""                                        # header whose value is on the next line
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
        text: the decoded file (kifu.text.decode_record); '\\n' or '\\r\\n' line ends.
        path: file name used in records and errors.

    Never raises on bad input: a bad game becomes a KifuError naming file, line and ply.
    """
    game: _Game | None = None
    found = 0
    new_game_position = csa_position_factory()
    # Lines are cut one at a time (str.find), not by text.split: the runs of move lines, most of a
    # record, are taken whole below and never become one string a line.
    length, find, match_run, count_run = len(text), text.find, _MOVE_RUN.match, move_line_counter()
    eval_run = eval_run_reader()
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
            if eval_run is not None:          # moves and plain `'** 123` comments, read in C
                chars, lines, chunk, numbers = eval_run(text, offset, number, game.move_count, game.evals)
                if lines:                     # (a run starts with its move: lines >= 1 means a move)
                    count = len(chunk) >> 3
                    game.move_text.append(chunk)
                    game.move_count += count
                    game.move_lines += range(number, number + count) if numbers is None else numbers
                    index += lines
                    offset += chars
                    continue
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
            _read_eval(game, comment, number)       # `+7776FU,'** 30 -3334FU`
        return
    if (game.move_count or game.ending is not None) and (head in "$P" or line.startswith(("N+", "N-"))):
        raise KifuError(path, number, f"header line after the moves: {line[:40]!r}")
    if line.startswith(("N+", "N-")):
        _set_header(game, line[:2], line[2:].strip())
    elif head == "$":
        key, _, value = line[1:].partition(":")
        _set_header(game, key, value.strip())
    elif head == "P":
        read_position_line(game.start, line, number, path)
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
        _read_eval(game, comment, number)


_COMMENT_HEADS = frozenset("bws*")       # the first letters of the comments _read_comment reads


def _read_eval(game: _Game, comment: str, number: int) -> None:
    """`'** <score> <pv>`: the Black-view score of the position reached so far (the first one wins); one in
    full-width digits is counted as a repair (REPAIRED_EVAL).
    """
    if game.ending is not None:
        return
    score = csa_comment_eval(comment)
    if score is not None:
        game.evals.setdefault(game.move_count, score)
    elif csa_comment_wide_score(comment):
        game.repairs.append(f"{REPAIRED_EVAL} line {number}: '{comment[:40]} has other than ASCII digits: "
                            "read as a comment, not an engine evaluation")


def _read_token(game: _Game, token: str, number: int, path: str) -> None:
    """One statement of a move line: a move, a side to move, a time, or an ending."""
    if token in ("+", "-"):
        if game.move_count or game.ending is not None:
            raise KifuError(path, number, f"side-to-move line {token!r} after the moves")
        game.start.turn = rules.BLACK if token == "+" else rules.WHITE
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


# --- moves and result ------------------------------------------------------------------------------

def _build_record(game: _Game, path: str, new_game_position=None) -> GameRecord:
    first_mover = rules.WHITE if game.move_count and game.move_text[0][0] == "-" else rules.BLACK
    start_sfen, handicap, repairs = start_position(game.start, first_mover, game.start_line, path)
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
        repairs=repairs + tuple(game.repairs),
        move_codes=codes if codes is not None and len(codes) == len(moves) else None)


def _replay(game: _Game, position: rules.Position, path: str) -> list[str]:
    """Play every move on `position` (legality checked by push_usi); USI moves in order.

    A position with `push_csa_moves` plays runs of moves in one call; the move it stops at is played here
    the reference way, which gives the error. An illegal last move followed by %ILLEGAL_MOVE /
    %±ILLEGAL_ACTION is the recorded offence: it is dropped and the ending decides.
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
        wars = WARS_ENDING.match(token)
        assert wars is not None, token           # _read_token keeps only special moves and Wars endings
        return _wars_result(wars, number, path)
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
    """A floodgate summary `summary:toryo:alice win:bob lose` -> (winner, ending), entries matched to the
    `N+`/`N-` names; no summary or an unknown kind -> no result.

    Raises:
        KifuError: entries that match neither order of the players.
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
        same = (" (the same name for both players: the order cannot be told)"
                if game.black == game.white else "")
        raise KifuError(path, game.summary_line or game.start_line,
                        f"summary names {first!r} and {second!r} do not match the players "
                        f"N+{game.black!r} N-{game.white!r}{same}; no % ending: the result is unknown")
    other = Winner.WHITE if first_is is Winner.BLACK else Winner.BLACK
    return (first_is if outcome == "first" else other), ending
