"""engine/quiescence.py: capture generation, the values against a full-width brute force, the width limit,
a free capture that the static value misses, mates, and the deadline."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shogi_dnn.engine import quiescence
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import parse_square, position_factory
from tests.engine.support import HANGING, material


def _static(evaluator, positions) -> np.ndarray:
    board, hands = quiescence.encode(positions)
    return evaluator.win_probability(board, hands)


def _brute(evaluator, position, plies: int) -> float:
    """max(static, max over every capture of 1 - brute(child)); no legal move with plies left: 0."""
    static = float(_static(evaluator, [position])[0])
    if plies == 0:
        return static
    legal = position.legal_usi()
    if not legal:
        return 0.0
    best = static
    for move in quiescence.captures(position, legal):
        child = position.copy()
        child.push_usi(move)
        best = max(best, 1.0 - _brute(evaluator, child, plies - 1))
    return best


def _random_positions(count: int, seed: int) -> list:
    rng = random.Random(seed)
    factory = position_factory()
    positions = []
    while len(positions) < count:
        position = factory(STANDARD_START_SFEN)
        for _ in range(rng.randrange(10, 60)):
            legal = position.legal_usi()
            if not legal:
                break
            captures = quiescence.captures(position, legal)
            position.push_usi(rng.choice(captures if captures and rng.random() < 0.3 else legal))
        if position.legal_usi():
            positions.append(position)
    return positions


def test_captures_are_the_moves_onto_opponent_pieces() -> None:
    position = position_factory()(HANGING)
    assert quiescence.captures(position, position.legal_usi()) == ["5h5d"]
    start = position_factory()(STANDARD_START_SFEN)
    assert quiescence.captures(start, start.legal_usi()) == []
    for position in _random_positions(20, seed=5):
        codes, turn = position.piece_codes(), position.turn
        targets = {m: codes[parse_square(m[2:4])] for m in position.legal_usi() if m[1] != "*"}
        want = [m for m, code in targets.items() if code and (code > 14) != turn]
        assert quiescence.captures(position, position.legal_usi()) == want
    assert [parse_square(s) for s in ("9a", "1i", "5e")] == [0, 80, 40]


@pytest.mark.parametrize("plies", [1, 2, 3])
def test_values_equal_the_brute_force_at_full_width(plies: int) -> None:
    evaluator = material()
    positions = _random_positions(12, seed=plies) + [position_factory()(HANGING)]
    calls = []

    def evaluate(batch):
        calls.append(len(batch))
        return _static(evaluator, batch)

    got = quiescence.values(positions, evaluate, plies=plies, width=64)
    want = [_brute(evaluator, p, plies) for p in positions]
    assert got == pytest.approx(want)
    assert len(calls) <= plies + 1                     # one batch per level, for all the leaves together


def test_a_free_capture_that_the_static_value_misses() -> None:
    evaluator = material()
    position = position_factory()(HANGING)             # Black to move: 5hx5d wins a pawn, S5cx5d the rook
    static = float(_static(evaluator, [position])[0])
    one = quiescence.values([position], lambda b: _static(evaluator, b), plies=1)[0]
    two = quiescence.values([position], lambda b: _static(evaluator, b), plies=2)[0]
    assert one > static                                # the pawn looks free at one capture ply
    assert two == pytest.approx(static)                # the recapture: Black stands pat instead
    after = position.copy()
    after.push_usi("5h5d")                             # White to move: the rook on 5d hangs
    white_static = float(_static(evaluator, [after])[0])
    white = quiescence.values([after], lambda b: _static(evaluator, b), plies=2)[0]
    assert white > white_static + 0.1                  # S5cx5d found: a rook for White


def test_width_keeps_the_best_captures_and_mates_count() -> None:
    evaluator = material()
    positions = _random_positions(12, seed=11)
    wide = quiescence.values(positions, lambda b: _static(evaluator, b), plies=2, width=64)
    narrow = quiescence.values(positions, lambda b: _static(evaluator, b), plies=2, width=1)
    static = _static(evaluator, positions)
    assert np.all(narrow >= static - 1e-12) and np.all(wide >= static - 1e-12)      # stand-pat
    assert not np.allclose(wide, narrow) or np.allclose(wide, static)
    mated = position_factory()("4k4/4G4/4P4/9/9/9/9/9/4K4 w - 1")
    assert quiescence.values([mated], lambda b: _static(evaluator, b), plies=1)[0] == 0.0


def test_an_expired_clock_stops_before_the_next_level() -> None:
    evaluator = material()
    positions = _random_positions(6, seed=3)
    calls = []

    def evaluate(batch):
        calls.append(len(batch))
        return _static(evaluator, batch)

    got = quiescence.values(positions, evaluate, plies=3, expired=lambda positions: positions > 0)
    assert got == pytest.approx(_static(evaluator, positions)) and len(calls) == 1
