"""A capture quiescence search over batched evaluations: a policy-less network's value at the leaves.

Level by level, one evaluator batch per level for all the leaves together:

  level 0   the leaves themselves: their static value (P(the side to move wins), the network's)
  level k   every legal capture of each node kept at level k - 1 (a move onto a square holding an opponent
            piece); the `width` captures best for the mover (lowest value left to the opponent) are kept
            and searched at the next level, up to `plies` capture plies

Back-up, negamax on probabilities with stand-pat:

  q(node) = max(static(node), max over kept captures c of (1 - q(c)))

A node without a legal move is mated (q = 0). A NaN capture is dropped. Checks are not searched. The clock
(`expired(positions)`) is asked before each level; the search then backs up what it has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from shogi_dnn.dataset import features
from shogi_dnn.rules import NUM_PIECE_TYPES, Position, parse_square

DEFAULT_PLIES = 2                 # capture plies searched below a leaf
DEFAULT_WIDTH = 4                 # captures kept at each node (the best for the mover)


def captures(position: Position, legal: Sequence[str]) -> list[str]:
    """The legal moves of `position` (given as `legal`) that capture an opponent piece."""
    codes = position.piece_codes()
    low = NUM_PIECE_TYPES * (1 - position.turn)            # opponent codes: low + 1 .. low + 14
    return [m for m in legal if m[1] != "*" and low < codes[parse_square(m[2:4])] <= low + NUM_PIECE_TYPES]


@dataclasses.dataclass
class _Node:
    position: Position
    static: float = 0.5
    mated: bool = False
    kids: list[_Node] = dataclasses.field(default_factory=list)

    def value(self) -> float:
        if self.mated:
            return 0.0
        if not np.isfinite(self.static):
            return self.static
        best = self.static
        for kid in self.kids:
            best = max(best, 1.0 - kid.value())
        return best


def values(positions: Sequence[Position], evaluate: Callable[[list[Position]], np.ndarray],
           plies: int = DEFAULT_PLIES, width: int = DEFAULT_WIDTH,
           expired: Callable[[int], bool] = lambda positions: False,
           legal: Sequence[Sequence[str]] | None = None) -> np.ndarray:
    """Quiescence values of `positions` (module docstring).

    Args:
        positions: the leaves (not changed: captures are played on copies).
        evaluate: positions -> [len] float64 P(the side to move wins), one batch per call.
        plies: capture plies (0: the static values). width: captures kept per node.
        expired: positions -> True when evaluating that many would end past the deadline (asked before
            each capture level).
        legal: the leaves' legal moves when the caller has them (saves generating them again).
    Returns:
        [len(positions)] float64 values of the leaves, for their side to move.
    """
    roots = [_Node(p) for p in positions]
    if not roots:
        return np.zeros(0)
    for node, value in zip(roots, evaluate([n.position for n in roots])):
        node.static = float(value)
    frontier = roots
    known = list(legal) if legal is not None else None
    for _ in range(plies):
        if not frontier:
            break
        children: list[tuple[_Node, _Node]] = []
        for i, node in enumerate(frontier):
            moves = known[i] if known is not None else node.position.legal_usi()
            if not moves:
                node.mated = True
                continue
            for move in captures(node.position, moves):
                after = node.position.copy()
                after.push_usi(move)
                children.append((node, _Node(after)))
        known = None
        if not children or expired(len(children)):
            break
        for (_, child), value in zip(children, evaluate([c.position for _, c in children])):
            child.static = float(value)
        frontier = _keep_best(children, width)
    return np.asarray([node.value() for node in roots], np.float64)


def _keep_best(children: list[tuple[_Node, _Node]], width: int) -> list[_Node]:
    """Attach to each parent its `width` captures leaving the opponent the least; the kept children."""
    by_parent: dict[int, tuple[_Node, list[_Node]]] = {}
    for parent, child in children:
        if not np.isfinite(child.static):
            continue
        by_parent.setdefault(id(parent), (parent, []))[1].append(child)
    kept = []
    for parent, kids in by_parent.values():
        kids.sort(key=lambda c: c.static)                  # stable: generation order breaks ties
        parent.kids = kids[:width]
        kept += parent.kids
    return kept


def encode(positions: Sequence[Position]) -> tuple[np.ndarray, np.ndarray]:
    """[N, 81] uint8 boards and [N, 14] uint8 hands of positions (features.encode_position)."""
    pairs = [features.encode_position(p) for p in positions]
    return (np.stack([b for b, _ in pairs]).astype(np.uint8, copy=False),
            np.stack([h for _, h in pairs]).astype(np.uint8, copy=False))
