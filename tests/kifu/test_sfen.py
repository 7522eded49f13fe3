"""SFEN/USI line reader: one game a line, bad lines reported alone, results unknown."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shogi_dnn import rules
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import STANDARD_START_SFEN, Ending, GameRecord, Winner, read_record_file
from shogi_dnn.kifu.sfen import parse, parse_line
from tests.support.paths import DATA

SFEN = DATA / "sfen"
TWO_PIECE = "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"


def test_games_file_line_by_line() -> None:
    items = list(read_record_file(SFEN / "games.sfen"))
    assert len(items) == 9                                   # comment and blank lines skipped
    good = [item for item in items if isinstance(item, GameRecord)]
    bad = [item for item in items if isinstance(item, KifuError)]
    assert [record.source.line for record in good] == [3, 4, 5, 6, 8, 9, 11]
    assert good[0].moves == ("7g7f", "3c3d", "8h2b+", "3a2b", "B*4e")
    assert good[0].start_sfen == STANDARD_START_SFEN
    assert good[1].moves == ("2g2f", "8c8d")                 # leading `position`
    assert (good[2].start_sfen, good[2].moves) == (TWO_PIECE, ("5a4b", "7g7f"))
    # hands given in any order come back in the canonical SFEN order
    assert good[3].start_sfen == "4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1"
    assert good[4].start_sfen.endswith(" b P2p 12")          # move number kept
    assert good[5].start_sfen == STANDARD_START_SFEN and good[5].moves == ()   # move number left out
    assert good[6].moves == ()                               # bare `startpos`
    for record in good:
        assert (record.winner, record.ending, record.format) == (Winner.UNKNOWN, Ending.NONE, "sfen")
        assert not record.has_result
    illegal, syntax = bad
    assert (illegal.line, illegal.ply) == (7, 3) and "2h2b" in illegal.reason
    assert illegal.path.endswith("games.sfen") and "games.sfen:7" in str(illegal)
    assert (syntax.line, syntax.ply) == (10, 0)


def test_crlf() -> None:
    assert b"\r\n" in (SFEN / "crlf.usi").read_bytes()
    records = list(read_record_file(SFEN / "crlf.usi"))
    assert [r.moves for r in records] == [("7g7f", "3c3d"), ("2g2f",)]
    direct = list(parse((SFEN / "crlf.usi").read_bytes().decode("ascii"), "crlf.usi"))
    assert [r.moves for r in direct] == [("7g7f", "3c3d"), ("2g2f",)]


def test_real_files() -> None:
    """Copied from ../shared/kifu (hnakada123/ShogiBoardQ and sunfish-shogi/shogihome test data)."""
    src05 = list(read_record_file(SFEN / "real_src05.sfen"))
    assert [len(r.moves) for r in src05] == [5, 6]
    positions = list(read_record_file(SFEN / "real_test_collection.sfen"))   # bare SFEN lines
    assert [r.start_sfen.split()[-1] for r in positions] == ["1", "2", "3"]
    assert all(r.moves == () for r in positions)
    (resigned,) = read_record_file(SFEN / "real_test_resign.usi")          # `... 3c3d resign`
    assert resigned.moves == ("7g7f", "3c3d")
    assert (resigned.winner, resigned.ending) == (Winner.WHITE, Ending.RESIGN)


def test_win_token_is_an_entering_king_declaration() -> None:
    record = parse_line("startpos moves 7g7f win")
    assert (record.winner, record.ending) == (Winner.WHITE, Ending.ENTERING_KING)


@pytest.mark.parametrize("line, ply", [
    ("sfen lnsgkgsnl/1r5b1 b - 1", 0),                      # too few rows
    ("sfen lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL x - 1", 0),
    ("sfen lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b Q 1", 0),
    ("sfen moves 7g7f", 0),
    ("kifu 7g7f", 0),
    ("startpos moves 7g7f 7g7f", 2),
    ("startpos moves 7g7f 3c3d 8h2b+ 3a2b B*4e B*5e B*6e", 7),   # no bishop left in hand
    ("startpos moves 7g7x", 1),
])
def test_bad_lines(line: str, ply: int) -> None:
    with pytest.raises(KifuError) as info:
        parse_line(line, 5, "bad.sfen")
    assert (info.value.path, info.value.line, info.value.ply) == ("bad.sfen", 5, ply)
    items = list(parse(f"startpos\n{line}\nstartpos moves 2g2f\n", "bad.sfen"))
    assert [type(item).__name__ for item in items] == ["GameRecord", "KifuError", "GameRecord"]


def test_empty_file_is_one_error() -> None:
    items = list(parse("# nothing\n\n", "empty.sfen"))
    assert len(items) == 1 and isinstance(items[0], KifuError)


@settings(max_examples=30, deadline=None)
@given(start=st.sampled_from([STANDARD_START_SFEN, TWO_PIECE]),
       length=st.integers(0, 60), seed=st.integers(0, 2**32 - 1))
def test_random_legal_games_round_trip(start: str, length: int, seed: int) -> None:
    chooser = random.Random(seed)
    position = rules.new_position(start)
    moves: list[str] = []
    for _ in range(length):
        legal = sorted(position.legal_usi())
        if not legal:
            break
        moves.append(chooser.choice(legal))
        position.push_usi(moves[-1])
    line = f"position sfen {start} moves {' '.join(moves)}"
    record = parse_line(line)
    assert (record.start_sfen, record.moves) == (start, tuple(moves))


def test_opening_prefix_corpus(shared_dir: Path) -> None:
    """nodchip/TanukiColiseum records2016_10818.sfen: 10,831 floodgate openings of 24 plies."""
    path = shared_dir / "kifu" / "nodchip__TanukiColiseum" / "records2016_10818.sfen"
    if not path.is_file():
        pytest.skip("records2016_10818.sfen is absent")
    items = list(read_record_file(path))
    errors = [item for item in items if isinstance(item, KifuError)]
    assert not errors, errors[:3]
    assert len(items) == 10831
    assert sum(len(record.moves) for record in items) == 259944     # DETAILS.tsv mainline_moves


SFEN_ALPHABET = st.sampled_from(list("lnsgkrbpLNSGKRBP+*/0123456789 bw-\n#abcdefghi\x00歩１") +
                                ["startpos", "position ", "sfen ", " moves ", "7g7f", "resign", "\n"])


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(SFEN_ALPHABET, max_size=60))
def test_parse_never_raises_on_garbage(pieces: list[str]) -> None:
    for item in parse("".join(pieces), "fuzz.sfen"):
        assert isinstance(item, (GameRecord, KifuError))
