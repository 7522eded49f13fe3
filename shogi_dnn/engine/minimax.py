"""Best-first minimax over batched evaluations to a depth (`go depth D`; 1: the one-ply player).

Values are win probabilities of the side to move. Expanding a node evaluates all its children in ONE
batch (their quiescence values without a policy head); a child with no legal move is a proven loss.
Back-up is negamax on probabilities:

  value(node) = max over children c of (1 - value(c))      the move that leaves the opponent the least

The root is expanded first, then the principal variation's leaf, while `stop`, the node budget, the clock
(engine/limits.py), the depth horizon and a proven root allow. Repetitions are not detected here. A NaN
child is unevaluated: the worst move, never expanded, counted in `unevaluated`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import numpy as np

from shogi_dnn.engine import quiescence
from shogi_dnn.engine.limits import (
    MAX_TREE_NODES,
    PROB_CLIP,
    LimitedSearch,
    Limits,
    RootLine,
    SearchInfo,
    Settings,
)
from shogi_dnn.engine.players import Evaluator
from shogi_dnn.rules import Position


class Node:
    """A position in the tree. value: P(side to move wins); proven: value is exactly 0 or 1, reached in
    `plies` plies (0: no legal move here); children None until expanded."""

    __slots__ = ("children", "failed", "legal", "moves", "plies", "position", "proven", "value")

    def __init__(self, position: Position, legal: list[str]) -> None:
        self.position: Position | None = position        # None once expanded (the root keeps its own)
        self.legal = legal
        self.value = 0.5
        self.proven = not legal
        self.failed = False                        # the evaluator answered NaN: no value
        self.plies = 0
        self.children: list[Node] | None = None
        self.moves: list[str] = []
        if not legal:
            self.value = 0.0

    def expanded(self) -> list[Node]:
        """The children of an expanded node."""
        assert self.children is not None, "the node is not expanded"
        return self.children

    def best(self) -> int:
        """Index of the child that leaves the opponent the lowest value (expanded nodes only)."""
        return int(np.argmin([c.value for c in self.expanded()]))

    def back_up(self) -> None:
        """Recompute value/proven/plies from the children (negamax on probabilities)."""
        children = self.expanded()
        values = [c.value for c in children]
        i = int(np.argmin(values))
        self.value = 1.0 - values[i]
        lost = [c.plies for c in children if c.proven and c.value == 0.0]
        if lost:                                          # a child lost for its mover: the shortest mate
            self.proven, self.plies = True, min(lost) + 1
        elif all(c.proven for c in children):             # every reply wins for the opponent: the longest
            self.proven, self.plies = True, max(c.plies for c in children) + 1
        else:
            self.proven = False


class BestFirst(LimitedSearch):
    """One best-first search from `root` (the position is copied, never changed). Call run() once."""

    def __init__(self, evaluator: Evaluator, root: Position, limits: Limits,
                 stop: threading.Event | None = None, report: Callable[[SearchInfo], None] | None = None,
                 report_every: float = 0.5, multipv: int = 1, settings: Settings | None = None) -> None:
        super().__init__(evaluator, limits, stop, report, report_every, multipv,
                         settings or Settings(quiescence_plies=0))
        self._last_expansion = 0.0               # seconds the last expansion took (its calls together)
        self.root = Node(root.copy(), root.legal_usi())
        self.unevaluated = 0                     # positions the evaluator answered with NaN

    def run(self) -> SearchInfo:
        """Search until a limit; the final SearchInfo (no lines when the root has no legal move)."""
        self._start = time.monotonic()
        if not self.root.legal:
            return self.info()
        self._expand(self.root, 0)
        self.root.back_up()
        last_report = time.monotonic()
        while not self._done():
            path = self._principal_path()
            if self.limits.depth is not None and len(path) - 1 >= self.limits.depth or path[-1].failed:
                break                                             # the PV reaches the horizon
            self._expand(path[-1], len(path) - 1)
            for node in reversed(path):
                node.back_up()
            if self.report is not None and time.monotonic() - last_report >= self.report_every:
                self.report(self.info())
                last_report = time.monotonic()
        return self.info()

    def _done(self) -> bool:
        limits = self.limits
        if self.stop.is_set() or self.root.proven or self.nodes >= MAX_TREE_NODES:
            return True
        if limits.infinite:
            return False
        if limits.nodes is not None and self.nodes >= limits.nodes:
            return True
        deadline = self.deadline()
        return deadline is not None and time.monotonic() + self._last_expansion >= deadline

    def _principal_path(self) -> list[Node]:
        path = [self.root]
        while path[-1].children is not None and not path[-1].proven:
            path.append(path[-1].children[path[-1].best()])
        return path

    def _expand(self, node: Node, depth: int) -> None:
        """Play every legal move of `node` and evaluate the children in one batch."""
        parent = node.position
        assert parent is not None, "only a leaf is expanded, and a leaf keeps its position"
        children, pending, pending_positions = [], [], []
        for move in node.legal:
            position = parent.copy()
            position.push_usi(move)
            child = Node(position, position.legal_usi())
            children.append(child)
            if not child.proven:
                pending.append(child)
                pending_positions.append(position)
        if pending:
            begin = time.monotonic()
            p = quiescence.values(pending_positions, self._values, self.settings.quiescence_plies,
                                  self.settings.quiescence_width, self._expired,
                                  [c.legal for c in pending])
            self._last_expansion = time.monotonic() - begin
            for child, value in zip(pending, np.clip(p, PROB_CLIP, 1 - PROB_CLIP).tolist()):
                if math.isfinite(value):
                    child.value = value
                else:
                    child.value, child.failed = 1.0, True
                    self.unevaluated += 1
        node.children, node.moves = children, list(node.legal)
        node.position = None if node is not self.root else node.position   # leaves keep theirs, memory
        self.nodes += len(children) - len(pending)
        self.seldepth = max(self.seldepth, depth + 1)

    def info(self) -> SearchInfo:
        """Root moves best first (at most multipv of them), with their PVs."""
        seconds = max(time.monotonic() - self._start, 1e-9)
        root = self.root
        if root.children is None:
            return SearchInfo((), self.nodes, 0, self.seldepth, seconds)
        order = np.argsort([c.value for c in root.children], kind="stable")[:self.multipv]
        lines = tuple(self._line(root.moves[i], root.children[i]) for i in order)
        return SearchInfo(lines, self.nodes, len(lines[0].pv), self.seldepth, seconds)

    @staticmethod
    def _line(move: str, child: Node) -> RootLine:
        pv, node = [move], child
        while node.children is not None:
            i = node.best()
            pv.append(node.moves[i])
            node = node.children[i]
        mate = None
        if child.proven:
            mate = child.plies + 1 if child.value == 0.0 else -(child.plies + 1)
        return RootLine(move, None if child.failed else 1.0 - child.value, mate, tuple(pv))
