"""engine/search.py: the one-ply choice, deeper search, mates, scores, entering-king declarations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shogi_dnn.dataset import features
from shogi_dnn.engine import search
from shogi_dnn.rules import position_factory
from tests.engine.support import material

MATE_IN_ONE = "4k4/9/4P4/9/9/9/9/9/4K4 b G 1"          # G*5b, guarded by the pawn on 5c
HANGING = "4k4/9/4s4/4p4/9/9/9/4R4/4K4 b - 1"          # R5hx5d wins a pawn and loses the rook to S5cx5d
DECLARE = "K+R+R+B+BGGGS/PPPPPPPPP/9/9/9/9/9/9/k8 b - 1"   # 17 pieces, 33 points in White's camp


@pytest.fixture(params=["python-shogi", "cshogi"])
def new_position(request):
    return position_factory(request.param)


def test_one_ply_is_the_reply_that_leaves_the_opponent_least(new_position) -> None:
    position = new_position("lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2")
    evaluator = material(bias=0.05)
    info = search.Search(evaluator, position, search.Limits(depth=1), multipv=100).run()
    brute = {}
    for move in position.legal_usi():                     # each child evaluated alone
        child = position.copy()
        child.push_usi(move)
        board, hands = features.encode_position(child)
        brute[move] = 1 - float(evaluator.win_probability(board[None], hands[None])[0])
    assert info.nodes == len(brute) and info.depth == 1
    assert [line.move for line in info.lines] == sorted(brute, key=lambda m: -brute[m])
    assert info.lines[0].p == pytest.approx(max(brute.values()))
    assert position.sfen().endswith("w - 2")              # the search played on copies


def test_deeper_search_sees_the_recapture(new_position) -> None:
    position = new_position(HANGING)
    greedy = search.Search(material(), position, search.Limits(depth=1)).run()
    assert greedy.lines[0].move == "5h5d"                 # one ply: a pawn up
    deeper = search.Search(material(), position, search.Limits(nodes=600)).run()
    assert deeper.lines[0].move != "5h5d" and deeper.nodes >= 600 and deeper.depth >= 2


def test_mate_in_one_is_proven(new_position) -> None:
    info = search.Search(material(), new_position(MATE_IN_ONE), search.Limits(nodes=10_000)).run()
    best = info.lines[0]
    assert (best.move, best.mate, best.p) == ("G*5b", 1, 1.0)
    assert info.nodes < 10_000                            # a proven root ends the search


def test_back_up_proves_wins_and_losses() -> None:
    factory = position_factory()
    node = search.Node(factory(MATE_IN_ONE), ["a", "b"])
    lost, won, open_ = (search.Node(factory(MATE_IN_ONE), [] if v is None else ["x"]) for v in (None, 1, 2))
    won.value, won.proven, won.plies = 1.0, True, 2                  # the opponent mates in 2
    open_.value = 0.3
    node.children = [won, open_]
    node.back_up()
    assert node.value == pytest.approx(0.7) and not node.proven
    node.children = [won, lost]                                     # a reply leaves the opponent mated
    node.back_up()
    assert (node.value, node.proven, node.plies) == (1.0, True, 1)
    node.children = [won, won]                                      # every reply loses
    node.back_up()
    assert (node.value, node.proven, node.plies) == (0.0, True, 3)
    mated = factory("4k4/4G4/4P4/9/9/9/9/9/4K4 w - 1")               # White is mated: no legal move
    assert search.Search(material(), mated, search.Limits(depth=1)).run().lines == ()


def test_stop_and_node_limits() -> None:
    position = position_factory()(HANGING)
    stopped = search.Search(material(), position, search.Limits(infinite=True))
    stopped.stop.set()
    assert stopped.run().nodes == len(position.legal_usi())   # the root is always expanded
    limited = search.Search(material(), position, search.Limits(nodes=500)).run()
    assert 500 <= limited.nodes < 500 + 200


def test_score_scale() -> None:
    assert search.score_cp(0.5) == 0
    assert search.score_cp(1 / (1 + math.exp(-1))) == round(search.EVAL_SCALE) == 756
    assert search.score_cp(1 / (1 + math.exp(2))) == -1512
    assert search.score_cp(1.0) == search.MAX_CP and search.score_cp(0.0) == -search.MAX_CP
    assert search.score_cp(1e-30) == -search.MAX_CP


def test_declaration(new_position) -> None:
    position = new_position(DECLARE)
    assert search.declaration_win(position, "CSARule27") and search.declaration_win(position, "CSARule24")
    assert not search.declaration_win(position, "NoEnteringKing")
    assert not search.declaration_win(new_position("K+R+R+B+BGGGS/9/9/9/9/9/9/9/k8 b 9P 1"), "CSARule27")  # 8 pieces
    # 10 pieces but too few points (the tokin on 1a: a pawn could never stand there unpromoted)
    assert not search.declaration_win(new_position("KGGGSSSS+P/PP7/9/9/9/9/9/9/k8 b - 1"), "CSARule27")
    start = new_position("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1")
    assert not search.declaration_win(start, "CSARule27")


def test_multipv_lines_are_ordered() -> None:
    info = search.Search(material(), position_factory()(HANGING), search.Limits(nodes=400), multipv=4).run()
    assert len(info.lines) == 4
    values = [line.p for line in info.lines]
    assert values == sorted(values, reverse=True) and all(line.pv[0] == line.move for line in info.lines)
    assert np.isfinite(info.nps)
