"""Which SFEN positions can stand on a shogi board: the check every position given by hand passes.

check_sfen(sfen) reads the first three SFEN fields itself (the backends' parsers rewrite what they cannot
hold) and raises IllegalPositionError, one line naming the first rule broken, unless:

  rule            the position must have
  syntax          9 ranks of 9 squares; pieces P L N S G B R K (lower case: White's), `+` only before
                  P L N S B R; side `b` or `w`; hands `-` or [count]letter, count 1 to the kind's set
                  count (SFEN's order R B G S N L P is not required)
  piece set       per kind, board + both hands, promoted counted with their base kind: at most
                  18 pawns, 4 lances, 4 knights, 4 silvers, 4 golds, 2 bishops, 2 rooks (also per side,
                  named first: "black has 19 pawns (18 at most)")
  kings           exactly one king each side (require_kings=False: at most one, as a mate problem's
                  attacker has none); none in hand (a king cannot be held)
  stuck pieces    no unpromoted pawn or lance on its owner's last rank, no unpromoted knight on its
                  owner's last two ranks (Black's last rank is `a`, White's `i`)
  nifu            no two unpromoted pawns of one side on one file
  check           the side not to move is not in check (its king could be taken)

Legal moves keep these. Every position built from text passes require_kings=False (mate problems stay
readable); position_from_sfen and predict's positions the full check.
"""

from __future__ import annotations

import re

from shogi_dnn.rules.moves import attacks
from shogi_dnn.rules.pieces import BASE_PIECE_TYPES, PROMOTED, SFEN_PIECE, piece_code
from shogi_dnn.rules.pieces import SET_COUNT as TYPE_SET_COUNT
from shogi_dnn.rules.position import IllegalMoveError, square_usi

# Pieces of one set per base kind (SFEN letter): also the most one side can hold.
SET_COUNT = {SFEN_PIECE[t]: count for t, count in TYPE_SET_COUNT.items()}
KIND_NAME = {SFEN_PIECE[t]: t.name.lower() for t in BASE_PIECE_TYPES}
PROMOTABLE = "".join(SFEN_PIECE[t] for t in PROMOTED)
_HAND_ITEM = re.compile(r"([0-9]*)([RBGSNLPrbgsnlp])")
_HANDS = re.compile(r"(?:[0-9]*[RBGSNLPrbgsnlp])+")

# Piece type of each SFEN symbol a Board holds ('P', '+P', ..., 'K').
_SYMBOL_TYPE = {symbol: piece_type for piece_type, symbol in SFEN_PIECE.items()}
_COLOUR_NAME = ("black", "white")


class IllegalPositionError(IllegalMoveError):
    """A position no shogi game can reach (or SFEN text that is no position): names the rule broken."""


# A board as check_sfen reads it: {(rank 0..8 from `a`, column 0..8 from file 9): (colour, piece)},
# piece an upper-case SFEN symbol ('P', '+P', ..., 'K').
Board = dict[tuple[int, int], tuple[int, str]]


def check_sfen(sfen: str, require_kings: bool = True) -> None:
    """Raise IllegalPositionError (`sfen <board> <side> <hands>: <what is wrong>`) unless `sfen` passes every
    rule of the module docstring; require_kings: exactly one king each (False: at most one).
    """
    fields = sfen.split()
    where = "sfen " + " ".join(fields[:3])
    try:
        if len(fields) < 3:
            raise ValueError("needs board, side to move and hands")
        board = _read_board(fields[0])
        if fields[1] not in ("b", "w"):
            raise ValueError(f"side to move {fields[1]!r} (b or w)")
        hands = _read_hands(fields[2])
        _check_counts(board, hands, require_kings)
        _check_stuck_pieces(board)
        _check_nifu(board)
        _check_not_in_check(board, 0 if fields[1] == "b" else 1)
    except ValueError as exc:
        raise IllegalPositionError(f"{where}: {exc}") from None


def _read_board(text: str) -> Board:
    ranks = text.split("/")
    if len(ranks) != 9:
        raise ValueError(f"the board has {len(ranks)} ranks (9 needed)")
    board: Board = {}
    for rank, row in enumerate(ranks):
        column, promoted = 0, False
        for char in row:
            if promoted and char.upper() not in PROMOTABLE:
                raise ValueError(f"'+{char}' on rank {chr(ord('a') + rank)}: only P L N S B R promote")
            if char == "+":
                promoted = True
                continue
            if char in "123456789":
                column += int(char)
            elif char.upper() in SET_COUNT:
                if column < 9:
                    colour = 0 if char.isupper() else 1
                    board[rank, column] = (colour, ("+" if promoted else "") + char.upper())
                column += 1
            else:
                raise ValueError(f"unknown piece letter {char!r} on rank {chr(ord('a') + rank)}")
            promoted = False
        if column != 9 or promoted:
            raise ValueError(f"rank {chr(ord('a') + rank)} ({row!r}) has {column} squares (9 needed)")
    return board


