"""The values of a game's positions through a short search, for `predict`'s win-rate curve:

  none          the network's value of each position (no search)
  quiescence    the capture quiescence value of every position (engine/quiescence.py: captures only,
                DEFAULT_PLIES plies, the DEFAULT_WIDTH best captures a node, stand-pat with the network's
                value); all positions of the game in one evaluator batch a level: the default, cheap
  nodes=N       a PUCT search of N evaluated positions from each position (engine/search.py; policy
                priors when the network has a policy head, quiescence at the leaves otherwise); the
                value is the best root move's (its mean value, or 1 / 0 when proven); slower
A position without a legal move is lost for its side to move (0) under every search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from shogi_dnn.analysis import predict, scoring
from shogi_dnn.engine import quiescence
from shogi_dnn.engine.limits import Limits
from shogi_dnn.engine.players import Evaluator
from shogi_dnn.engine.search import Search
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import Position, new_position

MODES = ("none", "quiescence", "nodes=N")
DEFAULT = "quiescence"


@dataclasses.dataclass(frozen=True)
class SearchMode:
    """How each position is valued: kind "none", "quiescence" or "nodes" (with `nodes` > 0)."""

    kind: str
    nodes: int = 0

    def describe(self) -> str:
        """`the network's value (no search)`, `capture quiescence (2 plies, 4 captures a node)`,
        `a 64-node search per position`."""
        if self.kind == "none":
            return predict.RAW
        if self.kind == "quiescence":
            return (f"capture quiescence ({quiescence.DEFAULT_PLIES} plies, {quiescence.DEFAULT_WIDTH} "
                    "captures a node)")
        return f"a {self.nodes}-node search per position"

    def short(self) -> str:
        """For the graph: `no search`, `quiescence`, `64-node search`."""
        return {"none": "no search", "quiescence": "quiescence"}.get(self.kind, f"{self.nodes}-node search")


def parse_mode(text: str) -> SearchMode:
    """A --search argument: `none`, `quiescence` or `nodes=N` (N > 0).

    Raises:
        ValueError: anything else (the message names the text and the choices).
    """
    text = text.strip()
    if text in ("none", "quiescence"):
        return SearchMode(text)
    kind, _, count = text.partition("=")
    if kind == "nodes" and count.isdigit() and int(count) > 0:
        return SearchMode("nodes", int(count))
    raise ValueError(f"unknown search {text!r} (one of {', '.join(MODES)}, N a positive number)")


class ModelEvaluator:
    """A loaded model called as a Keras model is (analysis/predict.predict_outputs: a value logit, and
    policy logits when its output is a dict) as an engine Evaluator."""

    def __init__(self, model, name: str = "model") -> None:
        self.model = model
        self.name = name
        self.has_policy = False
        self._loaded = False

    def load(self) -> None:
        """Ask the model once (the start position) to learn whether it has a policy head."""
        if self._loaded:
            return
        board, hands = quiescence.encode([new_position(STANDARD_START_SFEN)])
        self.has_policy = predict.predict_outputs(self.model, board, hands)[1] is not None
        self._loaded = True

    def evaluate_logits(self, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """[N] float64 win probabilities and [N, 2187] policy logits (None without a policy head)."""
        logits, policy_logits = predict.predict_outputs(self.model, board, hands)
        return scoring.sigmoid(logits), policy_logits

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        return self.evaluate_logits(board, hands)[0]


def position_values(evaluator: Evaluator, sfens: Sequence[str], mode: SearchMode) -> np.ndarray:
    """[len(sfens)] float64 P(the side to move wins) of each position under `mode` (module docstring)."""
    evaluator.load()
    positions = [new_position(sfen) for sfen in sfens]
    if not positions:
        return np.zeros(0)

    def evaluate(batch: list[Position]) -> np.ndarray:
        return np.asarray(evaluator.win_probability(*quiescence.encode(batch)), np.float64)

    if mode.kind == "none":
        return evaluate(positions)
    if mode.kind == "quiescence":
        return quiescence.values(positions, evaluate)
    out = np.zeros(len(positions))
    for i, position in enumerate(positions):
        info = Search(evaluator, position, Limits(nodes=mode.nodes)).run()
        best = info.lines[0].p if info.lines else 0.0
        out[i] = evaluate([position])[0] if best is None else best
    return out


def curve_values(evaluator: Evaluator, mode: SearchMode):
    """The `values` argument of analysis/predict.game_curve: a game's positions -> their values."""
    return lambda positions: position_values(evaluator, positions.sfens, mode)
