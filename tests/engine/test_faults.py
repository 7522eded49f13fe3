"""Engine faults: a search that evaluated nothing in time (a deadline already passed, the watchdog during a
stalled evaluator call, a kept tree whose only visits are pending) reports no score and never resigns; a
network that answers NaN leaves the position unevaluated and the search answers a legal move."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from shogi_dnn.engine import limits, minimax, protocol
from shogi_dnn.engine import search as search_lib
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import new_position
from tests.engine.support import Lines, PolicyEvaluator, material

LOST = "4k4/9/9/9/9/9/9/9/4K4 b 2r2b 1"           # two rooks and two bishops down: p about 0.01
ISSUE_MOVES = "7g7f 3c3d 2g2f 8c8d 2f2e 8d8e 6i7h 4a3b 2e2d 2c2d 2h2d"


class Gate:
    """The fixed material evaluator (with policy logits when `policy`), whose calls wait while the gate
    is closed; `entered` is set when a call is waiting."""

    name = "gate"

    def __init__(self, policy: bool = False) -> None:
        self.inner = PolicyEvaluator() if policy else material()
        self.has_policy = policy
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()

    def load(self) -> None:
        pass

    def _wait(self) -> None:
        if not self.open.is_set():
            self.entered.set()
            assert self.open.wait(30), "the gate was never opened"

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        self._wait()
        return self.inner.win_probability(board, hands)

    def evaluate_logits(self, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._wait()
        return self.inner.evaluate_logits(board, hands)


class NaNAfter:
    """The fixed material evaluator, NaN for every position whose board equals one of `boards` (or for
    every position when `boards` is None); counts the NaNs given."""

    name = "nan"

    def __init__(self, boards: list[np.ndarray] | None = None) -> None:
        self.inner = material()
        self.boards = boards
        self.given = 0

    def load(self) -> None:
        pass

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        values = np.asarray(self.inner.win_probability(board, hands), np.float64).copy()
        for k in range(len(board)):
            if self.boards is None or any(np.array_equal(board[k], b) for b in self.boards):
                values[k] = np.nan
                self.given += 1
        return values


def _engine(evaluator: object) -> tuple[protocol.UsiEngine, Lines]:
    out = Lines()
    return protocol.UsiEngine(evaluator, out, name="test"), out


def test_a_root_evaluated_past_the_deadline_has_no_score() -> None:
    done = search_lib.Search(material(), new_position(LOST), limits.Limits(deadline=time.monotonic() - 1))
    info = done.run()
    assert info.nodes == 1 and info.lines                 # the root only: no reply was evaluated
    assert info.lines[0].p is None and info.lines[0].cp is None and info.lines[0].mate is None
    assert "score" not in protocol.format_info(info)[0]


def test_pending_visits_are_not_a_score() -> None:
    gate = Gate()
    kept = search_lib.Search(gate, new_position(LOST), limits.Limits(nodes=1))
    kept.run()                                            # a kept root: evaluated, no reply visited
    gate.open.clear()
    again = search_lib.Search(gate, new_position(LOST), limits.Limits(nodes=100), tree=kept.tree)
    thread = threading.Thread(target=again.run)
    thread.start()
    try:
        assert gate.entered.wait(30)                      # a batch of leaves is pending (virtual loss)
        info = again.info()
        assert info.nodes == 0 and all(line.p is None and line.visits == 0 for line in info.lines)
    finally:
        gate.open.set()
        thread.join(30)


def test_the_watchdog_on_a_kept_tree_neither_scores_nor_resigns() -> None:
    gate = Gate()
    usi, out = _engine(gate)
    usi.handle(f"position startpos moves {ISSUE_MOVES}")
    usi.handle("go nodes 1")                              # the tree kept: its root evaluated only
    out.wait_for("bestmove")
    start = len(out.lines)
    gate.open.clear()
    usi.handle("setoption name ResignValue value 3000")
    usi.handle(f"position startpos moves {ISSUE_MOVES}")
    usi.handle("go btime 0 wtime 0 byoyomi 1")            # the watchdog answers while the call waits
    try:
        best = out.wait_for("bestmove", start=start, timeout=30)
        assert gate.entered.is_set()                      # the answer came while the call waited
    finally:
        gate.open.set()
    lines = out.since(start)
    position = new_position(STANDARD_START_SFEN)
    for move in ISSUE_MOVES.split():
        position.push_usi(move)
    assert not any(" score " in line for line in lines), lines
    assert "info string no move evaluated in time: the material player's move" in lines
    assert best == f"bestmove {protocol.material_move(position)}"


def test_the_watchdog_before_any_evaluation_plays_the_material_move() -> None:
    gate = Gate()
    usi, out = _engine(gate)
    usi.handle("isready")                                 # loaded and warmed with the gate open
    gate.open.clear()
    usi.handle("setoption name ResignValue value 3000")
    usi.handle(f"position sfen {LOST}")
    usi.handle("go btime 0 wtime 0 byoyomi 1")
    try:
        best = out.wait_for("bestmove", timeout=30)
        assert gate.entered.is_set()
    finally:
        gate.open.set()
    assert best == f"bestmove {protocol.material_move(new_position(LOST))}" and best != "bestmove resign"
    assert not any(" score " in line for line in out.lines), out.lines


def test_no_time_with_a_policy_plays_the_prior() -> None:
    evaluator = PolicyEvaluator(seed=3)
    usi, out = _engine(evaluator)
    usi.handle("isready")
    usi.handle("setoption name NetworkDelay value 0")
    usi.handle("setoption name ResignValue value 3000")
    usi.handle(f"position sfen {LOST}")
    slow = _SlowFirstCall(evaluator, 2.8)                # past the search's deadline (2.7 s), not the 3 s one
    usi.evaluator = slow
    usi.handle("go movetime 3000")
    best = out.wait_for("bestmove", timeout=30)
    assert slow.calls == 1                                # the root's call only
    position = new_position(LOST)
    legal = position.legal_usi()
    board, hands = protocol.search_lib.quiescence.encode([position])
    _, logits = evaluator.evaluate_logits(board, hands)
    labels = protocol.search_lib.legal_labels(position, legal)
    assert best == f"bestmove {legal[int(np.argmax(logits[0][labels]))]}"
    assert "info string no move evaluated in time: the policy's move" in out.lines
    assert not any(" score " in line for line in out.lines), out.lines


class _SlowFirstCall:
    """An evaluator whose first call takes `seconds`."""

    def __init__(self, inner: PolicyEvaluator, seconds: float) -> None:
        self.inner, self.seconds, self.calls = inner, seconds, 0
        self.name, self.has_policy = "slow-first", True

    def load(self) -> None:
        pass

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        return self.evaluate_logits(board, hands)[0]

    def evaluate_logits(self, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.seconds)
        return self.inner.evaluate_logits(board, hands)


def test_an_evaluated_loss_still_resigns() -> None:
    usi, out = _engine(material())
    usi.handle("setoption name ResignValue value 2000")           # p about 0.02: -3000 cp
    usi.handle(f"position sfen {LOST}")
    usi.handle("go nodes 64")
    assert out.wait_for("bestmove") == "bestmove resign"


def _board_after(move: str) -> np.ndarray:
    position = new_position(STANDARD_START_SFEN)
    position.push_usi(move)
    return protocol.search_lib.quiescence.encode([position])[0][0]


def test_a_nan_reply_is_skipped_by_the_search() -> None:
    evaluator = NaNAfter([_board_after("7g7f")])
    search = search_lib.Search(evaluator, new_position(STANDARD_START_SFEN), limits.Limits(nodes=200))
    info = search.run()
    lines = {line.move: line for line in search.info().lines}
    assert evaluator.given >= 1 and search.unevaluated == evaluator.given
    assert info.lines[0].move != "7g7f" and info.lines[0].p is not None
    assert search.line("7g7f").p is None and search.line("7g7f").visits == 0 and lines


def test_a_nan_root_ends_the_search_with_no_lines() -> None:
    search = search_lib.Search(NaNAfter(), new_position(STANDARD_START_SFEN), limits.Limits(nodes=50))
    assert search.run().lines == () and search.unevaluated == 1


def test_nan_children_in_the_best_first_search() -> None:
    evaluator = NaNAfter([_board_after("7g7f")])
    info = minimax.BestFirst(evaluator, new_position(STANDARD_START_SFEN), limits.Limits(depth=1),
                             multipv=40).run()
    by_move = {line.move: line for line in info.lines}
    assert by_move["7g7f"].p is None and info.lines[0].move != "7g7f" and info.lines[0].p is not None


@pytest.mark.parametrize("go", ["go nodes 50", "go depth 1", "go byoyomi 200"])
def test_a_network_of_nans_answers_a_legal_move(go: str) -> None:
    usi, out = _engine(NaNAfter())
    usi.handle("setoption name ResignValue value 3000")
    usi.handle("position startpos")
    usi.handle(go)
    best = out.wait_for("bestmove", timeout=30)
    assert best.split()[1] in new_position(STANDARD_START_SFEN).legal_usi()
    nan_lines = [line for line in out.lines if "NaN" in line]
    assert len(nan_lines) == 1 and nan_lines[0].startswith("info string error: the network gave NaN for ")
    assert not any(" score " in line for line in out.lines), out.lines
