"""CSA start positions: the `PI`, `P1`..`P9` and `P+`/`P-` lines of a game -> its start SFEN.

`read_position_line` keeps each line in the game's `StartLines`; `start_position` builds the board:
  PI[removed]     the even-game board with the listed pieces removed (`PI82HI22KA`: a handicap)
  P1..P9          the nine board rows, file 9 first: cells ` * ` (empty) or `+FU`/`-KY`, any spacing; rows
                  cshogi reads at fixed columns are read as it does (see _parse_row, GameRecord.repairs)
  P+ / P-         pieces placed (`P+63TO`) or put in hand (`P-00KI`); `00AL` gives that side every piece
                  of the set left over (kings excepted)
The side to move is the `+`/`-` line, else the first mover's. Also here: the CSA piece names.
"""

from __future__ import annotations

import dataclasses

from shogi_dnn import rules
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import BASE_PIECE_TYPES, HAND_PIECE_TYPES, SET_COUNT, UNPROMOTED, PieceType

# CSA piece name of each PieceType (FU PAWN .. OU KING, TO PROM_PAWN .. RY PROM_ROOK), and back.
CSA_PIECES = ("FU", "KY", "KE", "GI", "KI", "KA", "HI", "OU", "TO", "NY", "NK", "NG", "UM", "RY")
PIECE_TYPE: dict[str, PieceType] = {name: PieceType(index + 1) for index, name in enumerate(CSA_PIECES)}

# Handicap boards (SFEN board field; the giver, White, moves first) by their 手合割 name, as KIF uses.
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



def _standard_codes() -> list[int]:
    return rules.ShogiPosition(STANDARD_START_SFEN).piece_codes()   # no backend choice at import


STANDARD_CODES = _standard_codes()
REPAIRED_ROW = "csa_board_row"     # the kind of repair a GameRecord.repairs entry names (see _parse_row)


@dataclasses.dataclass
class StartLines:
    """What a game's position lines said, kept as read until the game ends (see read_position_line)."""

    pi: tuple[int, str] | None = None                       # (line, removed pieces after "PI")
    rows: dict[int, tuple[int, str]] = dataclasses.field(default_factory=dict)   # rank -> (line, text)
    piece_lines: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)  # (line, colour, text)
    turn: int | None = None                                 # the `+`/`-` line: BLACK or WHITE; None: none


def read_position_line(start: StartLines, line: str, number: int, path: str) -> None:
    """Keep a `PI...`, `P1`..`P9` or `P+`/`P-` line (line `number`, stripped) in `start`.

    Raises:
        KifuError: any other line starting with `P`.
    """
    kind = line[1:2]
    if kind == "I":
        start.pi = (number, line[2:].strip())
    elif kind and kind in "123456789":
        start.rows[int(kind)] = (number, line[2:])
    elif kind and kind in "+-":
        start.piece_lines.append((number, rules.BLACK if kind == "+" else rules.WHITE, line[2:].strip()))
    else:
        raise KifuError(path, number, f"unrecognised position line {line[:40]!r}")


# start_position of the games given by a PI line alone, by (removed pieces, side to move).
_PI_STARTS: dict[tuple[str | None, int], tuple[str, str, tuple[str, ...]]] = {}
_PI_STARTS_MAX = 1024


def start_position(start: StartLines, first_mover: int, start_line: int,
                   path: str) -> tuple[str, str, tuple[str, ...]]:
    """(start SFEN, handicap name, repairs) of a game from its position lines.

    Args:
        first_mover: the side to move when no `+`/`-` line says.
        start_line: the game's first line, for errors no position line can be blamed for.
    Returns:
        The SFEN (move number 1); the 手合割 name of a standard handicap board, `PI<removed>` for another
        PI start, else ''; the GameRecord.repairs of the board rows.
    Raises:
        KifuError: the lines give no valid start position (naming the line at fault).
    """
    turn = first_mover if start.turn is None else start.turn
    if start.rows or start.piece_lines:
        return _build_start_position(start, turn, start_line, path)
    key = (None if start.pi is None else start.pi[1], turn)
    built = _PI_STARTS.get(key)
    if built is None:
        built = _build_start_position(start, turn, start_line, path)     # raises for a bad PI line, naming it
        if len(_PI_STARTS) < _PI_STARTS_MAX:
            _PI_STARTS[key] = built
    return built


