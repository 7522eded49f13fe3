"""What every search shares (engine/search.py, engine/minimax.py): limits, settings, the evaluator calls'
clock, reported lines and the cp scale.

A search stops at the first of `stop`, the node budget, a proven root, or the deadline; an evaluator
call expected (the slowest of the last RECENT_STEPS calls, scaled up to its size, times STEP_MARGIN) to
end after the deadline is not started. cp = round(EVAL_SCALE * logit(p)), EVAL_SCALE = 756
(evalfit.DEFAULT_SCALE), clipped to +-MAX_CP.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable

import numpy as np

from shogi_dnn.dataset import evalfit
from shogi_dnn.engine import quiescence
from shogi_dnn.engine.players import Evaluator
from shogi_dnn.rules import ENTERING_KING_RULE, Position

EVAL_SCALE = evalfit.DEFAULT_SCALE        # cp = EVAL_SCALE * logit(p)
MAX_CP = 30000                            # |cp| reported at most (USI GUIs treat larger values as mates)
PROB_CLIP = 1e-6                          # evaluated values stay inside (0, 1): 0 and 1 mean proven
MAX_TREE_NODES = 200_000                  # a search stops here: about 6 KB a node (1.2 GB), most of it
                                          # the legal moves' strings
STEP_MARGIN = 1.5                         # the next step is expected to take this times the slowest recent
RECENT_STEPS = 8                          # evaluator calls remembered for that estimate


@dataclasses.dataclass(frozen=True)
class Limits:
    """When a search stops (None: no such limit). The root is always evaluated, whatever the limits.

    Attributes:
        nodes: positions evaluated. depth: plies (the best-first search, engine/minimax.py, only).
        seconds: wall-clock time from the start of the search. deadline: time.monotonic() at which the
            move must be decided (the earlier of the two counts). infinite: only `stop` ends it.
    """

    nodes: int | None = None
    depth: int | None = None
    seconds: float | None = None
    infinite: bool = False
    deadline: float | None = None


@dataclasses.dataclass(frozen=True)
class Settings:
    """How the searches play (USI options of the same meaning: engine/protocol.py)."""

    c_puct: float = 1.0                   # exploration weight (values in [0, 1], so half AlphaZero's scale)
    batch_size: int = 8                   # leaves evaluated in one evaluator call
    fpu_reduction: float = 0.1            # an unvisited move's Q: the node's mean value minus this
    quiescence_plies: int = quiescence.DEFAULT_PLIES     # without a policy head: capture plies at leaves
    quiescence_width: int = quiescence.DEFAULT_WIDTH     # captures kept per quiescence node
    draw_value: float = 0.5               # a repetition draw, for either side
    entering_king_rule: str = ENTERING_KING_RULE         # rules.ENTERING_KING_RULES


@dataclasses.dataclass(frozen=True)
class RootLine:
    """One root move: p = P(the side to move at the root wins) after it, None when no position under the
    move was evaluated; mate: signed plies or None; visits: completed playouts through it (0 for the
    best-first search)."""

    move: str
    p: float | None
    mate: int | None
    pv: tuple[str, ...]
    visits: int = 0

    @property
    def cp(self) -> int | None:
        return None if self.p is None else score_cp(self.p)


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


class StepClock:
    """The time evaluator calls take: the last RECENT_STEPS calls' (seconds, positions)."""

    def __init__(self) -> None:
        self._steps: list[tuple[float, int]] = []

    def record(self, begin: float, positions: int) -> None:
        """A call on `positions` positions that began at time.monotonic() `begin` and ends now."""
        self._steps = (self._steps + [(time.monotonic() - begin, max(1, positions))])[-RECENT_STEPS:]

    def expected(self, positions: int) -> float:
        """Seconds a call on `positions` positions is expected to take (module docstring)."""
        return STEP_MARGIN * max((seconds * max(1.0, positions / count) for seconds, count in self._steps),
                                 default=0.0)


class LimitedSearch:
    """What the PUCT search and the best-first minimax share: the evaluator, the limits and the stop
    event, the info reports, multipv, the settings, the counters and the clock."""

    def __init__(self, evaluator: Evaluator, limits: Limits, stop: threading.Event | None,
                 report: Callable[[SearchInfo], None] | None, report_every: float, multipv: int,
                 settings: Settings) -> None:
        self.evaluator = evaluator
        self.limits = limits
        self.stop = stop or threading.Event()
        self.report = report
        self.report_every = report_every
        self.multipv = max(1, multipv)
        self.settings = settings
        self.nodes = 0
        self.seldepth = 0
        self.clock = StepClock()
        self._start = 0.0                         # time.monotonic() when run() began

    def deadline(self) -> float | None:
        """The earliest of the limits' deadline and `seconds` after the start (None: no clock)."""
        limits = self.limits
        ends = [d for d in (limits.deadline, None if limits.seconds is None else self._start + limits.seconds)
                if d is not None]
        return min(ends) if ends else None

    def _expired(self, positions: int) -> bool:
        """True when an evaluator call on `positions` positions would end after the deadline."""
        deadline = self.deadline()
        if deadline is None or self.limits.infinite:
            return False
        return time.monotonic() + self.clock.expected(positions) >= deadline

    def _values(self, positions: list[Position]) -> np.ndarray:
        """[len] float64 P(the side to move wins) of `positions`: one timed evaluator call."""
        board, hands = quiescence.encode(positions)
        begin = time.monotonic()
        values = np.asarray(self.evaluator.win_probability(board, hands), np.float64)
        self.clock.record(begin, len(positions))
        self.nodes += len(positions)
        return values
