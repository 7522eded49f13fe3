"""Search over batched evaluations: one ply (every legal reply in one batch), or deeper by best-first minimax.

Values are win probabilities of the side to move at each node (players.Evaluator). Expanding a node plays
each of its legal moves on a copy of the position and evaluates all the children in ONE batch; a child
with no legal move is a proven loss for its side to move (shogi has no stalemate draw: no move is a loss,
and the rules backends already refuse a pawn-drop mate). Back-up is negamax on probabilities:

  value(node) = max over children c of (1 - value(c))      the move that leaves the opponent the least

Best-first minimax (Korf & Chickering 1996): the root is expanded first (that is the one-ply player);
then, while the limits allow, the leaf at the end of the principal variation is expanded and the values
are backed up along its path. The search stops at the first of: `stop`, the node budget, the clock, the
depth horizon (the PV's leaf is `depth` plies deep and may not be expanded), or a proven result at the
root. Proofs come only from positions without a legal move, so a reported mate is a real forced mate
in the explored tree: `mate +n` the side to move mates in n plies, `mate -n` it is mated in n.

Scores: cp = round(EVAL_SCALE * logit(p)) with EVAL_SCALE = 756 (evalfit.DEFAULT_SCALE, dlshogi's and
ponanza's scale: p = sigmoid(cp / 756)), clipped to +-MAX_CP; p = 0.5 is 0, p = 0.79 about +1000,
p = 0.93 about +2000. Repetitions are not detected inside the search (the GUI judges sennichite).

Entering king (nyugyoku) declaration, declaration_win: the side to move's king in the opponent's camp
(its last three ranks), not in check, at least 10 other own pieces there, and points (bishop, rook and their
promotions 5, every other piece 1, own pieces in the camp plus own hand) of at least 28 for Black and 27
for White (CSA rule 27, "CSARule27"), or 31 for either ("CSARule24"). The time-left condition is the GUI's.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable

import numpy as np

from shogi_dnn.dataset import evalfit, features
from shogi_dnn.engine.players import Evaluator
from shogi_dnn.rules import BLACK, NUM_PIECE_TYPES, Position

EVAL_SCALE = evalfit.DEFAULT_SCALE        # cp = EVAL_SCALE * logit(p)
MAX_CP = 30000                            # |cp| reported at most (USI GUIs treat larger values as mates)
PROB_CLIP = 1e-6                          # evaluated values stay inside (0, 1): 0 and 1 mean proven
MAX_TREE_NODES = 2_000_000                # a bound on the tree's memory (about 1 GB)
ENTERING_KING_RULES = ("NoEnteringKing", "CSARule27", "CSARule24")
_BIG_PIECES = frozenset((6, 7, 13, 14))   # B, R, +B, +R: 5 points in a declaration
_HAND_POINTS = (1, 1, 1, 1, 1, 5, 5)      # P L N S G B R in hand


@dataclasses.dataclass(frozen=True)
class Limits:
    """When a search stops (None: no such limit). The root is always expanded, whatever the limits.

    Attributes:
        nodes: positions evaluated. depth: plies of the principal variation (1: the one-ply player).
        seconds: wall-clock time from the start of the search. infinite: only `stop` ends it.
    """

    nodes: int | None = None
    depth: int | None = None
    seconds: float | None = None
    infinite: bool = False


class Node:
    """A position in the tree. value: P(side to move wins); proven: value is exactly 0 or 1, reached in
    `plies` plies (0: no legal move here); children None until expanded."""

    __slots__ = ("children", "legal", "moves", "plies", "position", "proven", "value")

    def __init__(self, position: Position, legal: list[str]) -> None:
        self.position = position
        self.legal = legal
        self.value = 0.5
        self.proven = not legal
        self.plies = 0
        self.children: list[Node] | None = None
        self.moves: list[str] = []
        if not legal:
            self.value = 0.0

    def best(self) -> int:
        """Index of the child that leaves the opponent the lowest value (expanded nodes only)."""
        return int(np.argmin([c.value for c in self.children]))

    def back_up(self) -> None:
        """Recompute value/proven/plies from the children (negamax on probabilities)."""
        values = [c.value for c in self.children]
        i = int(np.argmin(values))
        self.value = 1.0 - values[i]
        lost = [c.plies for c in self.children if c.proven and c.value == 0.0]
        if lost:                                          # a child lost for its mover: the shortest mate
            self.proven, self.plies = True, min(lost) + 1
        elif all(c.proven for c in self.children):        # every reply wins for the opponent: the longest
            self.proven, self.plies = True, max(c.plies for c in self.children) + 1
        else:
            self.proven = False


@dataclasses.dataclass(frozen=True)
class RootLine:
    """One root move: p = P(the side to move at the root wins) after it; mate: signed plies or None."""

    move: str
    p: float
    mate: int | None
    pv: tuple[str, ...]

    @property
    def cp(self) -> int:
        return score_cp(self.p)


@dataclasses.dataclass(frozen=True)
class SearchInfo:
    """The state of a search: root lines best first, evaluated positions, PV depth, deepest node, time."""

    lines: tuple[RootLine, ...]
    nodes: int
    depth: int
    seldepth: int
    seconds: float

    @property
    def nps(self) -> int:
        return int(self.nodes / self.seconds) if self.seconds > 0 else 0


def score_cp(p: float) -> int:
    """Centipawns of a win probability: round(EVAL_SCALE * logit(p)), clipped to +-MAX_CP."""
    if p <= 0.0 or p >= 1.0:
        return MAX_CP if p >= 1.0 else -MAX_CP
    return int(max(-MAX_CP, min(MAX_CP, round(EVAL_SCALE * (math.log(p) - math.log1p(-p))))))


class Search:
    """One search from `root` (the position is copied, never changed). Call run() once."""

    def __init__(self, evaluator: Evaluator, root: Position, limits: Limits,
                 stop: threading.Event | None = None, report: Callable[[SearchInfo], None] | None = None,
                 report_every: float = 0.5, multipv: int = 1) -> None:
        self.evaluator = evaluator
        self.limits = limits
        self.stop = stop or threading.Event()
        self.report = report
        self.report_every = report_every
        self.multipv = max(1, multipv)
        self.root = Node(root.copy(), root.legal_usi())
        self.nodes = 0
        self.seldepth = 0
        self._start = 0.0

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
            if self.limits.depth is not None and len(path) - 1 >= self.limits.depth:
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
        return limits.seconds is not None and time.monotonic() - self._start >= limits.seconds

    def _principal_path(self) -> list[Node]:
        path = [self.root]
        while path[-1].children is not None and not path[-1].proven:
            path.append(path[-1].children[path[-1].best()])
        return path

    def _expand(self, node: Node, depth: int) -> None:
        """Play every legal move of `node` and evaluate the children in one batch."""
        children, boards, hands, pending = [], [], [], []
        for move in node.legal:
            position = node.position.copy()
            position.push_usi(move)
            child = Node(position, position.legal_usi())
            children.append(child)
            if not child.proven:
                board, hand = features.encode_position(position)
                boards.append(board)
                hands.append(hand)
                pending.append(child)
        if pending:
            p = self.evaluator.win_probability(np.stack(boards), np.stack(hands))
            for child, value in zip(pending, np.clip(p, PROB_CLIP, 1 - PROB_CLIP).tolist()):
                child.value = value
        node.children, node.moves = children, list(node.legal)
        node.position = None if node is not self.root else node.position   # leaves keep theirs, memory
        self.nodes += len(children)
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
        return RootLine(move, 1.0 - child.value, mate, tuple(pv))


def declaration_win(position: Position, rule: str = "CSARule27") -> bool:
    """True when the side to move may declare an entering-king win under `rule` (module docstring)."""
    if rule == "NoEnteringKing":
        return False
    turn = position.turn
    offset = NUM_PIECE_TYPES * turn                      # own codes: 1..14 (Black) or 15..28 (White)
    codes = position.piece_codes()
    camp = range(27) if turn == BLACK else range(54, 81)
    own = [codes[s] - offset for s in camp if offset < codes[s] <= offset + NUM_PIECE_TYPES]
    king = 8
    if king not in own or position.in_check():
        return False
    others = [t for t in own if t != king]
    hand = position.hand_counts()[turn]
    points = sum(5 if t in _BIG_PIECES else 1 for t in others) + sum(n * w for n, w in zip(hand, _HAND_POINTS))
    needed = 31 if rule == "CSARule24" else (28 if turn == BLACK else 27)
    return len(others) >= 10 and points >= needed
