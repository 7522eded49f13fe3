"""Typed game records shared by every reader (CSA, KIF, KI2, SFEN); readers yield KifuErrors for bad games."""

from __future__ import annotations

import dataclasses
import enum
import typing

from shogi_dnn.errors import KifuError, printable

STANDARD_START_SFEN = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1"


class Winner(enum.Enum):
    """Who won the game. BLACK is sente (or shitate in handicap games), WHITE is gote (uwate)."""

    BLACK = "black"
    WHITE = "white"
    DRAW = "draw"
    UNKNOWN = "unknown"


class Ending(enum.Enum):
    """How the game ended, named after the CSA special moves (KIF words map onto these)."""

    RESIGN = "resign"                    # %TORYO, 投了
    CHECKMATE = "checkmate"              # %TSUMI, 詰み (the side that gave mate won)
    SENNICHITE = "sennichite"            # %SENNICHITE, 千日手 (draw)
    OUTE_SENNICHITE = "oute_sennichite"  # %OUTE_SENNICHITE: perpetual check, the checking side loses
    ENTERING_KING = "entering_king"      # %KACHI, 入玉勝ち (declaring side wins)
    JISHOGI = "jishogi"                  # %JISHOGI, 持将棋 (impasse draw)
    DRAW = "draw"                        # %HIKIWAKE, 引き分け
    MAX_MOVES = "max_moves"              # %MAX_MOVES, 最大手数 (draw)
    TIME_UP = "time_up"                  # %TIME_UP, 切れ負け, 時間切れ
    ILLEGAL_MOVE = "illegal_move"        # %ILLEGAL_MOVE, %±ILLEGAL_ACTION, 反則勝ち/反則負け
    FORFEIT = "forfeit"                  # 不戦勝/不戦敗: won or lost by default (no CSA token)
    INTERRUPTED = "interrupted"          # %CHUDAN, 中断 (no result)
    MATTA = "matta"                      # %MATTA (no result)
    NONE = "none"                        # the record stops without an ending (no result)


@dataclasses.dataclass(frozen=True)
class SourceLine:
    """Where a game starts: `path` is the file (or `archive:member`), `line` is 1-based."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{printable(self.path)}:{self.line}"      # the path as KifuError shows it


@dataclasses.dataclass(frozen=True)
class GameRecord:
    """One game's main line as read from a record.

    Attributes:
        start_sfen: the start position, SFEN with move number.
        moves: the main-line moves in USI (`7g7f`, `P*5e`, `8h2b+`); every move was checked legal.
        winner: who won; UNKNOWN when the record has no result.
        ending: how the game ended.
        black, white: player names ('' when absent).
        black_rating, white_rating: ratings, else None.
        source: file and line where the game starts.
        format: 'csa', 'kif', 'ki2' or 'sfen'.
        handicap: the 手合割 name or CSA handicap ('' for an even game or an unnamed custom position).
        event: the event/棋戦 name ('' when absent).
        evals: `()` or one per position (`len(moves) + 1`): centipawns from the side to move's view,
            clipped to ±MATE_EVAL, None where none (kifu/evals.py).
        repairs: what the reader repaired, one line each (`<kind> <where>: <what>`); `()` when clean.
        move_codes: [len(moves)] int64 absolute move codes when the reader had them, else None. Not compared.
    """

    start_sfen: str
    moves: tuple[str, ...]
    winner: Winner
    ending: Ending
    source: SourceLine
    format: str
    black: str = ""
    white: str = ""
    black_rating: float | None = None
    white_rating: float | None = None
    handicap: str = ""
    event: str = ""
    evals: tuple[int | None, ...] = ()
    repairs: tuple[str, ...] = ()
    move_codes: typing.Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def has_result(self) -> bool:
        """True when the game has a known outcome (a win or a draw): only those are training data."""
        return self.winner is not Winner.UNKNOWN


__all__ = ["STANDARD_START_SFEN", "Ending", "GameRecord", "KifuError", "SourceLine", "Winner"]