def _read_hands(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """(Black's, White's) {letter: count} from SFEN's hand field; a count is written once per letter."""
    hands: tuple[dict[str, int], dict[str, int]] = ({}, {})
    if text == "-":
        return hands
    if not _HANDS.fullmatch(text):
        raise ValueError(f"the hands {text!r} are not [count]letter... (R B G S N L P, upper case Black's) "
                         "or -")
    for digits, letter in _HAND_ITEM.findall(text):
        kind = letter.upper()
        count = int(digits or "1")
        if count == 0 or count > SET_COUNT[kind]:
            raise ValueError(f"hand count {digits}{letter} does not fit (a hand holds 1 to {SET_COUNT[kind]} "
                             f"{KIND_NAME[kind]}s)")
        hand = hands[0 if letter.isupper() else 1]
        if kind in hand:
            raise ValueError(f"{letter!r} written twice in the hands {text!r}")
        hand[kind] = count
    return hands


def _check_counts(board: Board, hands: tuple[dict[str, int], dict[str, int]], require_kings: bool) -> None:
    per_side = [{kind: hands[colour].get(kind, 0) for kind in SET_COUNT} for colour in (0, 1)]
    for colour, piece in board.values():
        per_side[colour][piece[-1]] += 1
    for colour in (0, 1):
        for kind, limit in SET_COUNT.items():
            if kind != "K" and per_side[colour][kind] > limit:
                raise ValueError(f"{_COLOUR_NAME[colour]} has {per_side[colour][kind]} {KIND_NAME[kind]}s "
                                 f"({limit} at most)")
    for kind, limit in SET_COUNT.items():
        total = per_side[0][kind] + per_side[1][kind]
        if kind != "K" and total > limit:
            raise ValueError(f"{total} {KIND_NAME[kind]}s on the board and in hand (a set has {limit}): "
                             f"black {per_side[0][kind]}, white {per_side[1][kind]}")
    for colour in (0, 1):
        kings = per_side[colour]["K"]
        if kings > 1 or (kings == 0 and require_kings):
            raise ValueError(f"{_COLOUR_NAME[colour]} has {'no king' if kings == 0 else f'{kings} kings'} "
                             f"({'exactly' if require_kings else 'at most'} one)")


def _check_stuck_pieces(board: Board) -> None:
    for (rank, column), (colour, piece) in sorted(board.items()):
        distance = rank if colour == 0 else 8 - rank            # 0 = the owner's last rank
        if (piece in ("P", "L") and distance == 0) or (piece == "N" and distance <= 1):
            last = "last rank" if distance == 0 else "second last rank"
            raise ValueError(f"{_COLOUR_NAME[colour]} {KIND_NAME[piece]} on {_square(rank, column)} can "
                             f"never move (unpromoted on its {last})")


def _check_nifu(board: Board) -> None:
    seen: set[tuple[int, int]] = set()
    for (_rank, column), (colour, piece) in sorted(board.items()):
        if piece == "P":
            if (colour, column) in seen:
                raise ValueError(f"{_COLOUR_NAME[colour]} has two unpromoted pawns on file {9 - column} "
                                 "(nifu)")
            seen.add((colour, column))


def _check_not_in_check(board: Board, turn: int) -> None:
    """The side not to move (1 - turn) must not be in check: the side to move could take its king."""
    king = next((square for square, (colour, piece) in board.items() if colour != turn and piece == "K"),
                None)
    if king is None:                                        # a mate problem's attacker
        return
    codes = [0] * 81
    for (rank, column), (colour, piece) in board.items():
        codes[rank * 9 + column] = piece_code(_SYMBOL_TYPE[piece], colour)
    for (rank, column), (colour, piece) in board.items():
        if colour == turn and attacks(codes, rank * 9 + column, king[0] * 9 + king[1]):
            raise ValueError(f"{_COLOUR_NAME[1 - turn]} (not to move) is in check: "
                             f"{_COLOUR_NAME[turn]}'s {piece} on {_square(rank, column)} attacks its king on "
                             f"{_square(*king)}")


def _square(rank: int, column: int) -> str:
    return square_usi(9 - column, rank + 1)