def _build_start_position(start: StartLines, turn: int, start_line: int,
                          path: str) -> tuple[str, str, tuple[str, ...]]:
    if start.pi is not None and start.rows:
        raise KifuError(path, start.pi[0], "both PI and P1..P9 give the start position")
    repairs: list[str] = []
    if start.rows:
        board = _board_from_rows(start.rows, repairs, path)
    elif start.pi is not None or not start.piece_lines:
        board = _board_from_pi(start.pi, path)
    else:
        board = [0] * rules.NUM_SQUARES          # only P+/P- lines: pieces placed one by one
    hands = [[0] * 9, [0] * 9]                   # [colour][piece type 1..8]
    _apply_piece_lines(start.piece_lines, board, hands, start_line, path)
    sfen = _to_sfen(board, hands, turn)
    board_field = sfen.split(" ", 1)[0]
    handicap = HANDICAP_BOARDS.get(board_field, "") if not any(map(any, hands)) else ""
    if start.pi is not None and start.pi[1] and not handicap:
        handicap = "PI" + start.pi[1]
    return sfen, handicap, tuple(repairs)


def _board_from_rows(rows: dict[int, tuple[int, str]], repairs: list[str], path: str) -> list[int]:
    """The board of the P1..P9 rows; what was repaired to read them is appended to `repairs`."""
    missing = [rank for rank in range(1, 10) if rank not in rows]
    if missing:
        raise KifuError(path, min(number for number, _ in rows.values()),
                        f"board rows P{missing[0]} missing")
    board = [0] * rules.NUM_SQUARES
    for rank, (number, text) in sorted(rows.items()):
        board[(rank - 1) * 9:rank * 9], repair = _parse_row(text, number, path)
        if repair:
            repairs.append(f"{REPAIRED_ROW} P{rank} line {number}: {repair}")
    return board


def _parse_row(text: str, number: int, path: str) -> tuple[list[int], str]:
    """9 piece codes (file 9 first) from a `P1` row, and '' or what was repaired.

    Read as cshogi reads a row (nine cells at fixed columns) where unambiguous: text after nine cells is
    ignored, and a last cell ` *` followed by another character is empty. Text after the cells that starts
    like a tenth cell, and any other malformed cell, is refused.
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
    """The 9 cells at fixed columns: (codes, what was repaired); ([], '') when a tenth cell follows; None
    when the cells are not there.
    """
    if len(text) < 26:
        return None
    cells = [_fixed_cell(text[k:k + 3]) for k in range(0, 24, 3)]
    codes = [code for code in cells if code is not None]
    if len(codes) < len(cells):
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
    return codes + [last], repair


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


def _apply_piece_lines(piece_lines: list[tuple[int, int, str]], board: list[int], hands: list[list[int]],
                       start_line: int, path: str) -> None:
    """`P+63TO00KI` places pieces and fills hands; `P-00AL` gives that side every piece left over."""
    all_to: int | None = None
    for number, colour, text in piece_lines:
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
                if piece not in HAND_PIECE_TYPES:
                    raise KifuError(path, number, f"{name} cannot be held in hand")
                hands[colour][piece] += 1
            else:
                board[_square(square, number, path)] = piece + rules.NUM_PIECE_TYPES * colour
    used = _piece_counts(board, hands)
    for kind, total in SET_COUNT.items():
        if used[kind] > total:
            line = piece_lines[0][0] if piece_lines else start_line
            raise KifuError(path, line, f"too many {CSA_PIECES[kind - 1]} pieces ({used[kind]} > {total})")
        if all_to is not None and kind != PieceType.KING:
            hands[all_to][kind] += total - used[kind]


def _piece_counts(board: list[int], hands: list[list[int]]) -> dict[int, int]:
    counts: dict[int, int] = {piece: hands[0][piece] + hands[1][piece] for piece in BASE_PIECE_TYPES}
    for code in board:
        if code:
            piece = (code - 1) % rules.NUM_PIECE_TYPES + 1
            counts[UNPROMOTED.get(piece, piece)] += 1
    return counts


def _to_sfen(board: list[int], hands: list[list[int]], turn: int) -> str:
    """SFEN of a CSA start position; `hands[colour][piece type]` counts."""
    black, white = ([hands[colour][t] for t in HAND_PIECE_TYPES] for colour in (rules.BLACK, rules.WHITE))
    return rules.format_sfen(board, black, white, turn)

