"""rules/validity.py: each rule refuses the positions that break it (one line naming it), and accepts
every position real games and legal moves reach; the backends refuse, never rewrite, what cannot fit."""

from __future__ import annotations

import random

import pytest
import shogi

from shogi_dnn import kifu, rules
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import (
    IllegalMoveError,
    IllegalPositionError,
    ShogiPosition,
    check_sfen,
    position_factory,
)
from tests.support.paths import DATA

START = STANDARD_START_SFEN
BOARD = START.split()[0]
TSUME = "6l2/6nk1/6R2/5Lppp/9/9/9/9/9 b 2BNr4g4s2n2l15p 1"    # a mate problem: Black has no king


@pytest.mark.parametrize("sfen", [
    START,
    START.rsplit(" ", 1)[0],                                         # no move number
    "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",    # two-piece handicap
    "4k4/9/9/9/9/9/9/9/4K4 b 2R2B4G4S4N4L18P 1",                     # every other piece in Black's hand
    "4k4/9/9/9/9/9/9/9/4K4 w 9P9p 1",                                # 18 pawns across both hands
    "+P3k4/9/9/9/9/9/9/9/4K3+p b - 1",                               # promoted pawns on the last rank
    "4k4/4p4/9/9/4R4/9/9/9/4K4 b - 1",                               # the rook's line to the king blocked
    "4k4/9/9/9/4r4/9/9/9/4K4 b - 1",                                 # the side to move in check: allowed
    "4k4/4p4/9/9/9/9/9/4P4/4K4 b - 1",                               # one pawn each on one file
    "4k4/9/9/9/9/9/9/9/4K4 b P 1",                                   # a count of 1 written without digit
    "4k4/9/9/9/9/9/9/9/4K4 b 1P 1",                                  # ... and with it
])
def test_accepts_positions_games_reach(sfen: str) -> None:
    check_sfen(sfen)
    if len(sfen.split()) == 4:                                       # the backends want the move number
        ShogiPosition(sfen)


@pytest.mark.parametrize("sfen,words", [
    # syntax
    ("lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/LNSGKGSNL b - 1", "8 ranks"),
    ("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNLP b - 1", "has 10 squares"),
    ("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNS+GKGSNL b - 1", "'+G'"),
    ("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSXKGSNL b - 1", "unknown piece letter 'X'"),
    (f"{BOARD} x - 1", "side to move 'x'"),
    (f"{BOARD} b", "needs board, side to move and hands"),
    # hands: refused, never rewritten
    (f"{BOARD} b 300P 1", "hand count 300P does not fit"),
    (f"{BOARD} b 32P 1", "hand count 32P does not fit (a hand holds 1 to 18 pawns)"),
    (f"{BOARD} b 3B 1", "hand count 3B does not fit"),
    (f"{BOARD} b 0P 1", "hand count 0P"),
    (f"{BOARD} b K 1", "the hands 'K'"),
    (f"{BOARD} b P2P 1", "'P' written twice"),
    (f"{BOARD} b 2 1", "the hands '2'"),
])
def test_refuses_bad_text(sfen: str, words: str) -> None:
    with pytest.raises(IllegalPositionError) as info:
        check_sfen(sfen)
    text = str(info.value)
    assert words in text and text.startswith("sfen ") and "\n" not in text


@pytest.mark.parametrize("sfen,message", [
    # piece counts: promoted pieces count with their base kind
    ("4k4/9/9/9/9/9/9/+P8/4K4 b 18P 1", "black has 19 pawns (18 at most)"),
    ("4k4/9/9/9/9/9/9/9/4K4 b 10P9p 1", "19 pawns on the board and in hand (a set has 18): black 10, white 9"),
    ("4k4/9/9/9/9/9/9/9/L3K3L b 3L 1", "black has 5 lances (4 at most)"),
    ("4k4/9/9/9/9/9/9/9/4K4 b 4Nn 1", "5 knights on the board and in hand (a set has 4): black 4, white 1"),
    ("4k4/9/9/9/9/9/9/9/4K4 b 4Ss 1", "5 silvers"),
    ("4k4/9/9/9/9/9/9/9/4K4 b 4Gg 1", "5 golds"),
    ("4k4/9/9/9/9/9/9/+b8/4K4 b 2B 1", "3 bishops on the board and in hand (a set has 2)"),
    ("4k4/9/9/9/9/9/9/+R8/4K4 b 2R 1", "black has 3 rooks (2 at most)"),
    # kings: exactly one each
    ("9/9/9/9/9/9/9/9/4K4 b - 1", "white has no king (exactly one)"),
    ("4k4/9/9/9/9/9/9/9/9 w - 1", "black has no king (exactly one)"),
    ("4k4/9/9/9/9/9/9/9/3KK4 b - 1", "black has 2 kings (exactly one)"),
    # pieces that could never move: pawn/lance on the owner's last rank, knight on its last two
    ("P3k4/9/9/9/9/9/9/9/4K4 b - 1", "black pawn on 9a can never move (unpromoted on its last rank)"),
    ("4k4/9/9/9/9/9/9/9/4K3p w - 1", "white pawn on 1i can never move"),
    ("L3k4/9/9/9/9/9/9/9/4K4 b - 1", "black lance on 9a"),
    ("4k4/9/9/9/9/9/9/9/4K3l b - 1", "white lance on 1i"),
    ("4k4/N8/9/9/9/9/9/9/4K4 b - 1", "black knight on 9b can never move (unpromoted on its second last rank)"),
    ("4k4/9/9/9/9/9/9/9/n3K4 b - 1", "white knight on 9i"),
    ("4k4/9/9/9/9/9/9/8n/4K4 b - 1", "white knight on 1h"),
    # nifu
    ("4k4/9/9/9/4P4/9/9/4P4/4K4 b - 1", "black has two unpromoted pawns on file 5 (nifu)"),
    ("4k4/2p6/9/9/2p6/9/9/9/4K4 b - 1", "white has two unpromoted pawns on file 7"),
    # the side not to move in check
    ("4k4/9/9/9/4R4/9/9/9/4K4 b - 1", "white (not to move) is in check: black's R on 5e attacks its king on 5a"),
    ("4k4/4P4/9/9/9/9/9/9/4K4 b - 1", "black's P on 5b attacks"),
    ("4k4/9/3N5/9/9/9/9/9/4K4 b - 1", "black's N on 6c attacks"),
    ("4k4/9/9/9/8B/9/9/9/4K4 b - 1", "black's B on 1e attacks its king on 5a"),
    ("9/9/9/9/9/9/4k4/4K4/9 w - 1", "black (not to move) is in check: white's K on 5g attacks its king on 5h"),
    ("4k4/9/9/9/9/9/4l4/9/4K4 w - 1", "black (not to move) is in check: white's L on 5g attacks its king on 5i"),
    ("4k4/9/9/9/9/9/9/3+b5/4K4 w - 1", "white's +B on 6h attacks"),
])
def test_each_rule(sfen: str, message: str) -> None:
    with pytest.raises(IllegalPositionError) as info:
        check_sfen(sfen)
    text = str(info.value)
    assert message in text and text.startswith("sfen " + " ".join(sfen.split()[:3]) + ": ")


