"""Scores on constructed cases with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shogi_dnn.analysis import scoring


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_loss_matches_the_definition_including_draws() -> None:
    x = np.array([2.0, -1.0, 0.5, -30.0, 40.0])
    y = np.array([1.0, 0.0, 0.5, 1.0, 0.0])
    p = 1 / (1 + np.exp(-x))
    with np.errstate(divide="ignore"):
        expected = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    expected[4] = 40.0          # log(1 - p) underflows for p = 1 - 4e-18; the true loss is ~x
    np.testing.assert_allclose(scoring.cross_entropy(x, y), expected, rtol=1e-9)
    assert math.isfinite(scoring.log_loss(x, y))


def test_accuracy_counts_decisive_positions_only() -> None:
    x = np.array([1.0, 1.0, -1.0, -1.0, 3.0, -3.0])
    y = np.array([1.0, 0.0, 0.0, 0.0, 0.5, 0.5])      # 3 of 4 decisive right; two draws
    assert scoring.accuracy(x, y) == pytest.approx(0.75)
    s = scoring.Scorer()
    s.add(x, y)
    out = s.summary()
    assert out["positions"] == 6 and out["decisive"] == 4 and out["accuracy"] == pytest.approx(0.75)
    assert out["draws"]["positions"] == 2
    assert out["draws"]["mean_prob"] == pytest.approx(0.5)
    assert math.isnan(scoring.accuracy(x[4:], y[4:]))


def test_ece_on_a_constructed_case() -> None:
    # 400 positions at p = 0.25 of which 100 won (calibrated); 400 at p = 0.75 of which 200 won (gap 0.25).
    x = np.concatenate([np.full(400, logit(0.25)), np.full(400, logit(0.75))])
    y = np.concatenate([np.repeat([1.0, 0.0], [100, 300]), np.repeat([1.0, 0.0], [200, 200])])
    rows, ece = scoring.reliability_table(x, y, bins=10)
    assert ece == pytest.approx(0.5 * 0.0 + 0.5 * 0.25)
    assert [(r["lo"], r["positions"]) for r in rows] == [(0.2, 400), (0.7, 400)]
    assert rows[0]["mean_label"] == pytest.approx(0.25) and rows[1]["mean_label"] == pytest.approx(0.5)
    # Brier: group 1 0.25*0.75^2 + 0.75*0.25^2 = 0.1875; group 2 0.5*0.25^2 + 0.5*0.75^2 = 0.3125.
    assert scoring.brier(x, y) == pytest.approx((0.1875 + 0.3125) / 2)


def test_perfect_calibration_has_zero_ece() -> None:
    x = np.concatenate([np.full(10, logit(0.1)), np.full(10, logit(0.9))])
    y = np.array([1.0] + [0.0] * 9 + [1.0] * 9 + [0.0])
    assert scoring.reliability_table(x, y)[1] == pytest.approx(0.0, abs=1e-12)


def test_merged_scorers_equal_one_scorer_and_buckets_partition() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000)
    y = rng.choice([0.0, 0.5, 1.0], size=1000, p=[0.45, 0.1, 0.45])
    ply = rng.integers(0, 200, size=1000)
    rating = np.where(rng.random(1000) < 0.2, np.nan, rng.uniform(500, 4000, size=1000))
    whole = scoring.Scorer()
    whole.add(x, y, ply, rating)
    parts = [scoring.Scorer() for _ in range(3)]
    for i, part in enumerate(parts):
        part.add(x[i::3], y[i::3], ply[i::3], rating[i::3])
    merged = scoring.Scorer()
    for part in parts:
        merged.merge(part)
    a, b = whole.summary(), merged.summary()
    for key in ("positions", "loss", "accuracy", "brier", "ece"):
        assert a[key] == pytest.approx(b[key])
    assert a["loss"] == pytest.approx(scoring.log_loss(x, y))
    assert sum(r["positions"] for r in a["by_ply"]) == 1000
    assert sum(r["positions"] for r in a["by_rating"]) == int(np.isfinite(rating).sum())
    early = next(r for r in a["by_ply"] if r["lo"] == 0)
    assert early["positions"] == int((ply < 20).sum())
    assert early["loss"] == pytest.approx(scoring.log_loss(x[ply < 20], y[ply < 20]))
    # Positions-weighted mean of the parts' losses is the total loss.
    weighted = sum(p.summary()["loss"] * p.summary()["positions"] for p in parts) / 1000
    assert weighted == pytest.approx(a["loss"])


def test_empty_scorer_gives_nulls_and_spread() -> None:
    out = scoring.Scorer().summary()
    assert out["positions"] == 0 and out["loss"] is None and out["ece"] is None
    assert scoring.spread([0.5, None, 0.7]) == pytest.approx(0.2)
    assert scoring.spread([None]) is None
