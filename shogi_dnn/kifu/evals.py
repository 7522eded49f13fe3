"""Engine evaluations carried by records: which comments hold one, their sign, and mate scores.

`GameRecord.evals` is `()` when a record carries no evaluation, else one entry per position
(`len(moves) + 1`: the start position, then the position after each move), each an engine's
evaluation of that position in centipawns **from the view of the side to move in it**, or None
where the record gives none. Values are clipped to ±MATE_EVAL; a mate score is ±MATE_EVAL.

Which position a comment belongs to: the position at the point where the comment stands, i.e. the
position after the last move read before it (the start position for a comment before the first
move). An engine comment after a move is the mover's search: its score is the mover's value of the
position before the move, which is also its value of the position after the move it chose (the
principal variation continues from there), so it is stored on the position after the move with its
sign turned to the side to move there. (dlshogi's csa_to_hcpe stores the same number, negated, on the
position before the move, paired with the move; the two are the same minimax value.) When a record
holds several evaluations for one position (ShogiGUI's 候補1..N, ShogiHome's player and analysis
lines), the first one wins. Comments in variations and after the result are not read.

Sign conventions (who the raw number favours when positive), with the evidence:

* CSA `'** <score> <pv...>` (floodgate; the server stores the `'* ...` a client sends with its move):
  **Black's view**. cshogi's CSA parser (`src/parser.h`) stores the integer after `'** ` as is in
  `Parser.scores`; dlshogi's `csa_to_hcpe.py` then writes `eval if board.turn == BLACK else -eval` on
  the board before the move, turning a Black-view number into the mover's view. The floodgate files
  agree: in tests/data/csa/floodgate_rust_shogi_sample.csa (Black yyr wins) both engines' scores are
  positive at the end (yyr `100000`, tenuki `15000` after its own moves); in shogi-server's
  `wdoor+floodgate-900-0+gps_normal+gps_l+20100507120007.csa` (White gps_l wins) both engines write
  large negative numbers; in shogi-kifu-converter's `floodgate.csa` (Black wins) both sides' scores
  grow positive together. Were the scores from the mover's view, the loser's would have the other sign.
* KIF written by ShogiHome (`**評価値=N`, `*#評価値=N`, `**詰み=先手勝ち[:N手]`, `*#詰み=後手勝ち`) and
  ShogiGUI-style lines (`**解析 0 ○ 候補1 ... 評価値 N 読み筋 ...`, `**対局 ... 評価値 +詰 13 ...`):
  **Black's view**. ShogiHome's comment parser maps `詰み=先手勝ち` to a positive mate score and reads
  ShogiGUI's `評価値 N` into the same field; other tools that write ShogiGUI's form (e.g. AndroShogi's
  test "scoresAndBoundsUseBlackPerspective": White to move, `score mate -5` -> `評価値 +詰5`) agree;
  ShogiHome's own test record (`source-with-score/src01.kifu`) keeps one sign across both sides' moves.
* KIF written by Shogidokoro (`*104` / `*-Mate:16` / `*+Mate` / `*0--` on the line after a move, then a
  PV line starting with that move): **the mover's view** (the engine that played the move). In
  mog-core-scala's `kif/game/008.kif` (Gikou, Black, vs elmo, White; White wins) elmo writes `*9192`,
  `*+Mate:13` after its moves while Gikou writes `*-4720`, `*-Mate:16` after its own; in Black's view
  those would contradict each other. A trailing `--`/`++` (a bound) is ignored. Such a comment before
  the first move has no mover and is ignored.

Other comments (human notes, PV lines, `* 123` with a space, whose writer and sign are unknown) are
not evaluations. A malformed score (`'** abc`) is no evaluation: these are comments, never errors.

Mate and large scores: engines write mate as large numbers of their own scale (floodgate: `100000`,
`15000`, `-999999999`; GPS writes ±300000..900000 for won positions) or as words (`+詰 13`,
`詰み=先手勝ち`, `-Mate:16`). Every value is clipped to [-MATE_EVAL, MATE_EVAL] and every mate word
becomes ±MATE_EVAL, so a stored ±MATE_EVAL means "mate or beyond any evaluation", from the side to
move's view. MATE_EVAL is YaneuraOu's VALUE_MATE (32000) and fits an int16; dlshogi clips to ±32767
and treats |score| >= 100000 as mate. Scores are not rescaled per engine (GPS's scale differs).
"""

