"""Engine evaluations in records -> GameRecord.evals: forms, signs, mate clip, positions, real files.

Conventions under test (see shogi_dnn.kifu.evals): one entry per position (start, then after each
move), from the side to move's view, clipped to ±MATE_EVAL; CSA `'**` and ShogiHome/ShogiGUI KIF
scores are Black's view, Shogidokoro's `*N` the mover's; a comment belongs to the position reached
where it stands (before the first move: the start position); the first evaluation of a position wins.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import csa, ki2, kif, read_record_file
from shogi_dnn.kifu.evals import MATE_EVAL, clip_eval, csa_comment_eval, kif_comment_eval
from shogi_dnn.kifu.record import GameRecord, Winner

CSA_HEAD = "V2.2\nN+sente\nN-gote\nPI\n+\n"
# White moves first: 二枚落ち (rook and bishop removed from White).
CSA_HANDICAP_HEAD = "V2.2\nN+shitate\nN-uwate\nPI82HI22KA\n-\n"
KIF_HEAD = "手合割：平手\n先手：A\n後手：B\n手数----指手---------消費時間--\n"


def parse_csa(text: str) -> GameRecord:
    items = list(csa.parse(text, "t.csa"))
    assert len(items) == 1 and isinstance(items[0], GameRecord), items
    return items[0]


def parse_kif(text: str) -> GameRecord:
    items = list(kif.parse(text, "t.kif"))
    assert len(items) == 1 and isinstance(items[0], GameRecord), items
    return items[0]


# --- CSA ---------------------------------------------------------------------------------------------

def test_csa_black_view_scores_turned_to_the_side_to_move() -> None:
    record = parse_csa(CSA_HEAD + "+7776FU\nT1\n'** 50 -3334FU +2726FU\n-3334FU\nT1\n'** 120 +2726FU\n"
                       "+2726FU\n-8384FU\n'** -30\n%TORYO\n")
    # After +7776FU White is to move: Black's +50 is White's -50. After -3334FU Black is to move.
    # After -8384FU (ply 4) Black is to move: -30 stays -30. Ply 3 has no comment.
    assert record.evals == (None, -50, 120, None, -30)
    assert len(record.evals) == len(record.moves) + 1


def test_csa_white_moves_first_handicap() -> None:
    record = parse_csa(CSA_HANDICAP_HEAD + "-5142OU\n'** 400\n+7776FU\n'** 450\n%TORYO\n")
    # Start: White to move. After White's -5142OU Black is to move (400 as is); after +7776FU White
    # is to move (-450).
    assert record.evals == (None, 400, -450)


def test_csa_mate_and_huge_scores_clip_to_mate_eval() -> None:
    record = parse_csa(CSA_HEAD + "+7776FU\n'** 100000\n-3334FU\n'** -999999999 x\n+2726FU\n'** 31999\n"
                       "-8384FU\n'** 15000\n%TORYO\n")
    assert record.evals == (None, -MATE_EVAL, -MATE_EVAL, -31999, 15000)


@pytest.mark.parametrize("comment", ["'** abc", "'**", "'** ", "'** 12x -3334FU", "'**1.5", "'* 30",
                                     "'30", "'*** 30", "'comment 30"])
def test_csa_malformed_or_other_comments_are_no_evaluation(comment: str) -> None:
    record = parse_csa(CSA_HEAD + "+7776FU\n" + comment + "\n-3334FU\n'** 7\n%TORYO\n")
    assert record.evals == (None, None, 7)


@pytest.mark.parametrize("comment", ["'** ９９", "'** －１２０ -3334FU", "'** ٩٩", "'** +９"])
def test_csa_scores_in_other_than_ascii_digits_are_counted_not_read(comment: str) -> None:
    """`'** ９９` is a note, not an engine's 99 (`\\d` and int() would read it): no evaluation, and the
    reader says so in GameRecord.repairs (convert-report.json: repaired:csa_eval_digits, the line)."""
    record = parse_csa(CSA_HEAD + "+7776FU\n" + comment + "\n-3334FU\n'** 7\n%TORYO\n")
    assert record.evals == (None, None, 7)
    expected = (f"csa_eval_digits line 7: {comment} has other than ASCII digits: read as a comment, not an "
                "engine evaluation")
    assert record.repairs == (expected,)
    assert parse_csa(CSA_HEAD + "+7776FU\n'** 99\n-3334FU\n%TORYO\n").repairs == ()


def test_csa_record_without_evaluations_has_empty_evals() -> None:
    record = parse_csa(CSA_HEAD + "+7776FU\n'just a note\n-3334FU\n%TORYO\n'summary:toryo:a win:b lose\n")
    assert record.evals == ()


def test_csa_comment_before_the_first_move_scores_the_start_position() -> None:
    record = parse_csa("V2.2\nN+a\nN-b\nPI\n+\n'** 35\n+7776FU\n%TORYO\n")
    assert record.evals == (35, None)
    record = parse_csa(CSA_HANDICAP_HEAD + "'** 35\n-5142OU\n%TORYO\n")
    assert record.evals == (-35, None)                     # White to move at the start


def test_csa_first_score_of_a_position_wins_and_trailing_comments_count() -> None:
    record = parse_csa(CSA_HEAD + "+7776FU,'** 60 -3334FU\n'** 999\n-3334FU,T3,'** -20\n%TORYO\n")
    assert record.evals == (None, -60, -20)


def test_csa_scores_after_the_ending_are_ignored() -> None:
    record = parse_csa(CSA_HEAD + "+7776FU\n-3334FU\n%TORYO,'** 500\n'** 800\n")
    assert record.evals == ()


def test_csa_score_of_a_dropped_illegal_last_move_is_dropped() -> None:
    # The last move (+5544FU: no piece on 55) is the recorded offence: dropped, its comment with it.
    record = parse_csa(CSA_HEAD + "+7776FU\n'** 10\n-3334FU\n'** 20\n+5544FU\n'** 30\n%ILLEGAL_MOVE\n")
    assert record.moves == ("7g7f", "3c3d")
    assert record.evals == (None, -10, 20)


def test_csa_each_game_of_a_file_has_its_own_evals() -> None:
    text = CSA_HEAD + "+7776FU\n'** 5\n%TORYO\n/\n" + CSA_HEAD + "+2726FU\n%TORYO\n"
    first, second = list(csa.parse(text, "t.csa"))
    assert first.evals == (None, -5)
    assert second.evals == ()


def _ply_at(lines: list[str], line_number: int) -> int:
    """Moves read up to 1-based `line_number` of a one-move-a-line CSA file."""
    return sum(1 for line in lines[:line_number] if re.fullmatch(r"[+-]\d{4}[A-Z]{2}", line.strip()))


def test_real_floodgate_sample(data_dir: Path) -> None:
    path = data_dir / "csa" / "floodgate_rust_shogi_sample.csa"
    record = next(read_record_file(path))
    assert isinstance(record, GameRecord) and record.winner is Winner.BLACK
    lines = path.read_text(encoding="ascii").split("\n")
    assert len(record.evals) == len(record.moves) + 1 == 82
    assert record.evals[0] is None                         # nothing before +7776FU
    # (line of the `'**` comment, its text, the stored value from the side to move's view)
    known = [
        (24, "'** 0 -8384FU", 0),                          # after +7776FU: White to move
        (33, "'** 83 +7988GI", 83),                        # after -3334FU (tenuki): Black to move
        (48, "'** 44 -2277UM", -44),                       # after +2726FU (yyr): White to move
        (51, "'** -39 +2625FU", -39),                      # after -6273GI: Black to move
        (252, "'** 100000 -6261KI", -MATE_EVAL),           # yyr sees mate: White, to move, is lost
        (255, "'** 15000 +0083KE", 15000),                 # tenuki: Black, to move, is winning
        (264, "'** 100000", -MATE_EVAL),                   # after the last move +0063KI
    ]
    for line_number, text, value in known:
        assert lines[line_number - 1].startswith(text), line_number
        assert record.evals[_ply_at(lines, line_number)] == value, line_number
    assert _ply_at(lines, 264) == len(record.moves)
    # Every score is Black's view in the file: the winner (Black) leads in the last 20 positions.
    last = record.evals[-20:]
    start = len(record.evals) - 20
    black_view = [v if (start + i) % 2 == 0 else -v for i, v in enumerate(last) if v is not None]
    assert all(v > 0 for v in black_view)


# --- KIF / KI2 ---------------------------------------------------------------------------------------

def test_kif_shogihome_black_view_scores_and_mate_words() -> None:
    record = parse_kif(KIF_HEAD + """\
   1 ７六歩(77)   ( 0:00/00:00:00)
