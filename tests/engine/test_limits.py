"""engine/limits.py: the clock both searches use for their evaluator calls."""

from __future__ import annotations

import time

import pytest

from shogi_dnn.engine import limits, minimax, search
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import new_position
from tests.engine.support import material


def test_a_call_is_expected_to_take_the_slowest_recent_call_scaled_up() -> None:
    clock = limits.StepClock()
    assert clock.expected(8) == 0.0                                # nothing measured yet
    now = time.monotonic()
    clock.record(now - 0.1, 8)
    clock.record(now - 0.05, 8)
    assert clock.expected(8) == pytest.approx(limits.STEP_MARGIN * 0.1, rel=0.2)
    assert clock.expected(4) == pytest.approx(limits.STEP_MARGIN * 0.1, rel=0.2)     # never scaled down
    assert clock.expected(16) == pytest.approx(limits.STEP_MARGIN * 0.2, rel=0.2)
    for _ in range(limits.RECENT_STEPS):
        clock.record(time.monotonic(), 8)
    assert clock.expected(8) < 0.01                                # the slow calls are forgotten


@pytest.mark.parametrize("kind", ["puct", "best-first"])
def test_both_searches_time_their_calls_on_the_shared_clock(kind: str) -> None:
    position, budget = new_position(STANDARD_START_SFEN), limits.Limits(nodes=40)
    run: search.Search | minimax.BestFirst = (search.Search(material(), position, budget) if kind == "puct"
                                              else minimax.BestFirst(material(), position, budget))
    run.run()
    assert isinstance(run.clock, limits.StepClock) and run.clock.expected(1) > 0.0
