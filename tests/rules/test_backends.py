"""The cshogi backend (extra `fast`) behaves exactly like python-shogi: positions, legal moves, encoding."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from shogi_dnn import rules
from shogi_dnn.dataset.features import encode_game
from shogi_dnn.errors import ConfigError
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import IllegalMoveError, ShogiPosition, position_factory, resolve_backend

cshogi_backend = pytest.importorskip("shogi_dnn.rules.cshogi_backend")
CshogiPosition = cshogi_backend.CshogiPosition

HANDICAP_2PIECE = "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"
DROP_MATE = "k8/9/1GN6/9/9/9/9/9/8K b P 1"      # P*9b would be mate by a pawn drop: illegal


def _random_game(rng: random.Random, sfen: str, plies: int) -> list[str]:
    position = ShogiPosition(sfen)
    moves = []
    for _ in range(plies):
        legal = sorted(position.legal_usi())
        if not legal:
            break
        moves.append(rng.choice(legal))
        position.push_usi(moves[-1])
    return moves


@pytest.mark.parametrize("seed,sfen", [(1, STANDARD_START_SFEN), (2, STANDARD_START_SFEN), (3, HANDICAP_2PIECE)])
def test_same_positions_and_legal_moves(seed: int, sfen: str) -> None:
    moves = _random_game(random.Random(seed), sfen, 160)
    a, b = ShogiPosition(sfen), CshogiPosition(sfen)
    for move in moves + [None]:
        assert sorted(a.legal_usi()) == sorted(b.legal_usi())
        assert (a.sfen(), a.turn, a.piece_codes(), a.hand_counts(), a.is_checkmate()) == \
               (b.sfen(), b.turn, b.piece_codes(), b.hand_counts(), b.is_checkmate())
        assert [a.piece_type_at(s) for s in range(81)] == [b.piece_type_at(s) for s in range(81)]
        if move is not None:
            a.push_usi(move)
            b.push_usi(move)


@pytest.mark.parametrize("sfen,move", [
    (DROP_MATE, "P*9b"),                          # pawn-drop mate
    ("k8/9/9/9/9/9/P8/9/8K b P 1", "P*9e"),       # two pawns on a file
    (STANDARD_START_SFEN, "7g7f+"),               # promotion outside the zone
    (STANDARD_START_SFEN, "7g7e"),                # pawn moving two squares
    (STANDARD_START_SFEN, "5i4i"),                # onto an own piece
    ("k8/9/9/9/9/9/9/9/8K b P 1", "P*5a"),         # a pawn dropped where it can never move
    ("k8/9/9/2N6/9/9/9/9/8K b - 1", "7d6b"),       # a knight moved to rank b without promoting
    ("k8/9/9/9/9/9/9/9/4G3K b - 1", "5i5h+"),       # gold never promotes
    (STANDARD_START_SFEN, "P*5e"),                # drop without a piece in hand
    (STANDARD_START_SFEN, "zz"),                  # malformed
])
def test_both_reject_illegal_moves(sfen: str, move: str) -> None:
    for factory in (ShogiPosition, CshogiPosition):
        position = factory(sfen)
        assert move not in position.legal_usi()
        with pytest.raises(IllegalMoveError):
            position.push_usi(move)


def _accepts(position_factory, sfen: str, usi: str) -> bool:
    try:
        position_factory(sfen).push_usi(usi)
    except IllegalMoveError:
        return False
    return True


def test_every_candidate_move_judged_alike() -> None:
    """All 13k from-to(+promote) and drop strings, in positions along random games: cshogi's own
    is_legal accepts promotions outside the zone and dead pawns/lances/knights, the backend must not."""
    squares = [f"{f}{r}" for f in range(1, 10) for r in "abcdefghi"]
    candidates = [a + b + p for a in squares for b in squares if a != b for p in ("", "+")]
    candidates += [f"{kind}*{b}" for kind in "PLNSGBR" for b in squares]
    rng = random.Random(5)
    for plies in (0, 41, 90, 141, 175):           # both sides to move
        position = ShogiPosition(STANDARD_START_SFEN)
        for move in _random_game(rng, STANDARD_START_SFEN, plies):
            position.push_usi(move)
        sfen, legal = position.sfen(), set(position.legal_usi())
        board = CshogiPosition(sfen)._board
        accepted = set()
        for usi in candidates:
            probe = CshogiPosition.__new__(CshogiPosition)
            probe._board = board.copy()
            if _accepts(lambda _, p=probe: p, sfen, usi):
                accepted.add(usi)
        assert accepted == legal, (sfen, accepted ^ legal)


def test_stalemate_is_not_checkmate() -> None:
    stalemate = "8k/9/9/9/9/9/1+r7/9/K8 b - 1"     # the black king has no move but is not in check
    mate = "1l6k/9/9/9/9/9/9/1+r7/K8 b - 1"        # dragon on 8h, guarded by the lance: mate
    for factory in (ShogiPosition, CshogiPosition):
        assert factory(stalemate).legal_usi() == [] and not factory(stalemate).is_checkmate()
        assert factory(mate).legal_usi() == [] and factory(mate).is_checkmate()


def test_invalid_sfen_is_an_error_not_a_crash() -> None:
    for factory in (ShogiPosition, CshogiPosition):
        with pytest.raises(IllegalMoveError):
            factory("garbage")


def test_encode_game_identical() -> None:
    rng = random.Random(7)
    for winner, sfen in ((Winner.BLACK, STANDARD_START_SFEN), (Winner.DRAW, HANDICAP_2PIECE)):
        record = GameRecord(sfen, tuple(_random_game(rng, sfen, 200)), winner, Ending.RESIGN,
                            SourceLine("x.csa", 1), "csa")
        a, b = encode_game(record, ShogiPosition), encode_game(record, CshogiPosition)
        for key in ("board", "hands", "turn", "ply", "move", "win"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
            assert getattr(a, key).dtype == getattr(b, key).dtype


def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rules.BACKEND_ENV, raising=False)
    assert resolve_backend() == "cshogi"            # automatic: the fastest installed
    assert position_factory() is CshogiPosition
    assert position_factory("python-shogi") is ShogiPosition
    monkeypatch.setenv(rules.BACKEND_ENV, "python-shogi")
    assert resolve_backend() == "python-shogi" and resolve_backend("cshogi") == "cshogi"
    with pytest.raises(ConfigError, match="unknown rules backend"):
        resolve_backend("gnugo")


def test_auto_falls_back_without_cshogi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rules.BACKEND_ENV, raising=False)
    # cshogi not importable (as on a machine without the `fast` extra): the real import fails.
    monkeypatch.setitem(sys.modules, "cshogi", None)
    monkeypatch.delitem(sys.modules, "shogi_dnn.rules.cshogi_backend", raising=False)
    rules.available_backends.cache_clear()
    try:
        assert rules.available_backends() == ("python-shogi",)
        assert resolve_backend() == "python-shogi"
        with pytest.raises(ConfigError, match="not installed"):
            resolve_backend("cshogi")
    finally:
        rules.available_backends.cache_clear()


def test_copy_is_independent_and_in_check_agrees() -> None:
    moves = _random_game(random.Random(7), STANDARD_START_SFEN, 120)
    for factory in (ShogiPosition, CshogiPosition):
        position, reference = factory(STANDARD_START_SFEN), ShogiPosition(STANDARD_START_SFEN)
        for move in moves:
            twin = position.copy()
            assert (twin.sfen(), twin.legal_usi()) == (position.sfen(), position.legal_usi())
            twin.push_usi(move)                       # the copy moves, the original stays
            assert twin.sfen() != position.sfen()
            assert position.in_check() == reference.in_check()
            position.push_usi(move)
            reference.push_usi(move)
        assert position.sfen() == reference.sfen()
    checked = "4k4/9/4P4/9/9/9/9/9/4K4 w g 1"          # no check; a gold on 5b gives one
    assert not CshogiPosition(checked).in_check()
    assert CshogiPosition("4k4/4G4/4P4/9/9/9/9/9/4K4 w - 1").in_check()
    assert ShogiPosition("4k4/4G4/4P4/9/9/9/9/9/4K4 w - 1").in_check()