*互角
*#評価値=-102
*#読み筋=△８四歩▲２六歩
   2 ８四歩(83)   ( 0:00/00:00:00)
**評価値=80
*#評価値=-60
   3 ２六歩(27)   ( 0:00/00:00:00)
**詰み=先手勝ち
   4 ８五歩(84)   ( 0:00/00:00:00)
*#詰み=後手勝ち:8手
   5 ２五歩(26)   ( 0:00/00:00:00)
*#評価値=12.4
""")
    # ply 1 White to move: 102; ply 2 Black to move: the first line (80) wins over -60; ply 3 White to
    # move, Black mates: -MATE; ply 4 Black to move, White mates: -MATE; ply 5: 12.4 -> 12 -> -12.
    assert record.evals == (None, 102, 80, -MATE_EVAL, -MATE_EVAL, -12)


def test_kif_shogigui_analysis_lines() -> None:
    record = parse_kif(KIF_HEAD + """\
**解析 0 ○ 候補1 時間 00:01.0 深さ 20/30 ノード数 12345 評価値 45 読み筋 ▲７六歩(77) △３四歩(33)
**解析 0 ○ 候補2 時間 00:01.0 深さ 20/30 ノード数 12345 評価値 30 読み筋 ▲２六歩(27)
   1 ７六歩(77)   ( 0:00/00:00:00)
