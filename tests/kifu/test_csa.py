"""CSA reader and writer: endings, multi-game files, handicaps, ratings, encodings, real files."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest
import shogi  # reference check detection in the round-trip test, independent of csa
from hypothesis import given, settings
from hypothesis import strategies as st

from shogi_dnn import rules
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import STANDARD_START_SFEN, Ending, GameRecord, Winner, read_record_file
from shogi_dnn.kifu.csa import parse
from shogi_dnn.kifu.csa_writer import format_csa
from shogi_dnn.kifu.record import SourceLine
from shogi_dnn.rules import in_check
from tests.support.paths import DATA

CSA = DATA / "csa"


def read_one(name: str) -> GameRecord:
    items = list(read_record_file(CSA / name))
    assert len(items) == 1, items
    assert isinstance(items[0], GameRecord), items[0]
    return items[0]


def parse_one(text: str, path: str = "t.csa") -> GameRecord | KifuError:
    items = list(parse(text, path))
    assert len(items) == 1, items
    return items[0]


# --- every ending ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, plies, winner, ending", [
    ("ending_toryo.csa", 2, Winner.WHITE, Ending.RESIGN),            # black to move resigns
    ("ending_toryo_odd.csa", 3, Winner.BLACK, Ending.RESIGN),
    ("ending_tsumi.csa", 1, Winner.BLACK, Ending.CHECKMATE),          # the mating side wins
    ("ending_sennichite.csa", 12, Winner.DRAW, Ending.SENNICHITE),
    ("ending_oute_sennichite_after_check.csa", 13, Winner.WHITE, Ending.OUTE_SENNICHITE),
    ("ending_oute_sennichite_after_escape.csa", 14, Winner.WHITE, Ending.OUTE_SENNICHITE),
    ("ending_oute_sennichite_white_checks.csa", 13, Winner.BLACK, Ending.OUTE_SENNICHITE),
    ("ending_kachi.csa", 1, Winner.WHITE, Ending.ENTERING_KING),      # the declaring side to move wins
    ("ending_jishogi.csa", 2, Winner.DRAW, Ending.JISHOGI),
    ("ending_hikiwake.csa", 1, Winner.DRAW, Ending.DRAW),
    ("ending_max_moves.csa", 2, Winner.DRAW, Ending.MAX_MOVES),       # V3.0, fractional T lines
    ("ending_time_up.csa", 3, Winner.BLACK, Ending.TIME_UP),          # white to move lost on time
    ("ending_illegal_move.csa", 1, Winner.BLACK, Ending.ILLEGAL_MOVE),
    ("ending_illegal_move_recorded.csa", 3, Winner.BLACK, Ending.ILLEGAL_MOVE),
    ("ending_plus_illegal_action.csa", 1, Winner.WHITE, Ending.ILLEGAL_MOVE),
    ("ending_minus_illegal_action.csa", 1, Winner.BLACK, Ending.ILLEGAL_MOVE),
    ("ending_chudan.csa", 2, Winner.UNKNOWN, Ending.INTERRUPTED),
    ("ending_matta.csa", 1, Winner.UNKNOWN, Ending.MATTA),
    ("ending_none.csa", 2, Winner.UNKNOWN, Ending.NONE),
    ("no_moves.csa", 0, Winner.UNKNOWN, Ending.NONE),
])
def test_every_ending(name: str, plies: int, winner: Winner, ending: Ending) -> None:
    record = read_one(name)
    assert len(record.moves) == plies
    assert (record.winner, record.ending) == (winner, ending)
    assert record.format == "csa"
    assert record.has_result == (winner is not Winner.UNKNOWN)


def test_tsumi_start_position_from_piece_lines_and_00al() -> None:
    record = read_one("ending_tsumi.csa")
    # P-51OU, P+53FU59OU00KI, P-00AL: white holds every piece not on the board or in black's hand.
    assert record.start_sfen == "4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1"
    assert record.moves == ("G*5b",)


@pytest.mark.parametrize("line, winner, ending", [
    ("SENTE_WIN_TORYO", Winner.BLACK, Ending.RESIGN),
    ("GOTE_WIN_TORYO", Winner.WHITE, Ending.RESIGN),
    ("SENTE_WIN_CHECKMATE", Winner.BLACK, Ending.CHECKMATE),
    ("GOTE_WIN_CHECKMATE", Winner.WHITE, Ending.CHECKMATE),
    ("SENTE_WIN_TIMEOUT", Winner.BLACK, Ending.TIME_UP),
    ("GOTE_WIN_TIMEOUT", Winner.WHITE, Ending.TIME_UP),
    ("SENTE_WIN_DISCONNECT", Winner.BLACK, Ending.TIME_UP),
    ("GOTE_WIN_DISCONNECT", Winner.WHITE, Ending.TIME_UP),
    ("SENTE_WIN_ENTERINGKING", Winner.BLACK, Ending.ENTERING_KING),
    ("GOTE_WIN_ENTERINGKING", Winner.WHITE, Ending.ENTERING_KING),
    ("SENTE_WIN_OUTE_SENNICHI", Winner.BLACK, Ending.OUTE_SENNICHITE),
    ("GOTE_WIN_OUTE_SENNICHI", Winner.WHITE, Ending.OUTE_SENNICHITE),
    ("DRAW_SENNICHI", Winner.DRAW, Ending.SENNICHITE),
    ("%GOTE_WIN_TORYO", Winner.WHITE, Ending.RESIGN),
])
def test_shogi_wars_endings(line: str, winner: Winner, ending: Ending) -> None:
    # Shogi Wars exports: no `+` line, moves with `,L600` clock fields, tab-separated on one line.
    record = parse_one(f"V2.2\nPI\n+7776FU,L600\t-3334FU,L598\n{line}\n")
    assert isinstance(record, GameRecord)
    assert record.moves == ("7g7f", "3c3d")
    assert (record.winner, record.ending) == (winner, ending)


def test_unknown_shogi_wars_ending_is_an_error() -> None:
    error = parse_one("V2.2\nPI\n+7776FU\nSENTE_WIN_SOMETHING_NEW\n")
    assert isinstance(error, KifuError)
    assert error.line == 4 and "SENTE_WIN_SOMETHING_NEW" in error.reason


def test_percent_ending_wins_over_summary() -> None:
    # %TORYO with black to move: white won, whatever the (edited) summary line says.
    record = read_one("summary_conflict.csa")
    assert (record.winner, record.ending) == (Winner.WHITE, Ending.RESIGN)


def test_summary_used_when_no_percent_ending() -> None:
    record = read_one("summary_only.csa")
    assert (record.winner, record.ending) == (Winner.BLACK, Ending.TIME_UP)


@pytest.mark.parametrize("name, winner", [
    ("summary_white_first.csa", Winner.BLACK),         # `bob lose:alice win`: alice (N+, Black) won
    ("summary_white_first_wins.csa", Winner.WHITE),    # `bob win:alice lose`: bob (N-, White) won
])
def test_summary_entries_matched_by_player_name(name: str, winner: Winner) -> None:
    # No % line; the summary lists White's entry first: the names, not the order, say who won.
    record = read_one(name)
    assert (record.winner, record.ending, record.black, record.white) == \
        (winner, record.ending, "alice", "bob")
    assert record.ending in (Ending.TIME_UP, Ending.RESIGN) and record.moves[:2] == ("7g7f", "3c3d")


def test_summary_naming_other_players_is_an_error_naming_its_line() -> None:
    items = list(read_record_file(CSA / "summary_other_names.csa"))
    assert len(items) == 1 and isinstance(items[0], KifuError), items
    assert items[0].line == 9 and "'carol' and 'dave' do not match the players" in items[0].reason


@pytest.mark.parametrize("text, expected", [
    # No names at all: the summary cannot say who is who.
    ("PI\n+\n+7776FU\n'summary:toryo:a win:b lose\n", "do not match"),
    # One name for both players: the order of a win/lose cannot be told ...
    ("N+x\nN-x\nPI\n+\n+7776FU\n'summary:toryo:x win:x lose\n", "the same name for both players"),
])
def test_summary_without_matching_names_is_an_error(text: str, expected: str) -> None:
    error = parse_one(text)
    assert isinstance(error, KifuError) and expected in error.reason and error.line == text.count("\n")


def test_summary_draw_with_the_same_name_for_both_players_is_a_draw() -> None:
    # ... but a draw is a draw whatever the order.
    record = parse_one("N+x\nN-x\nPI\n+\n+7776FU\n'summary:sennichite:x draw:x draw\n")
    assert isinstance(record, GameRecord)
    assert (record.winner, record.ending) == (Winner.DRAW, Ending.SENNICHITE)


def test_percent_ending_wins_over_a_summary_naming_other_players() -> None:
    # The % ending decides; a summary that matches no player is then simply not used.
    record = parse_one("N+a\nN-b\nPI\n+\n+7776FU\n%TORYO\n'summary:toryo:c lose:d win\n")
    assert isinstance(record, GameRecord) and (record.winner, record.ending) == (Winner.BLACK, Ending.RESIGN)


def test_unknown_special_move_is_an_error() -> None:
    error = parse_one("PI\n+\n+7776FU\n%NOT_A_RESULT\n")
    assert isinstance(error, KifuError) and error.line == 4


# --- multi-game files and errors ------------------------------------------------------------------

def test_multi_game_file_with_bad_games_in_the_middle() -> None:
    items = list(read_record_file(CSA / "multi_bad_middle.csa"))
    assert [type(item).__name__ for item in items] == ["GameRecord", "KifuError", "KifuError", "GameRecord"]
    first, illegal, garbage, last = items
    assert first.moves == ("7g7f", "3c3d") and first.winner is Winner.WHITE    # comma-separated line
    assert (first.black, first.source.line) == ("first", 1)
    assert illegal.path.endswith("multi_bad_middle.csa")
    assert (illegal.line, illegal.ply) == (15, 3) and "+2255KA" in illegal.reason
    assert "multi_bad_middle.csa:15" in str(illegal) and "ply 3" in str(illegal)
    assert (garbage.line, garbage.ply) == (23, 0) and "unrecognised" in garbage.reason
    assert (last.black, last.source.line, last.handicap) == ("fourth", 26, "二枚落ち")
    assert last.moves == ("5a4b", "7g7f") and last.winner is Winner.BLACK


def test_version_line_after_moves_starts_a_new_game() -> None:
    items = list(parse("V2.2\nPI\n+\n+7776FU\n%TORYO\nV2.2\nPI\n+\n+2726FU\n%TORYO\n", "t.csa"))
    assert [item.moves for item in items] == [("7g7f",), ("2g2f",)]
    assert [item.source.line for item in items] == [1, 6]


@pytest.mark.parametrize("text, line, ply", [
    ("PI\n+\n+7776FU\n+3334FU\n", 4, 2),          # wrong side
    ("PI\n+\n+7776FU\n-3334KA\n", 4, 2),          # wrong piece on the square
    ("PI\n+\n+7776FU\n-0055FU\n", 4, 2),          # drop with an empty hand
    ("PI\n+\n+7776FU\n-8899UM\n", 4, 2),          # no piece of the mover there
    ("PI\n+\n+7776F\n", 3, 0),                    # malformed statement
    ("PI\n+\n+7770FU\n", 3, 1),                   # square 0
    ("P1 * \n+\n", 1, 0),                          # short board row
    ("PI11KA\n+\n", 1, 0),                         # PI removes a piece that is not there
    ("P+00OU\n+\n", 1, 0),                         # a king in hand
])
def test_bad_games_are_yielded_errors(text: str, line: int, ply: int) -> None:
    error = parse_one(text)
    assert isinstance(error, KifuError)
    assert (error.line, error.ply) == (line, ply)


def test_only_comments_is_one_error() -> None:
    items = list(parse("'just a comment\n\n", "c.csa"))
    assert len(items) == 1 and isinstance(items[0], KifuError)


# --- start positions, names, ratings, encodings ---------------------------------------------------

def test_handicap_via_pi() -> None:
    record = read_one("handicap_2piece_pi.csa")
    assert record.handicap == "二枚落ち"
    assert record.start_sfen == "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"
    assert record.moves == ("5a4b", "7g7f", "4b3b")
    assert record.winner is Winner.WHITE                     # shitate (black) to move resigned


def test_handicap_via_board_rows() -> None:
    record = read_one("handicap_kyo_board.csa")
    assert record.handicap == "香落ち"
    assert record.start_sfen == "lnsgkgsn1/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"
    assert record.moves == ("3c3d", "7g7f", "2b8h+")
    assert record.winner is Winner.WHITE                     # shitate (black) to move resigned


def test_board_rows_with_hands_and_00al() -> None:
    record = read_one("board_with_hands_al.csa")
    assert record.start_sfen == "5g1nk/7pl/9/9/9/9/9/9/5K3 b RBPrb3g4s3n3l16p 1"
    assert record.handicap == ""
    assert record.moves == ("B*3c", "4a4b")


def test_unnamed_pi_removal_keeps_the_code() -> None:
    record = parse_one("PI11KY21KE\n-\n-3334FU\n")
    assert record.handicap == "PI11KY21KE"
    assert record.start_sfen.startswith("lnsgkgs2/")


def test_board_rows_with_trailing_text_read_as_cshogi_reads_them() -> None:
    # ` *.`, trailing spaces, a tab, `.` and a comment-like tail after nine 3-character cells.
    record = read_one("board_rows_trailing_text.csa")
    assert record.start_sfen == STANDARD_START_SFEN and record.moves == ("7g7f", "3c3d")
    assert record.winner is Winner.WHITE
    cshogi_csa = pytest.importorskip("cshogi.CSA")     # the peer reads the nine cells at fixed columns
    parsed = cshogi_csa.Parser.parse_file(str(CSA / "board_rows_trailing_text.csa"))
    parsed = parsed[0] if isinstance(parsed, list) else parsed
    assert parsed.sfen.split(" ")[:3] == STANDARD_START_SFEN.split(" ")[:3]


EVEN_ROWS = ["-KY-KE-GI-KI-OU-KI-GI-KE-KY", " * -HI *  *  *  *  * -KA * ", "-FU-FU-FU-FU-FU-FU-FU-FU-FU",
             " *  *  *  *  *  *  *  *  * ", " *  *  *  *  *  *  *  *  * ", " *  *  *  *  *  *  *  *  * ",
             "+FU+FU+FU+FU+FU+FU+FU+FU+FU", " * +KA *  *  *  *  * +HI * ", "+KY+KE+GI+KI+OU+KI+GI+KE+KY"]


def _board_with_rank1(row: str) -> str:
    rows = [row] + EVEN_ROWS[1:]
    return "".join(f"P{rank}{text}\n" for rank, text in enumerate(rows, start=1)) + "+\n+7776FU\n%TORYO\n"


@pytest.mark.parametrize("row, reason", [
    ("-KY-KE-GI-KI-OU-KI-GI-KE-XX *.", "bad board cell '-XX'"),          # a malformed cell
    ("-KY-KE-GI-KI-OU-KI-GI-KE-K *.", "bad board cell"),                 # a cell cut short
    ("-KY-KE-GI-KI-OU-KI-GI-KE-KY-KY", "10 cells"),                     # which cell is extra?
    ("-KY-KE-GI-KI-OU-KI-GI-KE-KY *", "10 cells"),                      # a 10th empty cell
    ("-KY-KE-GI-KI-OU-KI-GI-KE-KY * .", "10th cell ' * '"),
    ("-KY-KE-GI-KI-OU-KI-GI-KE *+", "bad board cell"),                  # ` *` then a piece sign: shifted
    ("-KY-KE-GI-KI-OU-KI-GI *.", "bad board cell"),                     # 7 cells and a stray last one
])
def test_board_rows_with_ambiguous_or_malformed_cells_are_refused(row: str, reason: str) -> None:
    error = parse_one(_board_with_rank1(row))
    assert isinstance(error, KifuError) and error.line == 1 and reason in error.reason, error


@pytest.mark.parametrize("row", ["-KY-KE-GI-KI-OU-KI-GI-KE-KY *.", "-KY-KE-GI-KI-OU-KI-GI-KE-KY   ",
                                 "-KY-KE-GI-KI-OU-KI-GI-KE-KY junk", "-KY-KE-GI-KI-OU-KI-GI-KE-KY+XX"])
def test_board_rows_with_an_unambiguous_tail_are_read(row: str) -> None:
    record = parse_one(_board_with_rank1(row))
    assert isinstance(record, GameRecord) and record.start_sfen == STANDARD_START_SFEN, record


@pytest.mark.parametrize("last", [" *.", " *,", " *x", " *.  ' tail"])
def test_board_row_whose_last_empty_cell_has_a_stray_character_is_read_and_reported(last: str) -> None:
    # cshogi reads the nine cells at fixed columns, an unknown last cell as empty: so do we, and say so.
    record = parse_one(_board_with_rank1("-KY-KE-GI-KI-OU-KI-GI-KE" + last))
    assert isinstance(record, GameRecord), record
    assert record.start_sfen.split(" ")[0].startswith("lnsgkgsn1/")
    assert len(record.repairs) == 1 and record.repairs[0].startswith("csa_board_row P1 line 1: last cell")
    cshogi_csa = pytest.importorskip("cshogi.CSA")
    (parsed,) = cshogi_csa.Parser.parse_str("V2.2\n" + _board_with_rank1("-KY-KE-GI-KI-OU-KI-GI-KE" + last))
    assert parsed.sfen.split(" ")[0] == record.start_sfen.split(" ")[0]


def test_clean_board_rows_report_no_repair_and_trailing_text_is_reported() -> None:
    assert parse_one(_board_with_rank1(EVEN_ROWS[0])).repairs == ()
    record = read_one("board_rows_trailing_text.csa")
    assert [r.split(":")[0] for r in record.repairs] == ["csa_board_row P1 line 4", "csa_board_row P3 line 6",
                                                         "csa_board_row P7 line 10"]


def test_compact_board_rows_and_missing_turn_line() -> None:
    rows = ["-KY-KE-GI-KI-OU-KI-GI-KE-KY", " * -HI * * * * * -KA * ", "-FU" * 9, " * " * 9, " * " * 9,
            " * " * 9, "+FU" * 9, " * +KA * * * * * +HI * ", "+KY+KE+GI+KI+OU+KI+GI+KE+KY"]
    text = "".join(f"P{i + 1}{row}\n" for i, row in enumerate(rows)) + "-3334FU\n+7776FU\n"
    record = parse_one(text)
    assert record.start_sfen == STANDARD_START_SFEN.replace(" b ", " w ")
    assert record.moves == ("3c3d", "7g7f")


def test_floodgate_ratings_and_real_record() -> None:
    record = read_one("floodgate_rust_shogi_sample.csa")    # copied from ../shared/kifu
    assert (record.black, record.white) == ("yyr", "tenuki")
    assert (record.black_rating, record.white_rating) == (3749.0, 1910.0)
    assert record.event == "wdoor+floodgate-300-10F+yyr+tenuki+20180722050000"
    assert len(record.moves) == 81 and record.moves[:2] == ("7g7f", "8c8d")
    assert (record.winner, record.ending) == (Winner.BLACK, Ending.RESIGN)


@pytest.mark.parametrize("name, plies, winner, ending", [
    ("wars_tatara122-michael_sun.csa", 119, Winner.BLACK, Ending.TIME_UP),     # SENTE_WIN_TIMEOUT
    ("wars_October_J-michael_sun.csa", 42, Winner.WHITE, Ending.RESIGN),       # GOTE_WIN_TORYO
    ("mogproject_001.csa", 111, Winner.BLACK, Ending.RESIGN),
])
def test_real_records(name: str, plies: int, winner: Winner, ending: Ending) -> None:
    record = read_one(name)
    assert len(record.moves) == plies
    assert (record.winner, record.ending) == (winner, ending)
    assert record.start_sfen == STANDARD_START_SFEN


def test_shift_jis_names() -> None:
    assert (CSA / "shift_jis_names.csa").read_bytes().find("先手名人".encode("cp932")) > 0
    record = read_one("shift_jis_names.csa")
    assert (record.black, record.white, record.event) == ("先手名人", "後手竜王", "第1期テスト戦")


def test_crlf_file_and_crlf_text() -> None:
    data = (CSA / "crlf.csa").read_bytes()
    assert b"\r\n" in data
    record = read_one("crlf.csa")
    assert record.moves == ("7g7f", "3c3d", "8h2b+") and record.white == "crlf_white"
    direct = parse_one(data.decode("ascii"))                 # parse() itself copes with \r\n too
    assert direct.moves == record.moves and direct.winner is Winner.BLACK


def test_header_value_on_the_next_line() -> None:
    record = parse_one("V2.2\nN+\nsibuyuki\nN-\nHashiPona\n$EVENT:\n将棋ウォーズ\nPI\n+\n+7776FU\n%TORYO\n")
    assert (record.black, record.white, record.event) == ("sibuyuki", "HashiPona", "将棋ウォーズ")


def test_trailing_comment_on_a_move_line() -> None:
    record = parse_one("PI\n+\n+7776FU,'* 30 -3334FU\n%KACHI,'* win\n")
    assert record.moves == ("7g7f",) and record.winner is Winner.WHITE


# --- writer round trip ----------------------------------------------------------------------------

ERROR_FIXTURES = {"multi_bad_middle.csa", "summary_other_names.csa"}     # not one readable game


@pytest.mark.parametrize("name", sorted(p.name for p in CSA.glob("*.csa") if p.name not in ERROR_FIXTURES))
def test_format_csa_round_trip_fixtures(name: str) -> None:
    record = read_one(name)
    again = parse_one(format_csa(record), "again.csa")
    assert isinstance(again, GameRecord), again
    assert again.moves == record.moves
    assert again.start_sfen == record.start_sfen
    assert (again.winner, again.ending) == (record.winner, record.ending)
    assert (again.black, again.white, again.handicap) == (record.black, record.white, record.handicap)
    assert (again.black_rating, again.white_rating) == (record.black_rating, record.white_rating)


def test_format_csa_refuses_an_inexpressible_result() -> None:
    record = read_one("ending_toryo.csa")                    # black to move resigned: white won
    wrong = GameRecord(record.start_sfen, record.moves, Winner.BLACK, Ending.RESIGN, record.source, "csa")
    with pytest.raises(ValueError):
        format_csa(wrong)


# --- shared corpora -------------------------------------------------------------------------------

def test_gnushogi_corpus(shared_dir: Path) -> None:
    folder = shared_dir / "kifu-gnushogi"
    if not folder.is_dir():
        pytest.skip("../shared/kifu-gnushogi is absent")
    with open(folder / "SUMMARY.tsv", encoding="utf-8") as handle:
        summary = list(csv.DictReader(handle, delimiter="\t"))
    expected = {(row["file"], int(row["index_in_file"])): row for row in summary}
    seen = 0
    for path in sorted(folder.glob("*.csa")):
        items = list(read_record_file(path))
        errors = [item for item in items if isinstance(item, KifuError)]
        assert not errors, errors[:3]
        for index, record in enumerate(items):
            row = expected[(path.name, index)]
            assert len(record.moves) == int(row["plies"])
            want = {"b": Winner.BLACK, "w": Winner.WHITE, "-": Winner.DRAW}[row["winner"]]
            assert record.winner is want, (path.name, index)
            if row["ending"] == "tsumi":
                assert record.ending is Ending.CHECKMATE
            seen += 1
    assert seen == len(summary) > 0                     # every game SUMMARY.tsv lists, none more


# --- random legal games: format_csa -> parse gives the same game ----------------------------------

STARTS = [
    STANDARD_START_SFEN,
    "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",      # 二枚落ち
    "lnsgkgsn1/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",  # 香落ち
    "5g1nk/7pl/9/9/9/9/9/9/5K3 b RBPrb3g4s3n3l16p 1",                   # board with hands
]
# (ending, rule): who wins, from the side to move after the last move (checked independently here).
RESULTS = [
    (Ending.RESIGN, "opponent"), (Ending.CHECKMATE, "opponent"), (Ending.TIME_UP, "opponent"),
    (Ending.ILLEGAL_MOVE, "opponent"), (Ending.ILLEGAL_MOVE, "mover"), (Ending.ENTERING_KING, "mover"),
    (Ending.OUTE_SENNICHITE, "check"), (Ending.SENNICHITE, "draw"), (Ending.JISHOGI, "draw"),
    (Ending.DRAW, "draw"), (Ending.MAX_MOVES, "draw"), (Ending.INTERRUPTED, "none"),
    (Ending.MATTA, "none"), (Ending.NONE, "none"),
]


def expected_winner(rule: str, final_sfen: str) -> Winner:
    board = shogi.Board(final_sfen)
    to_move = Winner.BLACK if board.turn == shogi.BLACK else Winner.WHITE
    other = Winner.WHITE if to_move is Winner.BLACK else Winner.BLACK
    if rule == "check":       # perpetual check: the checking side loses
        rule = "mover" if board.is_check() else "opponent"
    return {"opponent": other, "mover": to_move, "draw": Winner.DRAW, "none": Winner.UNKNOWN}[rule]


@settings(max_examples=60, deadline=None)
@given(start=st.sampled_from(STARTS), length=st.integers(0, 60), seed=st.integers(0, 2**32 - 1),
       result=st.sampled_from(RESULTS), names=st.sampled_from([("a", "b"), ("先手", "後手"), ("", "")]),
       ratings=st.sampled_from([(None, None), (3500.0, 1234.5)]))
def test_random_legal_games_round_trip(start, length, seed, result, names, ratings) -> None:
    chooser = random.Random(seed)
    position = rules.new_position(start)
    board = shogi.Board(start)
    moves: list[str] = []
    for _ in range(length):
        assert in_check(position.piece_codes(), position.turn) == board.is_check()
        legal = position.legal_usi()
        if not legal:
            break
        move = chooser.choice(sorted(legal))
        position.push_usi(move)
        board.push_usi(move)
        moves.append(move)
    ending, rule = result
    record = GameRecord(start, tuple(moves), expected_winner(rule, position.sfen()), ending,
                        SourceLine("random.csa", 1), "csa", black=names[0], white=names[1],
                        black_rating=ratings[0], white_rating=ratings[1])
    again = parse_one(format_csa(record), "random.csa")
    assert isinstance(again, GameRecord), again
    assert again.moves == record.moves
    assert again.start_sfen == record.start_sfen
    assert (again.winner, again.ending) == (record.winner, record.ending)
    assert (again.black, again.white) == names
    assert (again.black_rating, again.white_rating) == ratings


@pytest.mark.parametrize("token", ["%ERROR", "%FUZUMI"])
def test_other_v22_special_moves_have_no_result(token: str) -> None:
    record = parse_one(f"PI\n+\n+7776FU\n{token}\n")
    assert (record.winner, record.ending) == (Winner.UNKNOWN, Ending.INTERRUPTED)


CSA_ALPHABET = st.sampled_from(list("+-%PIVNT$'/,0123456789 *\n\r\tFUKYEGIAHOTRMLZ:\x00é歩") +
                               ["+7776FU", "-3334FU", "%TORYO", "PI", "P1", "P+00AL", "\n/\n", "GOTE_WIN_"])


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(CSA_ALPHABET, max_size=80))
def test_parse_never_raises_on_garbage(pieces: list[str]) -> None:
    for item in parse("".join(pieces), "fuzz.csa"):
        assert isinstance(item, (GameRecord, KifuError))
        if isinstance(item, KifuError):
            assert item.path == "fuzz.csa" and item.line >= 1


def test_shared_real_csa_games(shared_dir: Path) -> None:
    """Every real_game CSA file of ../shared/kifu reads with DETAILS.tsv's move count and winner."""
    root = shared_dir / "kifu"
    if not (root / "DETAILS.tsv").is_file():
        pytest.skip("../shared/kifu is absent")
    with open(root / "DETAILS.tsv", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle, delimiter="\t")
                if row["format"] == "csa" and row["kind"] == "real_game"]
    assert len(rows) >= 20
    for row in rows:
        (record,) = read_record_file(root / row["local_path"])
        assert isinstance(record, GameRecord), record
        assert len(record.moves) == int(row["mainline_moves"]), row["local_path"]
        # The one that states its result only in free English text ('Sente wins by checkmate.') ends in mate
        # on the board, and the rules decide it (kifu/board_end.py).
        assert record.winner.value == row["winner"], row["local_path"]
        if row["result_marker"] == "comment":
            assert record.ending is Ending.CHECKMATE and record.repairs[-1].startswith("mate_on_board")


@pytest.mark.parametrize("name", ["handicap_2piece_pi.csa", "handicap_kyo_board.csa",
                                  "board_with_hands_al.csa", "ending_tsumi.csa",
                                  "floodgate_rust_shogi_sample.csa", "crlf.csa"])
def test_format_csa_is_read_by_cshogi(name: str) -> None:
    """An independent CSA reader gets the same start position and moves from what format_csa writes."""
    cshogi_csa = pytest.importorskip("cshogi.CSA")
    import cshogi

    record = read_one(name)
    (game,) = cshogi_csa.Parser.parse_str(format_csa(record))
    assert [cshogi.move_to_usi(move) for move in game.moves] == list(record.moves)
    assert shogi.Board(game.sfen).sfen() == record.start_sfen      # same position, canonical hand order
