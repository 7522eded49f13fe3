"""A record without a result whose last position is checkmate is decided by the rules (kifu/board_end.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shogi_dnn import kifu
from shogi_dnn.convert.filters import SKIP_NO_RESULT, SKIP_PROBLEM, ConvertSettings
from shogi_dnn.convert.run import run_convert
from shogi_dnn.kifu.board_end import MATE_ON_BOARD
from shogi_dnn.kifu.csa_writer import format_csa
from shogi_dnn.kifu.record import Ending, GameRecord, SourceLine, Winner
from tests.support.paths import SHARED

# Black drops a gold on 5b, guarded by the pawn on 5c: White's king on 5a is mated. Both kings on the board.
MATE_START = "4k4/9/4P4/9/9/9/9/9/4K4 b G 1"
# The same start with the other move: 5b is not mate (the king takes nothing, but steps to 4a).
NOT_MATE_MOVE = "5i5h"
# A tsume problem: the defender's king alone (the attacker has none); its solution ends in mate by design.
PROBLEM_START = "4k4/9/4P4/9/9/9/9/9/9 b G2r2b3g4s4n4l17p 1"


def _one(text: str, name: str = "game.csa") -> GameRecord:
    items = list(kifu.read_record_bytes(text.encode(), name))
    assert len(items) == 1 and isinstance(items[0], GameRecord), items
    return items[0]


def _csa(start: str, *moves: str) -> str:
    """A CSA record of `moves` from `start` with no result (no `%` line), as format_csa writes it."""
    record = GameRecord(start, moves, Winner.UNKNOWN, Ending.NONE, SourceLine("x", 1), "csa")
    return format_csa(record)


def test_a_mate_on_the_board_is_a_win_for_the_side_that_gave_it() -> None:
    record = _one(_csa(MATE_START, "G*5b"))
    assert (record.winner, record.ending) == (Winner.BLACK, Ending.CHECKMATE)
    assert [r.split(" ")[0] for r in record.repairs] == [MATE_ON_BOARD]
    assert "G*5b" in record.repairs[0] and "black won" in record.repairs[0]


def test_white_giving_mate_wins_for_white() -> None:
    start = "4k4/9/9/9/9/9/4p4/9/4K4 w g 1"      # White drops a gold on 5h, guarded by its pawn on 5g
    record = _one(_csa(start, "G*5h"))
    assert (record.winner, record.ending) == (Winner.WHITE, Ending.CHECKMATE)


def test_no_mate_no_result_and_a_problem_is_not_a_game() -> None:
    assert _one(_csa(MATE_START, NOT_MATE_MOVE)).winner is Winner.UNKNOWN
    problem = _one(_csa(PROBLEM_START, "G*5b"))
    assert problem.winner is Winner.UNKNOWN and not problem.repairs
    assert ConvertSettings().filters.skip_reason(problem) == SKIP_PROBLEM
    assert ConvertSettings().filters.skip_reason(_one(_csa(MATE_START, NOT_MATE_MOVE))) == SKIP_NO_RESULT
    # an SFEN / USI line is a position to look at, not a game: it stays without a result
    assert _one(f"sfen {MATE_START} moves G*5b\n", "line.sfen").winner is Winner.UNKNOWN


def test_a_recorded_result_is_kept() -> None:
    record = _one("V2.2\nPI\n+\n+7776FU\n-3334FU\n%TORYO\n", "game.csa")     # Black, to move, resigns
    assert (record.winner, record.ending) == (Winner.WHITE, Ending.RESIGN) and not record.repairs


def test_convert_trains_the_mated_game_and_counts_it(tmp_path: Path) -> None:
    path = tmp_path / "games.csa"
    path.write_text(_csa(MATE_START, "G*5b") + "/\n" + _csa(PROBLEM_START, "G*5b").split("\n", 1)[1])
    report = run_convert([path], tmp_path / "out", ConvertSettings(val_fraction=0.0), workers=1)
    assert report.converted == 1
    assert report.fidelity[f"repaired:{MATE_ON_BOARD}"] == 1
    assert report.skipped[SKIP_PROBLEM] == 1


REAL = [("ctgk__vshogi/python/tests/assets/kifu_example.csa", 133),       # last line: 'Sente wins by checkmate.
        ("sugyan__shogi-kifu-converter/data/tests/ki2/simple.ki2", 167)]


@pytest.mark.corpus
@pytest.mark.parametrize("relative,moves", REAL)
def test_real_records_that_end_in_mate_without_a_result_word(relative: str, moves: int) -> None:
    path = SHARED / "kifu" / relative
    if not path.exists():
        pytest.skip(f"{path} absent")
    (record,) = [r for r in kifu.read_record_file(path) if isinstance(r, GameRecord)]
    assert len(record.moves) == moves
    assert (record.winner, record.ending) == (Winner.BLACK, Ending.CHECKMATE)
