"""Japanese notation shared by the KIF and KI2 readers: numerals, piece names, result words, 手合割.

An `Outcome` is an ending and its winner relative to the side to move where the word is read.
"""

from __future__ import annotations

import dataclasses
import enum
import re

from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending
from shogi_dnn.rules import PieceType

# Full-width, half-width and kanji digits 1..9 (files are written １..９, ranks 一..九).
DIGITS: dict[str, int] = {}
for _i, (_zen, _kan) in enumerate(zip("１２３４５６７８９", "一二三四五六七八九"), start=1):
    DIGITS[_zen] = DIGITS[_kan] = DIGITS[str(_i)] = _i
ZEN_DIGITS = "０１２３４５６７８９"
KANJI_DIGITS = "〇一二三四五六七八九"

# Piece names -> piece type. Abbreviations seen in the wild: 全 成銀, 圭 成桂, 杏 成香, 竜 龍, 王 玉.
# The names a writer uses (Kifu for Windows style): type -> name (keyed by int, as pieces.SFEN_PIECE).
PIECE_NAMES: dict[int, str] = {
    PieceType.PAWN: "歩", PieceType.LANCE: "香", PieceType.KNIGHT: "桂", PieceType.SILVER: "銀",
    PieceType.GOLD: "金", PieceType.BISHOP: "角", PieceType.ROOK: "飛", PieceType.KING: "玉",
    PieceType.PROM_PAWN: "と", PieceType.PROM_LANCE: "成香", PieceType.PROM_KNIGHT: "成桂",
    PieceType.PROM_SILVER: "成銀", PieceType.PROM_BISHOP: "馬", PieceType.PROM_ROOK: "龍"}
# One-character names used inside board diagrams (a two-character 成香 does not fit a cell).
BOARD_NAMES: dict[int, str] = {**PIECE_NAMES, PieceType.PROM_LANCE: "杏", PieceType.PROM_KNIGHT: "圭",
                               PieceType.PROM_SILVER: "全"}
PIECE_TYPES: dict[str, PieceType] = {
    **{name: PieceType(piece_type) for piece_type, name in PIECE_NAMES.items()},
    **{name: PieceType(piece_type) for piece_type, name in BOARD_NAMES.items()},
    "王": PieceType.KING, "竜": PieceType.PROM_ROOK}
PIECE_PATTERN = "成香|成桂|成銀|[歩香桂銀金角飛玉王と杏圭全馬龍竜]"

# 手合割 -> start SFEN. In every handicap game 上手 (White) removes pieces and moves first.
HANDICAPS: dict[str, str] = {
    "平手": STANDARD_START_SFEN,
    "香落ち": "lnsgkgsn1/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "右香落ち": "1nsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "角落ち": "lnsgkgsnl/1r7/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "飛車落ち": "lnsgkgsnl/7b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "飛香落ち": "lnsgkgsn1/7b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "二枚落ち": "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "三枚落ち": "lnsgkgsn1/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "四枚落ち": "1nsgkgsn1/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "五枚落ち": "2sgkgsn1/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "左五枚落ち": "1nsgkgs2/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "六枚落ち": "2sgkgs2/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "左七枚落ち": "2sgkg3/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "右七枚落ち": "3gkgs2/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "八枚落ち": "3gkg3/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "十枚落ち": "4k4/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
}
HANDICAP_ALIASES = {"飛落ち": "飛車落ち", "香落": "香落ち", "角落": "角落ち", "飛車落": "飛車落ち",
                    "2枚落ち": "二枚落ち", "4枚落ち": "四枚落ち", "6枚落ち": "六枚落ち"}
# Header keys naming the players: Black is 先手 (下手 in a handicap game), White 後手 (上手).
BLACK_KEYS = ("先手", "下手")
WHITE_KEYS = ("後手", "上手")


class Mover(enum.Enum):
    """Who wins relative to the side to move when the result word is read."""

    SIDE_TO_MOVE = "side_to_move"
    OPPONENT = "opponent"          # the side that made the last move
    DRAW = "draw"
    NONE = "none"                  # no result (interrupted, sealed move, ...)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A result word's meaning: the ending and who wins relative to the side to move."""

    ending: Ending
    winner: Mover