**解析 0 △ 候補1 時間 00:01.0 深さ 20/30 ノード数 12345 評価値 -120↓ 読み筋 △３四歩(33)
   2 ３四歩(33)   ( 0:00/00:00:00)
**対局 時間 00:05.0 深さ 9/9 評価値 +詰 13 読み筋 ▲２二角成(88)
   3 ２二角成(88)   ( 0:00/00:00:00)
**解析 0 △ 評価値 -詰 読み筋 △同　銀(31)
   4 同　銀(31)   ( 0:00/00:00:00)
""")
    # Before move 1: the start position (Black to move), 候補1 wins. Ply 1 White to move: 120.
    assert record.evals == (45, 120, MATE_EVAL, MATE_EVAL, None)


def test_kif_shogidokoro_scores_are_the_movers_view() -> None:
    record = parse_kif("# Generated by Shogidokoro\n*77\n" + KIF_HEAD + """\
   1 ７六歩(77)    (00:01 / 00:00:01)
*104
*P7g-7f
   2 ３四歩(33)    (02:27 / 00:02:27)
*-65
*P3c-3d P2g-2f
   3 ２六歩(27)    (00:04 / 00:00:05)
*0--
   4 ８四歩(83)    (01:35 / 00:04:02)
*+Mate:13
   5 ２五歩(26)    (00:01 / 00:00:06)
*-Mate
   6 ８五歩(84)    (00:01 / 00:00:06)
