"""engine/search.py (PUCT): visit counts against a direct re-implementation of the formula, batches with
virtual loss, proven mates in 1 and 3, repetitions and perpetual check inside the tree, declarations,
the tree kept between moves, temperature, the deadline, scores and entering-king declarations."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from shogi_dnn.dataset import features, policy
from shogi_dnn.engine import limits, search
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import declaration_win, position_factory
from tests.engine.support import (
    DECLARE,
    HANGING,
    MATE_IN_ONE,
    MATE_IN_THREE,
    PolicyEvaluator,
    material,
)

OPENING = "lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2"


class _Ref:
    """A node of the reference: the PUCT formula written out, one playout at a time (no batches)."""

    def __init__(self, position) -> None:
        self.position = position
        self.legal = position.legal_usi()
        self.kids: dict[int, _Ref] = {}
        self.priors: list[float] | None = None
        self.n: list[int] = []
        self.w: list[float] = []
        self.visits, self.total = 0, 0.0


def _ref_evaluate(evaluator: PolicyEvaluator, node: _Ref) -> float:
    board, hands = features.encode_position(node.position)
    win, logits = evaluator.evaluate_logits(board[None], hands[None])
    turn = node.position.turn
    labels = [int(policy.move_labels(np.asarray([features.encode_move(m, turn)]))[0]) for m in node.legal]
    exps = [math.exp(float(logits[0, k])) for k in labels]
    node.priors = [e / sum(exps) for e in exps]
    node.n, node.w = [0] * len(node.legal), [0.0] * len(node.legal)
    return float(np.clip(win[0], limits.PROB_CLIP, 1 - limits.PROB_CLIP))


def _ref_playout(evaluator: PolicyEvaluator, node: _Ref, c_puct: float, fpu_reduction: float) -> float:
    """One playout; the value for node's side to move."""
    if node.priors is None:
        value = _ref_evaluate(evaluator, node)
    else:
        fpu = max(0.0, node.total / node.visits - fpu_reduction)
        scores = [(node.w[i] / node.n[i] if node.n[i] else fpu)
                  + c_puct * node.priors[i] * math.sqrt(node.visits) / (1 + node.n[i])
                  for i in range(len(node.legal))]
        i = scores.index(max(scores))                       # the first of equal scores
        if i not in node.kids:
            child = node.position.copy()
            child.push_usi(node.legal[i])
            node.kids[i] = _Ref(child)
        value = 1.0 - _ref_playout(evaluator, node.kids[i], c_puct, fpu_reduction)
        node.n[i] += 1
        node.w[i] += value
    node.visits += 1
    node.total += value
    return value


@pytest.mark.parametrize("c_puct,fpu_reduction", [(1.0, 0.1), (2.5, 0.0), (0.3, 0.3)])
def test_visit_counts_equal_the_formula_written_out(c_puct: float, fpu_reduction: float) -> None:
    factory = position_factory()
    evaluator = PolicyEvaluator(seed=1, scale=0.3)
    playouts = 300
    ref = _Ref(factory(OPENING))
    for _ in range(playouts):
        _ref_playout(evaluator, ref, c_puct, fpu_reduction)
    settings = limits.Settings(c_puct=c_puct, batch_size=1, fpu_reduction=fpu_reduction)
    run = search.Search(PolicyEvaluator(seed=1, scale=0.3), factory(OPENING), limits.Limits(nodes=playouts),
                        settings=settings)
    run.run()
    assert run.nodes == playouts and run.tree.legal == ref.legal
    assert run.tree.edges.n.tolist() == ref.n and sum(n > 0 for n in ref.n) >= 2   # not one move only
    assert run.tree.edges.w == pytest.approx(ref.w)
    deep = next(i for i, child in ref.kids.items() if child.kids)
    assert run.tree.edges.children[deep].edges.n.tolist() == ref.kids[deep].n          # a level down too


def test_priors_are_the_softmax_over_the_legal_moves() -> None:
    position = position_factory()(OPENING)
    evaluator = PolicyEvaluator(seed=2, scale=0.5)
    run = search.Search(evaluator, position, limits.Limits(nodes=1), settings=limits.Settings(batch_size=1))
    run.run()
    ref = _Ref(position)
    _ref_evaluate(evaluator, ref)
    priors = run.tree.edges.priors
    assert priors == pytest.approx(ref.priors) and priors.sum() == pytest.approx(1.0)
    uniform = search.Search(material(), position, limits.Limits(nodes=1)).run()
    assert uniform.nodes >= 1


