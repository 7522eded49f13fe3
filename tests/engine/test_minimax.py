"""engine/minimax.py (the best-first search to a depth): the one-ply choice against brute force, a deeper
search, the quiescence at one ply, mates, stop and node limits, MultiPV."""

from __future__ import annotations

import numpy as np
import pytest

from shogi_dnn.dataset import features
from shogi_dnn.engine import limits, minimax
from shogi_dnn.rules import position_factory
from tests.engine.support import HANGING, MATE_IN_ONE, material


@pytest.fixture(params=["python-shogi", "cshogi"])
def new_position(request):
    return position_factory(request.param)


def test_one_ply_is_the_reply_that_leaves_the_opponent_least(new_position) -> None:
    position = new_position("lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2")
    evaluator = material(bias=0.05)
    info = minimax.BestFirst(evaluator, position, limits.Limits(depth=1), multipv=100,
                             settings=limits.Settings(quiescence_plies=0)).run()
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
    greedy = minimax.BestFirst(material(), position, limits.Limits(depth=1)).run()
    assert greedy.lines[0].move == "5h5d"                 # one ply: a pawn up
    quiet = minimax.BestFirst(material(), position, limits.Limits(depth=1),
                              settings=limits.Settings(quiescence_plies=2)).run()
    assert quiet.lines[0].move != "5h5d"                  # one ply and the recapture seen by quiescence
    deeper = minimax.BestFirst(material(), position, limits.Limits(nodes=600)).run()
    assert deeper.lines[0].move != "5h5d" and deeper.nodes >= 600 and deeper.depth >= 2


def test_mate_in_one_is_proven(new_position) -> None:
    info = minimax.BestFirst(material(), new_position(MATE_IN_ONE), limits.Limits(nodes=10_000)).run()
    best = info.lines[0]
    assert (best.move, best.mate, best.p) == ("G*5b", 1, 1.0)
    assert info.nodes < 10_000                            # a proven root ends the search


def test_back_up_proves_wins_and_losses() -> None:
    factory = position_factory()
    node = minimax.Node(factory(MATE_IN_ONE), ["a", "b"])
    lost, won, open_ = (minimax.Node(factory(MATE_IN_ONE), [] if v is None else ["x"]) for v in (None, 1, 2))
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
    assert minimax.BestFirst(material(), mated, limits.Limits(depth=1)).run().lines == ()


def test_stop_and_node_limits() -> None:
    position = position_factory()(HANGING)
    stopped = minimax.BestFirst(material(), position, limits.Limits(infinite=True))
    stopped.stop.set()
    assert stopped.run().nodes == len(position.legal_usi())   # the root is always expanded
    limited = minimax.BestFirst(material(), position, limits.Limits(nodes=500)).run()
    assert 500 <= limited.nodes < 500 + 200


def test_multipv_lines_are_ordered() -> None:
    position = position_factory()(HANGING)
    info = minimax.BestFirst(material(), position, limits.Limits(nodes=400), multipv=4).run()
    assert len(info.lines) == 4
    values = [line.p for line in info.lines]
    assert values == sorted(values, reverse=True) and all(line.pv[0] == line.move for line in info.lines)
    assert np.isfinite(info.nps)