# Result words written as a move (`  91 投了`). The side to move is the one "playing" the word.
RESULT_WORDS: dict[str, Outcome] = {
    "投了": Outcome(Ending.RESIGN, Mover.OPPONENT),
    "詰み": Outcome(Ending.CHECKMATE, Mover.OPPONENT),
    "詰": Outcome(Ending.CHECKMATE, Mover.OPPONENT),
    "千日手": Outcome(Ending.SENNICHITE, Mover.DRAW),
    "持将棋": Outcome(Ending.JISHOGI, Mover.DRAW),
    "引き分け": Outcome(Ending.DRAW, Mover.DRAW),
    "引分け": Outcome(Ending.DRAW, Mover.DRAW),
    "最大手数": Outcome(Ending.MAX_MOVES, Mover.DRAW),
    "切れ負け": Outcome(Ending.TIME_UP, Mover.OPPONENT),
    "時間切れ": Outcome(Ending.TIME_UP, Mover.OPPONENT),
    # 反則勝ち: the previous move was illegal, so the side to move wins; 反則負け: the side to move
    # committed the foul (Kifu for Windows / json-kifu-format semantics).
    "反則勝ち": Outcome(Ending.ILLEGAL_MOVE, Mover.SIDE_TO_MOVE),
    "反則負け": Outcome(Ending.ILLEGAL_MOVE, Mover.OPPONENT),
    "入玉勝ち": Outcome(Ending.ENTERING_KING, Mover.SIDE_TO_MOVE),
    "宣言勝ち": Outcome(Ending.ENTERING_KING, Mover.SIDE_TO_MOVE),
    "トライ勝ち": Outcome(Ending.ENTERING_KING, Mover.SIDE_TO_MOVE),
    # Declarations (入玉宣言 as 入玉勝ち) and the try rule (トライ): the side to move declares and wins.
    "入玉宣言": Outcome(Ending.ENTERING_KING, Mover.SIDE_TO_MOVE),
    "勝ち宣言": Outcome(Ending.ENTERING_KING, Mover.SIDE_TO_MOVE),
    "トライ": Outcome(Ending.ENTERING_KING, Mover.SIDE_TO_MOVE),
    # 不戦勝/不戦敗 (the Kakinoki KIF spec): a game won or lost by default, read like 反則勝ち/反則負け:
    # 不戦勝 means the side to move wins, 不戦敗 that it loses.
    "不戦勝": Outcome(Ending.FORFEIT, Mover.SIDE_TO_MOVE),
    "不戦敗": Outcome(Ending.FORFEIT, Mover.OPPONENT),
    "中断": Outcome(Ending.INTERRUPTED, Mover.NONE),
    "封じ手": Outcome(Ending.INTERRUPTED, Mover.NONE),
    # 不詰 ("no mate") ends a mate-problem line, not a game: it carries no winner.
    "不詰": Outcome(Ending.NONE, Mover.NONE),
    "待った": Outcome(Ending.MATTA, Mover.NONE),
    "Time-up": Outcome(Ending.TIME_UP, Mover.OPPONENT),     # 81Dojo exports
}
RESULT_PATTERN = "|".join(sorted(RESULT_WORDS, key=len, reverse=True))

# `まで90手で後手の勝ち`, `まで3手で後手の反則勝ち`, `まで14手で時間切れにより後手の勝ち`,
# `まで256手で持将棋`; a mate problem's `まで49手詰` (Kifu for Windows, KI2 without a 詰み word).
SUMMARY_LINE = re.compile(
    r"^\s*まで、?(?P<plies>\d+)手(?:目)?(?:で|(?=詰))(?:(?P<cause>.*?)により)?"
    r"(?:(?P<side>先手|後手|下手|上手)の"
    r"(?P<kind>勝ち|反則勝ち|反則負け|入玉勝ち|宣言勝ち|不戦勝|不戦敗|勝利|負け)"
    r"|(?P<word>千日手|持将棋|中断|詰み|詰|不詰|引き分け|引分け|最大手数|封じ手))")


def parse_number(text: str) -> int:
    """A count written in kanji (`十七`, `二`), full-width (`１７`) or ASCII digits; '' means 1.

    Raises:
        ValueError: when `text` is not a number.
    """
    if not text:
        return 1
    ascii_digits = text.translate(str.maketrans(ZEN_DIGITS, "0123456789"))
    if ascii_digits.isdigit():
        return int(ascii_digits)
    if any(ch not in KANJI_DIGITS + "十" for ch in text):
        raise ValueError(f"not a number: {text!r}")
    if "十" not in text:
        return int("".join(str(KANJI_DIGITS.index(ch)) for ch in text))
    tens, _, ones = text.partition("十")
    return (KANJI_DIGITS.index(tens) if tens else 1) * 10 + (KANJI_DIGITS.index(ones) if ones else 0)


def kanji_number(n: int) -> str:
    """`n` (1..18) as kanji, e.g. 2 -> 二, 17 -> 十七."""
    if n < 10:
        return KANJI_DIGITS[n]
    return "十" + (KANJI_DIGITS[n - 10] if n > 10 else "")


def square_text(file: int, rank: int) -> str:
    """KIF destination text: file 7, rank 6 -> ７六."""
    return ZEN_DIGITS[file] + KANJI_DIGITS[rank]


def handicap_sfen(name: str) -> str | None:
    """The start SFEN of a 手合割 name (spaces ignored), or None when the name is unknown (その他)."""
    key = re.sub(r"[\s　]", "", name)
    return HANDICAPS.get(HANDICAP_ALIASES.get(key, key))


def handicap_name(sfen: str) -> str | None:
    """The 手合割 name of a start SFEN (move number ignored), or None for a custom position."""
    stem = sfen.rsplit(" ", 1)[0]
    for name, start in HANDICAPS.items():
        if start.rsplit(" ", 1)[0] == stem:
            return name
    return None


__all__ = [
    "BLACK_KEYS",
    "BOARD_NAMES",
    "DIGITS",
    "HANDICAPS",
    "PIECE_NAMES",
    "PIECE_PATTERN",
    "PIECE_TYPES",
    "RESULT_PATTERN",
    "RESULT_WORDS",
    "SUMMARY_LINE",
    "WHITE_KEYS",
    "Mover",
    "Outcome",
    "handicap_name",
    "handicap_sfen",
    "kanji_number",
    "parse_number",
    "square_text",
]