def test_batches_spread_by_virtual_loss() -> None:
    evaluator = PolicyEvaluator(seed=3)
    run = search.Search(evaluator, position_factory()(OPENING), limits.Limits(nodes=400),
                        settings=limits.Settings(batch_size=8))
    run.run()
    assert max(evaluator.batches) == 8 and np.mean(evaluator.batches) > 4     # leaves found per call
    # every evaluation backed up once, and the playouts that ended at a repetition (no evaluation)
    children = run.tree.edges.children
    assert run.tree.visits == sum(evaluator.batches) + sum(_terminal_visits(c) for c in children)
    assert run.tree.edges.n.sum() == run.tree.visits - 1                      # no virtual loss left


def _terminal_visits(node: search.Node | None) -> int:
    if node is None:
        return 0
    if node.terminal is not None:
        return node.visits
    return sum(_terminal_visits(c) for c in (node.edges.children if node.edges else ()))


@pytest.mark.parametrize("sfen,move,plies", [(MATE_IN_ONE, "G*5b", 1), (MATE_IN_THREE, "B*3c", 3)])
def test_mates_are_proven_and_reported(sfen: str, move: str, plies: int) -> None:
    run = search.Search(material(), position_factory()(sfen), limits.Limits(nodes=50_000))
    info = run.run()
    best = info.lines[0]
    assert (best.move, best.mate, best.p) == (move, plies, 1.0)
    assert run.tree.proven == search.WIN and info.nodes < 50_000          # a proven root ends the search
    assert run.choose() == move and len(best.pv) == plies
    final = position_factory()(sfen)                                        # the PV is the mate
    for step in best.pv:
        final.push_usi(step)
    assert final.legal_usi() == []


def _mate_in(position, plies: int) -> bool:
    """Brute force: the side to move mates within `plies` (odd) plies."""
    for move in position.legal_usi():
        child = position.copy()
        child.push_usi(move)
        replies = child.legal_usi()
        if not replies:
            return True
        if plies >= 3 and child.in_check() and all(_mate_in(_after(child, r), plies - 2) for r in replies):
            return True
    return False


def _after(position, move: str):
    child = position.copy()
    child.push_usi(move)
    return child


def test_mate_in_three_is_the_shortest() -> None:
    position = position_factory()(MATE_IN_THREE)
    assert not _mate_in(position, 1) and _mate_in(position, 3)


def test_the_side_mated_sees_its_loss() -> None:
    factory = position_factory()
    mated = factory("4k4/4G4/4P4/9/9/9/9/9/4K4 w - 1")               # White: no legal move
    run = search.Search(material(), mated, limits.Limits(nodes=10))
    assert run.run().lines == () and run.choose() is None
    # after B*3c of the mate in three, White's every reply is proven lost: the node is a proven loss
    run = search.Search(material(), factory(MATE_IN_THREE), limits.Limits(nodes=50_000))
    run.run()
    after = run.tree.edges.children[run.tree.legal.index("B*3c")]
    assert after.proven == search.LOSS and after.plies == 2
    assert all(c is not None and c.proven == search.WIN for c in after.edges.children)


def test_repetition_is_a_draw_inside_the_tree() -> None:
    factory = position_factory()
    moves = ("2h3h", "8b7b", "3h2h")                       # White to move: 7b8b repeats the start position
    position, history = search.game_history(factory(STANDARD_START_SFEN), moves)
    run = search.Search(material(), position, limits.Limits(nodes=400), history=history)
    run.run()
    child = run.tree.edges.children[run.tree.legal.index("7b8b")]
    assert child is not None and child.terminal == 0.5 and not child.expanded
    k = run.tree.legal.index("7b8b")
    assert run.tree.edges.w[k] / run.tree.edges.n[k] == pytest.approx(0.5)  # every visit backs up the draw
    fresh = search.Search(material(), position, limits.Limits(nodes=400))           # without the game
    fresh.run()
    twin = fresh.tree.edges.children[k]
    assert twin is None or twin.terminal is None