*+20++
""")
    # The mover's score of the position after its move is minus the side to move's: Black's 104 ->
    # -104; White's -65 -> 65; White mates (+Mate by the mover) -> Black, to move, is mated.
    # The `*77` before any move has no mover: ignored.
    assert record.evals == (None, -104, 65, 0, -MATE_EVAL, MATE_EVAL, -20)


def test_kif_bare_numbers_are_scores_only_in_shogidokoro_records() -> None:
    moves = "   1 ７六歩(77)\n*初手のコメント\n*2\n*3\n   2 ３四歩(33)\n*-Mate\n   3 投了\n"
    assert parse_kif(KIF_HEAD + moves).evals == ()
    assert parse_kif("#KIF version=2.0\n# Generated by Shogidokoro\n" + KIF_HEAD + moves).evals == (
        None, -2, MATE_EVAL)                 # White's `*-Mate`: White is mated, Black (to move) mates


@pytest.mark.parametrize("comment", ["*互角", "* 123", "*3手目のコメント", "*P7g-7f", "*▲７八金(69)△３二金(41)",
                                     "*評価値は+300くらい", "*#深さ=21", "*#エンジン=MyEngine", "*最大手数",
                                     "*https://example.com/123", "*#評価値=abc", "*1 2"])
def test_kif_other_comments_are_no_evaluation(comment: str) -> None:
    record = parse_kif(KIF_HEAD + "   1 ７六歩(77)\n" + comment + "\n   2 ３四歩(33)\n   3 投了\n")
    assert record.evals == ()


def test_kif_variations_and_comments_after_the_result_are_ignored() -> None:
    record = parse_kif(KIF_HEAD + """\
   1 ７六歩(77)   ( 0:00/00:00:00)
*#評価値=50
   2 ３四歩(33)   ( 0:00/00:00:00)
   3 投了
*#評価値=900
まで2手で後手の勝ち

変化：2手
   2 ８四歩(83)   ( 0:00/00:00:00)
*#評価値=-700
""")
    assert record.evals == (None, -50, None)


def test_ki2_reads_the_same_comments() -> None:
    text = ("手合割：平手\n先手：A\n後手：B\n\n▲７六歩\n*#評価値=40\n△３四歩 ▲２六歩\n**詰み=後手勝ち:3手\n"
            "まで3手で後手の勝ち\n")
    items = list(ki2.parse(text, "t.ki2"))
    assert len(items) == 1 and isinstance(items[0], GameRecord), items
    # A comment after a line of several moves belongs to the position after the last of them.
    assert items[0].evals == (None, -40, None, MATE_EVAL)


# --- the comment readers on their own ----------------------------------------------------------------

def test_comment_readers() -> None:
    assert csa_comment_eval("** +12 -3334FU") == 12
    assert csa_comment_eval("** -32001") == -MATE_EVAL
    assert csa_comment_eval("summary:toryo:a win:b lose") is None
    assert kif_comment_eval("*#評価値=-5") == (-5, False)
    assert kif_comment_eval("*-Mate:3") == (-MATE_EVAL, True)
    assert kif_comment_eval("**解析 0 ○ 評価値 7↑ 読み筋 ▲７六歩(77)") == (7, False)
    assert kif_comment_eval("*互角") is None
    assert clip_eval(10 ** 9) == MATE_EVAL and clip_eval(-(10 ** 9)) == -MATE_EVAL


# --- real KIF files in ../shared (skipped when absent) ----------------------------------------------

def test_real_shogidokoro_engine_game(shared_dir: Path) -> None:
    """Gikou (Black) vs elmo (White), White wins; Shogidokoro writes each engine's own score."""
    path = shared_dir / "kifu" / "mogproject__mog-core-scala" / "jvm/src/test/resources/kif/game/008.kif"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    record = next(read_record_file(path))
    assert isinstance(record, GameRecord) and record.winner is Winner.WHITE
    assert len(record.evals) == 169
    assert record.evals[:4] == (None, -104, 65, -135)   # `*104` by Black, `*-65` by White, `*135` by Black
    assert record.evals[150] == -5095                   # `*5095` after White's 150th move: Black to move
    assert record.evals[153] == MATE_EVAL               # `*-Mate:16` after Black's 153rd: White to move, wins
    assert record.evals[156] == -MATE_EVAL              # `*+Mate:13` after White's 156th: Black to move, lost
    # In Black's view every score from 150 on favours the winner, White.
    assert all((v if i % 2 == 0 else -v) < 0 for i, v in enumerate(record.evals)
               if i >= 150 and v is not None)


def test_kifu_error_records_are_unchanged() -> None:
    items = list(csa.parse("V2.2\nPI\n+\n'** 10\n+7775FU\n'** 20\n%TORYO\n", "t.csa"))
    assert len(items) == 1 and isinstance(items[0], KifuError)
