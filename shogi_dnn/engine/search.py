"""PUCT tree search over batched evaluations (AlphaZero's and dlshogi's MCTS); shared parts: engine/limits.py.

Values are win probabilities of the side to move. Each edge keeps visits n_i and value sum w_i; a
playout picks at each expanded node the move with the highest

  Q_i + c_puct * P_i * sqrt(N) / (1 + n_i)      Q_i = w_i / n_i, or FPU when n_i = 0

(FPU = the node's mean value minus `fpu_reduction`, at least 0; ties to the first legal move).
`batch_size` leaves are collected with a virtual loss, evaluated in ONE call, expanded and backed up
(1 - v at each step up). Leaf value and priors:

  policy network    the network's value; priors = softmax of the policy logits over the legal moves
  no policy head    the capture quiescence value of the leaf (engine/quiescence.py); uniform priors

Inside the tree:
  no legal move      a proven loss for the side to move
  declaration        rules.declaration_win: a proven win
  repetition         the first repetition (game `history` or path) is a draw (`draw_value`), or a loss
                     for the side that checked with every move since (perpetual check)
Proofs back up (MCTS-solver); `score mate N` is reported only for proofs; a proven root ends the search.
Lines count completed playouts only (no score: RootLine.p None). A NaN leaf is unevaluated: its playouts
undone, its edge not picked again, counted in `unevaluated`. The move: a proven mate, else the most
visited (ties by Q, then prior), or with `temperature` T > 0 drawn ~ n_i^(1/T). The tree is kept between
moves (`subtree`). An expanded node's state is its Edges: priors, visits, value sums, pending playouts,
blocked moves and children, one entry per legal move.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence

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
from shogi_dnn.engine.players import Evaluator, evaluate, has_policy, legal_labels
from shogi_dnn.rules import Position, declaration_win, position_key

WIN, LOSS, OPEN = 1, -1, 0                # Node.proven: for the node's side to move


def game_history(start: Position, moves: Sequence[str]) -> tuple[Position, list[tuple[str, bool]]]:
    """Play `moves` from a copy of `start`: the final position and (key, in check) of every position
    before it, in order (the `history` of a search from the final position)."""
    position = start.copy()
    history = []
    for move in moves:
        history.append((position_key(position), position.in_check()))
        position.push_usi(move)
    return position, history


class Edges:
    """An expanded node's moves, entry i for node.legal[i]: prior, visits n (pending playouts included),
    value sums w (from the node's side to move), pending playouts `virtual` (counted in n, not in w),
    `bad` (the child is proven won for its mover: never picked), `skip` (the evaluator answered the child
    with NaN), and the child nodes (None until created)."""

    __slots__ = ("bad", "children", "n", "priors", "skip", "virtual", "w")

    def __init__(self, priors: np.ndarray) -> None:
        size = len(priors)
        self.priors = np.asarray(priors, np.float64)
        self.n, self.w = np.zeros(size), np.zeros(size)
        self.bad = np.zeros(size, bool)
        self.skip = np.zeros(size, bool)
        self.virtual = np.zeros(size)
        self.children: list[Node | None] = [None] * size


class Node:
    """A position in the tree. `legal` is known from creation; `edges` once evaluated (expanded).
    proven: WIN/LOSS for the side to move (exact, in `plies`) or OPEN; terminal: the fixed value of a
    repetition, else None. visits and value_sum: the node's own evaluation plus every playout through it
    (value_sum from the node's side to move)."""

    __slots__ = ("check", "edges", "key", "legal", "pending", "plies", "position", "proven", "terminal",
                 "value_sum", "visits")

    def __init__(self, position: Position, legal: list[str] | None = None) -> None:
        self.position = position
        self.key = position_key(position)
        self.check = position.in_check()
        self.legal = position.legal_usi() if legal is None else legal
        self.edges: Edges | None = None
        self.visits = 0
        self.value_sum = 0.0
        self.proven = LOSS if not self.legal else OPEN
        self.plies = 0
        self.terminal: float | None = None
        self.pending = False

    @property
    def expanded(self) -> bool:
        return self.edges is not None

    def expand(self, priors: np.ndarray) -> Edges:
        self.edges = Edges(priors)
        return self.edges

    def exact(self) -> float | None:
        """The value every visit backs up when it is fixed (a proof or a repetition), else None."""
        if self.proven != OPEN:
            return 1.0 if self.proven == WIN else 0.0
        return self.terminal


def subtree(root: Node | None, moves: Sequence[str]) -> Node | None:
    """The expanded node reached from `root` by `moves` (the tree kept between moves), or None."""
    node = root
    for move in moves:
        if node is None or node.edges is None or move not in node.legal:
            return None
        node = node.edges.children[node.legal.index(move)]
    if node is None or node.edges is None or node.terminal is not None:
        return None
    return node


class Search(LimitedSearch):
    """One PUCT search from `root` (the position is copied, never changed), or from a kept `tree` node of
    that position (`tree_nodes`: the old tree's size, a bound on the kept part's). Call run() once; then
    `tree` is the root node (to keep for the next move) and `tree_nodes` a bound on its size."""

    def __init__(self, evaluator: Evaluator, root: Position, limits: Limits,
                 stop: threading.Event | None = None, report: Callable[[SearchInfo], None] | None = None,
                 report_every: float = 0.5, multipv: int = 1, settings: Settings | None = None,
                 history: Sequence[tuple[str, bool]] = (), tree: Node | None = None,
                 tree_nodes: int = 1) -> None:
        super().__init__(evaluator, limits, stop, report, report_every, multipv, settings or Settings())
        self.tree = tree if tree is not None else Node(root.copy())
        self.history = list(history)
        self._history_at: dict[str, int] = {}
        for index, (key, _) in enumerate(self.history):
            self._history_at[key] = index                  # the latest occurrence
        self.tree_nodes = tree_nodes if tree is not None else 1     # a kept tree: at most its old size
        self._policy = False
        self.unevaluated = 0                           # positions the evaluator answered with NaN
        self._root_failed = False
        self._tree_lock = threading.Lock()             # held while the tree changes: info() reads it whole

    # -- the loop ---------------------------------------------------------------------------------------

    def run(self) -> SearchInfo:
        """Search until a limit; the final SearchInfo (no lines when the root has no legal move)."""
        self._start = time.monotonic()
        self.evaluator.load()
        self._policy = has_policy(self.evaluator)
        if self.tree.expanded:                              # a kept tree
            with self._tree_lock:
                self._create_children(self.tree)
        last_report = self._start
        first = True
        while first or not self._done():
            self._batch()
            first = False
            if self.report is not None and time.monotonic() - last_report >= self.report_every:
                self.report(self.info())
                last_report = time.monotonic()
        return self.info()

    def _done(self) -> bool:
        limits = self.limits
        if self.stop.is_set() or self.tree.proven != OPEN or self.tree_nodes >= MAX_TREE_NODES \
                or self._root_failed:
            return True
        if limits.infinite:
            return False
        if limits.nodes is not None and self.nodes >= limits.nodes:
            return True
        return self._expired(self.settings.batch_size)

    # -- one batch of playouts --------------------------------------------------------------------------

    def _batch(self) -> None:
        with self._tree_lock:
            leaves = self._collect()
        if leaves:
            self._evaluate(leaves)

    def _collect(self) -> list[tuple[list[tuple[Node, int]], Node]]:
        """Up to batch_size leaves, pending; exact leaves (proofs, repetitions) backed up on the way."""
        leaves: list[tuple[list[tuple[Node, int]], Node]] = []
        for _ in range(2 * self.settings.batch_size):
            if len(leaves) >= self.settings.batch_size or self.tree.proven != OPEN or self._root_failed:
                break
            path, leaf = self._select()
            if leaf is None:                                # met a pending leaf: the batch is full enough
                self._undo(path)
                break
            exact = leaf.exact()
            if exact is not None:
                self._back_up(path, leaf, exact)
                continue
            leaf.pending = True
            leaves.append((path, leaf))
        return leaves

    def _select(self) -> tuple[list[tuple[Node, int]], Node | None]:
        node, path = self.tree, []
        while node.edges is not None and node.exact() is None:
            edges = node.edges
            i = self._pick(node, edges)
            edges.n[i] += 1                                 # the virtual loss: a visit, no value yet
            edges.virtual[i] += 1
            node.visits += 1
            path.append((node, i))
            child = edges.children[i]
            if child is None:
                child = edges.children[i] = self._new_child(node, i, path)
            node = child
        self.seldepth = max(self.seldepth, len(path))
        if node.pending:
            return path, None
        return path, node

    def _pick(self, node: Node, edges: Edges) -> int:
        settings = self.settings
        n = edges.n
        fpu = max(0.0, node.value_sum / max(node.visits, 1) - settings.fpu_reduction)
        q = np.where(n > 0, edges.w / np.maximum(n, 1), fpu)
        score = q + settings.c_puct * edges.priors * math.sqrt(node.visits) / (1 + n)
        blocked = edges.bad | edges.skip
        if blocked.any() and not blocked.all():
            score = np.where(blocked, -np.inf, score)
        return int(np.argmax(score))

    def _new_child(self, node: Node, i: int, path: list[tuple[Node, int]]) -> Node:
        position = node.position.copy()
        position.push_usi(node.legal[i])
        child = Node(position)
        self.tree_nodes += 1
        repeated = self._repetition(child, path)
        if repeated is not None:
            child.terminal, child.proven = repeated, OPEN
        elif child.proven == OPEN and declaration_win(position, self.settings.entering_king_rule):
            child.proven = WIN
        return child

    def _repetition(self, child: Node, path: list[tuple[Node, int]]) -> float | None:
        """The value of `child` for its mover when its position occurred before (module docstring)."""
        line = [node for node, _ in path] + [child]         # the tree's part, root first
        j = len(self.history) + len(line) - 1               # the child's index in history + line
        earlier = None
        for k in range(len(line) - 3, -1, -2):
            if line[k].key == child.key:
                earlier = len(self.history) + k
                break
        if earlier is None:
            earlier = self._history_at.get(child.key)
            if earlier is None or (j - earlier) % 2:
                return None
        checks = [c for _, c in self.history] + [node.check for node in line]
        if all(checks[earlier + 1:j:2]):                    # every move of the child's mover gave check
            return 0.0
        if all(checks[earlier + 2:j + 1:2]):                # every move of the opponent gave check
            return 1.0
        return self.settings.draw_value

    def _evaluate(self, leaves: list[tuple[list[tuple[Node, int]], Node]]) -> None:
        nodes = [leaf for _, leaf in leaves]
        if self._policy:
            board, hands = quiescence.encode([n.position for n in nodes])
            labels = [legal_labels(n.position, n.legal) for n in nodes]
            begin = time.monotonic()
            result = evaluate(self.evaluator, board, hands, labels)
            self.clock.record(begin, len(nodes))
            self.nodes += len(nodes)
            values, priors = result.win, result.priors
        else:
            settings = self.settings
            values = quiescence.values([n.position for n in nodes], self._values, settings.quiescence_plies,
                                       settings.quiescence_width, self._expired, [n.legal for n in nodes])
            priors = None
        values = np.clip(values, PROB_CLIP, 1 - PROB_CLIP)
        with self._tree_lock:
            self._expand_leaves(leaves, values.tolist(), priors)

    def _expand_leaves(self, leaves: list[tuple[list[tuple[Node, int]], Node]], values: list[float],
                       priors: Sequence[np.ndarray] | None) -> None:
        for k, ((path, leaf), value) in enumerate(zip(leaves, values)):
            size = len(leaf.legal)
            leaf.pending = False
            prior = priors[k] if priors is not None else np.full(size, 1.0 / size)
            if not (math.isfinite(value) and np.isfinite(prior).all()):
                self._unevaluated(path, leaf)
                continue
            leaf.expand(prior)
            self._back_up(path, leaf, value)
            if leaf is self.tree:
                self._create_children(leaf)

    def _unevaluated(self, path: list[tuple[Node, int]], leaf: Node) -> None:
        """A leaf the evaluator answered with NaN: its playout undone, its edge skipped from now on."""
        self.unevaluated += 1
        self._undo(path)
        if path:
            parent, i = path[-1]
            _edges(parent).skip[i] = True
        elif leaf is self.tree:
            self._root_failed = True

    def _create_children(self, root: Node) -> None:
        """Every child of the root at once: a mate in one, a repetition or a declaration there is known
        before the first playout (a child is cheap next to an evaluation; deeper nodes get theirs lazily)."""
        edges = _edges(root)
        for i in range(len(root.legal)):
            if edges.children[i] is None:
                edges.children[i] = self._new_child(root, i, [(root, i)])
            self._prove(root, i)

    def _undo(self, path: list[tuple[Node, int]]) -> None:
        for node, i in path:
            edges = _edges(node)
            edges.n[i] -= 1
            edges.virtual[i] -= 1
            node.visits -= 1

    def _back_up(self, path: list[tuple[Node, int]], leaf: Node, value: float) -> None:
        leaf.visits += 1
        leaf.value_sum += value
        for node, i in reversed(path):
            value = 1.0 - value
            edges = _edges(node)
            edges.w[i] += value
            edges.virtual[i] -= 1
            node.value_sum += value
        for node, i in reversed(path):                      # proofs, from the leaf up
            if not self._prove(node, i):
                break

    @staticmethod
    def _prove(node: Node, i: int) -> bool:
        """Update node's proof from its child i; True when the node's proof changed."""
        edges = _edges(node)
        child = edges.children[i]
        assert child is not None                            # a playout or the root created it
        if child.proven == LOSS:
            plies = child.plies + 1
            if node.proven != WIN or plies < node.plies:
                node.proven, node.plies = WIN, plies
                return True
            return False
        if child.proven == WIN and not edges.bad[i]:
            edges.bad[i] = True
            if edges.bad.all():                             # every child exists and is won for its mover
                node.proven = LOSS
                node.plies = max(c.plies for c in edges.children if c is not None) + 1
                return True
        return False

    # -- results ----------------------------------------------------------------------------------------

    def _order(self) -> list[int]:
        """Root moves, best first: mates (shortest first), then by completed visits, Q and the prior,
        proven losses last."""
        edges = _edges(self.tree)
        done = edges.n - edges.virtual
        keys = []
        for i, child in enumerate(edges.children):
            q = edges.w[i] / done[i] if done[i] > 0 else -1.0
            rank = 0 if child is not None and child.proven == LOSS else (2 if edges.bad[i] else 1)
            plies = 0 if child is None else (child.plies if rank == 0 else (-child.plies if rank == 2 else 0))
            keys.append((rank, plies, -done[i], -q, -edges.priors[i], i))
        return [k[-1] for k in sorted(keys)]

    def choose(self, temperature: float = 0.0, rng: random.Random | None = None) -> str | None:
        """The move to play (module docstring); None when the root has no legal move."""
        root = self.tree
        if not root.legal:
            return None
        edges = root.edges
        if edges is None:
            return root.legal[0]
        order = self._order()
        best = order[0]
        best_child = edges.children[best]
        if temperature <= 0 or best_child is not None and best_child.proven == LOSS:
            return root.legal[best]
        done = edges.n - edges.virtual
        candidates = [i for i in order if done[i] > 0 and not edges.bad[i]]
        if not candidates:
            return root.legal[best]
        weights = np.asarray([done[i] for i in candidates], np.float64) ** (1.0 / temperature)
        pick = (rng or random.Random()).random() * weights.sum()
        return root.legal[candidates[min(int(np.searchsorted(np.cumsum(weights), pick, "right")),
                                         len(candidates) - 1)]]

    def line(self, move: str) -> RootLine:
        """The root line of `move` (a legal move of the root; the root is expanded)."""
        return self._line(self.tree.legal.index(move))

    def info(self) -> SearchInfo:
        """Root moves best first (at most multipv of them), with their PVs; safe from another thread."""
        with self._tree_lock:
            return self._info()

    def _info(self) -> SearchInfo:
        seconds = max(time.monotonic() - self._start, 1e-9)
        root = self.tree
        if not root.expanded or not root.legal:
            return SearchInfo((), self.nodes, 0, self.seldepth, seconds)
        lines = tuple(self._line(i) for i in self._order()[:self.multipv])
        return SearchInfo(lines, self.nodes, len(lines[0].pv), self.seldepth, seconds)

    def _line(self, i: int) -> RootLine:
        root = self.tree
        edges = _edges(root)
        child = edges.children[i]
        mate = None
        done = int(edges.n[i] - edges.virtual[i])
        p: float | None = None
        if child is not None and child.proven != OPEN:
            mate = child.plies + 1 if child.proven == LOSS else -(child.plies + 1)
            p = 1.0 if child.proven == LOSS else 0.0
        elif done > 0:
            p = float(edges.w[i] / done)
        pv, node = [root.legal[i]], child
        while node is not None and node.edges is not None and node.visits > 1:
            k = _pv_child(node, node.edges)
            if k is None:
                break
            pv.append(node.legal[k])
            node = node.edges.children[k]
        return RootLine(root.legal[i], p, mate, tuple(pv), done)


def _pv_child(node: Node, edges: Edges) -> int | None:
    """The PV's move at an expanded node: along a proof the shortest win or the longest defence, else the
    most visited; None when no move was visited."""
    children = [(k, c) for k, c in enumerate(edges.children) if c is not None]
    if node.proven == WIN:
        return min((c.plies, k) for k, c in children if c.proven == LOSS)[1]
    if node.proven == LOSS:
        return max((c.plies, -k) for k, c in children)[1] * -1
    done = edges.n - edges.virtual
    k = int(np.argmax(done))
    return None if edges.children[k] is None or done[k] <= 0 else k


def _edges(node: Node) -> Edges:
    """The edges of a node known to be expanded (one on a playout's path, the root once evaluated)."""
    assert node.edges is not None
    return node.edges