def test_perpetual_check_loses_for_the_checker() -> None:
    factory = position_factory()
    root = factory(OPENING)
    child = search.Node(_after(root, "3c3d"))
    # the child's position occurred 4 plies before it (index 0 of history + [root, child]); whether the
    # positions between were in check is made up: 1 and 3 follow the child's mover's moves, 2 and 4 the
    # opponent's
    for a, b, at_root, at_child, want in ((True, False, True, False, 0.0),    # the child's mover checked
                                          (False, True, False, True, 1.0),    # the opponent checked
                                          (True, True, False, False, 0.5),    # neither always: a draw
                                          (False, False, False, False, 0.5)):
        run = search.Search(material(), root, limits.Limits(nodes=1),
                            history=[(child.key, False), ("a", a), ("b", b)])
        run.tree.check, child.check = at_root, at_child
        assert run._repetition(child, [(run.tree, 0)]) == want
    run = search.Search(material(), root, limits.Limits(nodes=1), history=[(child.key, False), ("a", True)])
    assert run._repetition(child, [(run.tree, 0)]) is None          # 3 plies apart: another side to move


def test_declaration_inside_the_tree_is_a_win() -> None:
    factory = position_factory()
    # Black's king in White's camp with 15 pieces and 23 points: 28 once the rook on 1d enters
    position = factory("K+R+BGGGS2/PPPPPPPPP/9/8R/9/9/9/9/k8 b - 1")
    assert not declaration_win(position)
    run = search.Search(material(), position, limits.Limits(nodes=2000))
    run.run()
    enters = [i for i, m in enumerate(run.tree.legal) if m.startswith("1d") and m[3] in "abc"]
    assert enters
    # after Black's move it is White's turn: the declaration is Black's at its next turn, so the child
    # itself is not a proof; its own children where Black is to move again are
    grandchildren = [g for i in enters if run.tree.edges.children[i] is not None
                     for g in (run.tree.edges.children[i].edges.children
                               if run.tree.edges.children[i].edges else []) if g is not None]
    assert grandchildren and all(g.proven == search.WIN for g in grandchildren)


def test_the_tree_is_kept_between_moves() -> None:
    factory = position_factory()
    run = search.Search(material(), factory(STANDARD_START_SFEN), limits.Limits(nodes=1500))
    run.run()
    ours = run.choose()
    reply_index = int(np.argmax(run.tree.edges.children[run.tree.legal.index(ours)].edges.n))
    reply = run.tree.edges.children[run.tree.legal.index(ours)].legal[reply_index]
    kept = search.subtree(run.tree, (ours, reply))
    assert kept is not None and kept.visits > 1
    visits = kept.visits
    position = factory(STANDARD_START_SFEN)
    position.push_usi(ours)
    position.push_usi(reply)
    again = search.Search(material(), position, limits.Limits(nodes=200), tree=kept)
    again.run()
    assert again.tree is kept and kept.visits > visits
    assert search.subtree(run.tree, ("7g7f", "7g7f")) is None


def test_temperature_varies_the_move_and_zero_does_not() -> None:
    run = search.Search(material(), position_factory()(STANDARD_START_SFEN), limits.Limits(nodes=3000))
    run.run()
    best = run.choose()
    assert {run.choose(0.0, random.Random(s)) for s in range(10)} == {best}
    drawn = {run.choose(1.0, random.Random(s)) for s in range(40)}
    visited = {m for m, n in zip(run.tree.legal, run.tree.edges.n) if n > 0}
    assert len(drawn) > 1 and drawn <= visited