from __future__ import annotations

import re

from shogi_dnn.rules import BLACK

MATE_EVAL = 32000
"""The clip of every stored evaluation, and the value of a mate score (± from the side to move's view)."""

_INT = re.compile(r"[+-]?\d+")
# ShogiHome: `**評価値=80`, `*#評価値=-60`, `**詰み=先手勝ち`, `*#詰み=後手勝ち:8手` (Black's view).
_KEYED = re.compile(r"^\*\*?#?(?:評価値=(?P<cp>[+-]?\d+(?:\.\d+)?)|詰み=(?P<side>先手|後手|下手|上手)勝ち)")
# ShogiGUI-style: `**解析 0 ○ 候補1 ... 評価値 123↓ 読み筋 ...`, `... 評価値 -詰 3 ...` (Black's view).
_SPACED = re.compile(r"(?:^\*\*?#?|\s)評価値\s+(?:(?P<mate>[+-])詰|(?P<cp>[+-]?\d+))")
# Shogidokoro: `*104`, `*-65`, `*0--`, `*+Mate`, `*-Mate:16`, `*+Mate:2--` (the mover's view).
_MOVER = re.compile(r"^\*(?:(?P<cp>[+-]?\d+)|(?P<mate>[+-])Mate(?::\d+)?)(?:\+\+|--)?$")
_BLACK_SIDES = ("先手", "下手")


def clip_eval(value: float) -> int:
    """A score rounded to an int and clipped to [-MATE_EVAL, MATE_EVAL]."""
    return max(-MATE_EVAL, min(MATE_EVAL, round(value)))


def csa_comment_eval(comment: str) -> int | None:
    """The Black-view score of a CSA comment (the text after `'`) `** <score> <pv...>`, else None.

    `** 123 -3334FU` -> 123, `** -100000` -> -MATE_EVAL, `** ` / `** abc` / `summary:...` -> None.
    """
    if not comment.startswith("**"):
        return None
    tokens = comment[2:].split(None, 1)
    if not tokens or not _INT.fullmatch(tokens[0]):
        return None
    return clip_eval(int(tokens[0]))


def kif_comment_eval(line: str) -> tuple[int, bool] | None:
    """(score, mover_view) of a KIF/KI2 comment line (stripped, starting with `*`), else None.

    mover_view False: the score is from Black's view; True: from the view of the side that made the
    move the comment follows (Shogidokoro). See the module docstring for the forms read.
    """
    match = _KEYED.match(line)
    if match:
        if match.group("side"):
            return (MATE_EVAL if match.group("side") in _BLACK_SIDES else -MATE_EVAL), False
        return clip_eval(float(match.group("cp"))), False
    match = _MOVER.match(line)
    if match:
        if match.group("mate"):
            return (MATE_EVAL if match.group("mate") == "+" else -MATE_EVAL), True
        return clip_eval(int(match.group("cp"))), True
    match = _SPACED.search(line)
    if match:
        if match.group("mate"):
            return (MATE_EVAL if match.group("mate") == "+" else -MATE_EVAL), False
        return clip_eval(int(match.group("cp"))), False
    return None


def evals_by_position(black_view: dict[int, int], start_sfen: str, plies: int) -> tuple[int | None, ...]:
    """`GameRecord.evals` from Black-view scores keyed by position index (0 = start, i = after move i).

    Indices beyond `plies` (e.g. the comment of an illegal last move that was dropped) are ignored;
    `()` when no index of the record has a score.
    """
    if not any(0 <= index <= plies for index in black_view):
        return ()
    black_first = start_sfen.split()[1] == "b"
    out: list[int | None] = []
    for index in range(plies + 1):
        value = black_view.get(index)
        if value is not None and black_first != (index % 2 == 0):
            value = -value                  # White to move in this position
        out.append(value)
    return tuple(out)


def to_black_view(value: int, mover: int) -> int:
    """A score from `mover`'s view (BLACK or WHITE) turned to Black's view."""
    return value if mover == BLACK else -value


__all__ = ["MATE_EVAL", "clip_eval", "csa_comment_eval", "evals_by_position", "kif_comment_eval", "to_black_view"]
