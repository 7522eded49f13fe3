"""kifu.repetition and convert's use of it: records written for the fourfold-repetition rule."""

from __future__ import annotations

import pytest

from shogi_dnn.convert.filters import ConvertSettings
from shogi_dnn.convert.worker import SKIP_REPETITION, SourcePiece, process_file
from shogi_dnn.dataset.features import encode_game, first_fourfold, repeated_games
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import read_record_bytes
from shogi_dnn.kifu.record import Ending, GameRecord, Winner
from shogi_dnn.kifu.repetition import fourfold_index, settle

CYCLE = ["+5948OU", "-5142OU", "+4859OU", "-4251OU"]       # back to the start position every 4 plies


def csa(moves: list[str], ending: str) -> bytes:
    return ("V2.2\nN+a\nN-b\nPI\n+\n" + "\n".join(moves) + f"\n{ending}\n").encode()


def one(data: bytes) -> GameRecord:
    (record,) = read_record_bytes(data, "g.csa")
    assert isinstance(record, GameRecord), record
    return record


def test_fourfold_index_counts_the_fourth_occurrence() -> None:
    assert fourfold_index("abacadae") == 6 and fourfold_index("abcabc") == -1


def test_game_played_past_a_fourfold_repetition_is_cut_to_a_draw() -> None:
    record = one(csa(CYCLE * 3 + ["+7776FU", "-3334FU"], "%TORYO"))
    encoded = encode_game(record)
    assert repeated_games([encoded]) == [0] and first_fourfold(encoded) == 12
    settled = settle(record, 12)
    assert settled.kind == "cut_sennichite" and settled.plies_cut == 2
    assert len(settled.record.moves) == 12 and settled.record.winner is Winner.DRAW


def test_claimed_repetition_after_two_moves_is_refused() -> None:
    record = one(csa(CYCLE[:2], "%SENNICHITE"))
    with pytest.raises(KifuError, match="unconfirmed_claim"):
        settle(record, first_fourfold(encode_game(record)))


def test_recorded_repetition_is_kept() -> None:
    record = one(csa(CYCLE * 3, "%SENNICHITE"))
    settled = settle(record, first_fourfold(encode_game(record)))
    assert settled.kind == "sennichite" and settled.record == record


def test_perpetual_check_loses_for_the_checker() -> None:
    # Black's rook checks along rank a, then rank b, as White's king steps 5a-5b-5a: every Black move checks.
    start = "4k4/R8/9/9/9/9/9/9/4K4 b - 1"
    moves = ["9b9a", "5a5b", "9a9b", "5b5a"] * 3
    from shogi_dnn.kifu.record import SourceLine
    record = GameRecord(start, tuple(moves), Winner.DRAW, Ending.SENNICHITE, SourceLine("p.kif", 1), "kif")
    settled = settle(record, first_fourfold(encode_game(record)))
    assert (settled.record.winner, settled.record.ending) == (Winner.WHITE, Ending.OUTE_SENNICHITE)


def test_convert_cuts_refuses_and_reports_by_kind() -> None:
    data = csa(CYCLE * 3 + ["+7776FU"], "%TORYO") + b"/\n" + csa(CYCLE[:2], "%SENNICHITE")
    result = process_file(SourcePiece("two.csa", data), ConvertSettings(val_fraction=0, test_fraction=0), "auto")
    assert len(result.games) == 1 and len(result.games[0].positions) == 13
    assert result.skipped[SKIP_REPETITION] == 1
    assert result.fidelity == {"repetition:cut_sennichite": 1, "repetition:unconfirmed_claim": 1}


def test_compiled_fourfold_rows_agree_with_first_fourfold(monkeypatch: pytest.MonkeyPatch) -> None:
    """fast_encoding.fourfold_rows (one hashed pass over the packed rows, issue 32) finds what
    first_fourfold finds from the boards; repeated_games names those games, a subset of the numpy sort's."""
    import numpy as np

    from shogi_dnn.dataset import fast_encoding
    from tests.support.kifugen import random_games
    fourfold = fast_encoding.fourfold_rows
    if fourfold is None:
        pytest.skip("the C extension is not built")
    records = [one(csa(CYCLE * 3 + ["+7776FU"], "%TORYO")), one(csa(CYCLE * 2 + ["+7776FU"], "%TORYO")),
               one(csa(["+7776FU", "-3334FU", *CYCLE * 3], "%TORYO")),
               *[g for g in random_games(3, 30) if g.has_result]]
    games = [encode_game(r) for r in records]
    for game in games:
        found = fourfold(game.pieces, game.promoted, int(game.turn[0]))
        assert found == first_fourfold(game)
    assert [first_fourfold(g) for g in games[:3]] == [12, -1, 14]
    compiled = repeated_games(games)
    monkeypatch.setattr(fast_encoding, "fourfold_rows", None)              # the numpy sort
    assert set(compiled) <= set(repeated_games(games)) and compiled[:2] == [0, 2]
    assert compiled == [i for i, g in enumerate(games) if first_fourfold(g) >= 0]
    # the side to move counts: the same rows every ply are a fourfold one at row 6 (rows 0, 2, 4, 6)
    rows, flags = np.zeros((9, 40), np.uint8), np.zeros((9, 5), np.uint8)
    assert fourfold(rows, flags, 1) == 6
    flags[4:6, 0] = 1                                             # a promoted piece: other positions
    assert fourfold(rows, flags, 0) == 8
    with pytest.raises(ValueError, match="promoted"):
        fourfold(rows, flags[:3], 0)


def test_compiled_in_check_rows_agree_with_in_check() -> None:
    """fast_encoding.in_check_rows (the checks of a repetition's positions, issue 32) is rules.in_check
    of every row, seen from the side to move, on thousands of positions of random games."""
    import numpy as np

    from shogi_dnn.dataset import fast_encoding
    from shogi_dnn.rules import BLACK, in_check
    from tests.support.kifugen import random_games
    if fast_encoding.in_check_rows is None:
        pytest.skip("the C extension is not built")
    games = np.concatenate([encode_game(g).board for g in random_games(11, 20) if g.has_result])
    rng = np.random.default_rng(5)           # and random boards: a Black king among eight random pieces
    scattered = np.zeros((3000, 81), np.uint8)
    for row in scattered:
        squares = rng.choice(81, 9, replace=False)
        row[squares[0]] = 8
        row[squares[1:]] = rng.choice([c for c in range(1, 29) if c != 8], 8)
    boards = np.concatenate([games, scattered])
    expected = [in_check(row.tolist(), BLACK) for row in boards]
    assert [bool(flag) for flag in fast_encoding.in_check_rows(boards)] == expected
    assert 300 < sum(expected) < len(expected) - 1000
    no_king = np.zeros((1, 81), np.uint8)
    no_king[0, 40] = 7 + 14                                            # a White rook and no Black king
    assert fast_encoding.in_check_rows(no_king) == b"\x00"