def test_mate_problems_need_no_attacker_king_in_records() -> None:
    """A record file may hold a mate problem (no Black king); a position given by hand may not."""
    check_sfen(TSUME, require_kings=False)
    assert ShogiPosition(TSUME).sfen().split()[0] == TSUME.split()[0]
    with pytest.raises(IllegalPositionError, match="black has no king"):
        check_sfen(TSUME)
    with pytest.raises(IllegalPositionError, match="black has no king"):
        rules.position_from_sfen(TSUME)
    with pytest.raises(IllegalPositionError, match="2 kings"):      # two kings stay refused
        check_sfen("4k4/9/9/9/9/9/9/9/3KK4 b - 1", require_kings=False)


@pytest.mark.parametrize("backend", rules.available_backends())
@pytest.mark.parametrize("hands,words", [("300P", "300P does not fit"), ("32P", "32P does not fit"),
                                          ("10P", "black has 19 pawns")])
def test_backends_refuse_never_rewrite(backend: str, hands: str, words: str) -> None:
    """cshogi once turned `300P` into `4L12P` and `32P` into an empty hand; python-shogi kept 300."""
    with pytest.raises(IllegalPositionError, match=words):
        position_factory(backend)(f"{BOARD} b {hands} 1")


def _flip_turn(sfen: str) -> str:
    board, turn, hands, number = sfen.split()
    return f"{board} {'w' if turn == 'b' else 'b'} {hands} {number}"


def test_every_real_position_passes_and_the_check_rule_matches_python_shogi() -> None:
    """Every position of the records under tests/data and of random legal games passes. With the side
    to move swapped, a position is refused for the check rule exactly when python-shogi says the side
    that was to move is in check (an independent reference for the attack tables)."""
    sfens = []
    for path in sorted(p for p in DATA.rglob("*") if p.suffix.lower() in kifu.RECORD_SUFFIXES):
        for item in kifu.read_record_file(path):
            if not isinstance(item, Exception):
                position = ShogiPosition(item.start_sfen)
                for move in item.moves:
                    position.push_usi(move)
                    sfens.append(position.sfen())
    rng = random.Random(7)
    for _ in range(4):
        position = ShogiPosition(START)
        for _ in range(150):
            legal = sorted(position.legal_usi())
            if not legal:
                break
            position.push_usi(rng.choice(legal))
            sfens.append(position.sfen())
            check_sfen(sfens[-1])                       # a game's position: both kings
    checks = 0
    for sfen in sfens:
        check_sfen(sfen, require_kings=False)           # tests/data holds a mate problem (no Black king)
        in_check = shogi.Board(sfen).is_check()
        checks += in_check
        if in_check:
            with pytest.raises(IllegalPositionError, match=r"\(not to move\) is in check"):
                check_sfen(_flip_turn(sfen), require_kings=False)
        else:
            check_sfen(_flip_turn(sfen), require_kings=False)
    print(f"\n{len(sfens)} positions, {checks} with the side to move in check")
    assert len(sfens) > 1000 and checks > 20, (len(sfens), checks)


def test_readers_and_predict_give_one_line(tmp_path) -> None:
    """A record file's impossible start is that game's KifuError; predict's position argument too."""
    from shogi_dnn.analysis import predict
    from shogi_dnn.errors import KifuError

    path = tmp_path / "games.sfen"
    path.write_text(f"sfen {BOARD} b 300P 1\nstartpos moves 7g7f\nsfen {TSUME}\n")
    items = list(kifu.read_record_file(path))
    assert isinstance(items[0], KifuError) and "300P does not fit" in str(items[0])
    assert not isinstance(items[1], Exception) and not isinstance(items[2], Exception)   # a mate problem
    with pytest.raises(KifuError, match="black has no king"):
        predict.read_position(f"sfen {TSUME}")
    with pytest.raises(KifuError, match="<position>:1: sfen .*: black has 2 kings"):
        predict.read_position("sfen 4k4/9/9/9/9/9/9/9/3KK4 b - 1")
    assert predict.read_position("startpos moves 7g7f").moves == ("7g7f",)
    assert issubclass(IllegalPositionError, IllegalMoveError)