class _Clock:
    """A monotonic clock that moves only when told (the search's `time` in a test)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class _ClockedEvaluator:
    """The material evaluator; each batch takes `delay` seconds of `clock`."""

    name = "clocked"

    def __init__(self, clock: _Clock, delay: float) -> None:
        self.inner, self.clock, self.delay = material(), clock, delay

    def load(self) -> None:
        pass

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        self.clock.now += self.delay
        return self.inner.win_probability(board, hands)


def test_the_deadline_holds_with_a_slow_evaluator(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(search, "time", clock)
    monkeypatch.setattr(limits, "time", clock)             # the deadline check is the shared clock's
    position = position_factory()(STANDARD_START_SFEN)
    for plies in (0, 2):
        began = clock.now
        run = search.Search(_ClockedEvaluator(clock, 0.02), position, limits.Limits(deadline=began + 0.3),
                            settings=limits.Settings(quiescence_plies=plies))
        info = run.run()
        assert clock.now - began < 0.3 and info.lines                         # stopped before, with a move


def test_score_scale() -> None:
    assert limits.score_cp(0.5) == 0
    assert limits.score_cp(1 / (1 + math.exp(-1))) == round(limits.EVAL_SCALE) == 756
    assert limits.score_cp(1 / (1 + math.exp(2))) == -1512
    assert limits.score_cp(1.0) == limits.MAX_CP and limits.score_cp(0.0) == -limits.MAX_CP
    assert limits.score_cp(1e-30) == -limits.MAX_CP


@pytest.mark.parametrize("backend", ["python-shogi", "cshogi"])
def test_declaration(backend: str) -> None:
    new_position = position_factory(backend)
    position = new_position(DECLARE)
    assert declaration_win(position, "CSARule27") and declaration_win(position, "CSARule24")
    assert not declaration_win(position, "NoEnteringKing")
    assert not declaration_win(new_position("K+R+R+B+BGGGS/9/9/9/9/9/9/9/k8 b 9P 1"), "CSARule27")
    # 10 pieces but too few points (the tokin on 1a: a pawn could never stand there unpromoted)
    assert not declaration_win(new_position("KGGGSSSS+P/PP7/9/9/9/9/9/9/k8 b - 1"), "CSARule27")
    assert not declaration_win(new_position(STANDARD_START_SFEN), "CSARule27")


# Recorded from the engine as it plays (fixed node budgets, deterministic evaluators): a change of the
# search's code that keeps its play keeps these moves, visit counts and PVs.
RECORDED_PUCT = [
    ("policy", OPENING, 400, 8, "1a1b", 404,
     [("1a1b", 76, ("1a1b", "5i4h", "4a3b")), ("8b3b", 74, ("8b3b", "3g3f", "7c7d")),
      ("7c7d", 50, ("7c7d", "9i9h", "5a6b"))]),
    ("material", HANGING, 300, 4, "5h1h", 302,
     [("5h1h", 16, ("5h1h", "5d5e", "1h1a+")), ("5h5f", 15, ("5h5f", "5d5e", "5f1f")),
      ("5h5g", 15, ("5h5g", "5d5e", "5g1g"))]),
    ("material", STANDARD_START_SFEN, 300, 8, "2g2f", 301,
     [("2g2f", 6, ("2g2f", "1c1d", "1g1f")), ("3g3f", 6, ("3g3f", "1c1d", "1g1f")),
      ("4g4f", 6, ("4g4f", "1c1d", "1g1f"))]),
]


@pytest.mark.parametrize("kind,sfen,nodes,batch_size,move,evaluated,lines", RECORDED_PUCT)
def test_fixed_searches_play_the_recorded_moves(kind: str, sfen: str, nodes: int, batch_size: int, move: str,
                                                evaluated: int, lines: list) -> None:
    evaluator = PolicyEvaluator(seed=4) if kind == "policy" else material()
    run = search.Search(evaluator, position_factory()(sfen), limits.Limits(nodes=nodes), multipv=3,
                        settings=limits.Settings(batch_size=batch_size))
    info = run.run()
    assert (run.choose(), info.nodes) == (move, evaluated)
    assert [(line.move, line.visits, line.pv[:3]) for line in info.lines] == lines


def test_fixed_best_first_search_plays_the_recorded_moves() -> None:
    from shogi_dnn.engine import minimax

    budget = limits.Limits(nodes=400, depth=3)
    run = minimax.BestFirst(material(), position_factory()(HANGING), budget, multipv=3)
    info = run.run()
    assert [(line.move, line.pv, round(line.p, 6)) for line in info.lines] == [
        ("5h1h", ("5h1h", "5d5e", "1h1a+"), 0.668188), ("5h2h", ("5h2h",), 0.598688),
        ("5h3h", ("5h3h",), 0.598688)]
    assert info.nodes == 272


def test_an_expanded_node_holds_its_edges() -> None:
    run = search.Search(material(), position_factory()(STANDARD_START_SFEN), limits.Limits(nodes=20))
    run.run()
    root = run.tree
    assert isinstance(root.edges, search.Edges) and root.expanded
    assert len(root.edges.n) == len(root.edges.priors) == len(root.edges.children) == len(root.legal)
    leaves = [c for c in root.edges.children if c is not None and c.edges is None]
    assert leaves and not any(c.expanded for c in leaves)        # created (at the root), not evaluated
    assert not hasattr(root, "n") and not hasattr(root, "children")
