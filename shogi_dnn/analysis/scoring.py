"""Scores of value predictions against game results (numpy only, streaming).

Every prediction is a logit for "the side to move wins"; labels are features.LABEL_WIN (1),
LABEL_LOSS (0) and LABEL_DRAW (0.5). Conventions, shared by the model and the baselines:

  loss       mean binary cross-entropy over ALL positions (draws with target 0.5): what training minimises
  accuracy   over DECISIVE positions only (label 0 or 1): predicted win (p > 0.5) == label; draws are
             reported apart (their count, loss and mean probability)
  brier      mean (p - label)^2 over all positions
  ece        expected calibration error: sum over equal-width probability bins of
             (bin positions / positions) * |mean p - mean label|; the reliability table lists the bins
  by_ply     the same scores per game-phase bucket of `ply`; by_rating per rating band (NaN ratings skipped)

`Scorer` accumulates sums batch by batch, so a split of any size is scored in constant memory, and two
scorers can be merged (per-GPU scorers sum to the total one).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from shogi_dnn.features import LABEL_DRAW, LABEL_LOSS, LABEL_WIN

CALIBRATION_BINS = 10
# Game-phase buckets by ply (moves played before the position): [0, 20), [20, 40), ... [150, inf).
PLY_EDGES: tuple[float, ...] = (0, 20, 40, 60, 80, 100, 150, math.inf)
# Rating bands (mean of both players' ratings): [-inf, 1000), [1000, 1500), ... [3500, inf).
RATING_EDGES: tuple[float, ...] = (-math.inf, 1000, 1500, 2000, 2500, 3000, 3500, math.inf)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function. [N] float -> [N] float64 in (0, 1)."""
    x = np.asarray(logits, np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-position binary cross-entropy from logits (stable), [N] -> [N] float64 nats."""
    x = np.asarray(logits, np.float64)
    y = np.asarray(labels, np.float64)
    return np.maximum(x, 0.0) - x * y + np.log1p(np.exp(-np.abs(x)))


def log_loss(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean binary cross-entropy over all positions (draws with target 0.5)."""
    return float(np.mean(cross_entropy(logits, labels)))


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Share of decisive positions (label 0 or 1) whose winner is predicted (logit > 0 means a win).

    NaN when there is no decisive position.
    """
    labels = np.asarray(labels)
    decisive = labels != LABEL_DRAW
    if not decisive.any():
        return math.nan
    return float(np.mean((np.asarray(logits)[decisive] > 0) == (labels[decisive] == LABEL_WIN)))


def brier(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean squared error of the win probability against the label, over all positions."""
    return float(np.mean((sigmoid(logits) - np.asarray(labels, np.float64)) ** 2))


@dataclasses.dataclass
class _Sums:
    """Additive sufficient statistics of one group of positions."""

    count: int = 0
    loss_sum: float = 0.0
    brier_sum: float = 0.0
    decisive: int = 0
    correct: int = 0
    draws: int = 0
    draw_loss_sum: float = 0.0
    draw_prob_sum: float = 0.0

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        p = sigmoid(x)
        ce = cross_entropy(x, y)
        draw = y == LABEL_DRAW
        self.count += int(y.size)
        self.loss_sum += float(ce.sum())
        self.brier_sum += float(((p - y) ** 2).sum())
        self.decisive += int((~draw).sum())
        self.correct += int(((x > 0) == (y == LABEL_WIN))[~draw].sum())
        self.draws += int(draw.sum())
        self.draw_loss_sum += float(ce[draw].sum())
        self.draw_prob_sum += float(p[draw].sum())

    def merge(self, other: _Sums) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def summary(self) -> dict[str, Any]:
        return {
            "positions": self.count,
            "loss": _ratio(self.loss_sum, self.count),
            "accuracy": _ratio(self.correct, self.decisive),
            "brier": _ratio(self.brier_sum, self.count),
            "decisive": self.decisive,
            "draws": {"positions": self.draws, "loss": _ratio(self.draw_loss_sum, self.draws),
                      "mean_prob": _ratio(self.draw_prob_sum, self.draws)},
        }


def _ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None (JSON null) for an empty group."""
    return float(numerator) / denominator if denominator else None


def reliability_table(logits: np.ndarray, labels: np.ndarray,
                      bins: int = CALIBRATION_BINS) -> tuple[list[dict[str, Any]], float]:
    """Reliability table and expected calibration error of one array of predictions.

    Returns:
        (rows, ece): one row per non-empty equal-width bin of the win probability, with
        lo, hi, positions, mean_prob and mean_label (the observed score, draws 0.5).
    """
    scorer = Scorer(bins=bins)
    scorer.add(logits, labels)
    return scorer.reliability(), scorer.ece()


class Scorer:
    """Streaming scores of predictions: totals, calibration bins, ply buckets and rating bands."""

    def __init__(self, bins: int = CALIBRATION_BINS, ply_edges: Sequence[float] = PLY_EDGES,
                 rating_edges: Sequence[float] = RATING_EDGES) -> None:
        self.bins = int(bins)
        self.ply_edges = tuple(float(e) for e in ply_edges)
        self.rating_edges = tuple(float(e) for e in rating_edges)
        self.total = _Sums()
        self.by_ply = [_Sums() for _ in range(len(self.ply_edges) - 1)]
        self.by_rating = [_Sums() for _ in range(len(self.rating_edges) - 1)]
        self.bin_count = np.zeros(self.bins, np.int64)
        self.bin_prob = np.zeros(self.bins, np.float64)
        self.bin_label = np.zeros(self.bins, np.float64)

    def add(self, logits: np.ndarray, labels: np.ndarray, ply: np.ndarray | None = None,
            rating: np.ndarray | None = None) -> None:
        """Add a batch.

        Args:
            logits: [N] float, win logit of the side to move.
            labels: [N] float32 in {0, 0.5, 1}.
            ply: [N] int, moves played before each position (by_ply is skipped when None).
            rating: [N] float, rating of each position's game (NaN = unknown; by_rating skipped when None).
        """
        x = np.asarray(logits, np.float64).reshape(-1)
        y = np.asarray(labels, np.float64).reshape(-1)
        if x.shape != y.shape:
            raise ValueError(f"{x.shape[0]} logits for {y.shape[0]} labels")
        self.total.add(x, y)
        p = sigmoid(x)
        index = np.minimum((p * self.bins).astype(np.int64), self.bins - 1)
        self.bin_count += np.bincount(index, minlength=self.bins)
        self.bin_prob += np.bincount(index, weights=p, minlength=self.bins)
        self.bin_label += np.bincount(index, weights=y, minlength=self.bins)
        if ply is not None:
            _add_bucketed(self.by_ply, self.ply_edges, np.asarray(ply, np.float64).reshape(-1), x, y)
        if rating is not None:
            _add_bucketed(self.by_rating, self.rating_edges, np.asarray(rating, np.float64).reshape(-1), x, y)

    def merge(self, other: Scorer) -> None:
        """Add another scorer's sums (same bins and edges)."""
        if (other.bins, other.ply_edges, other.rating_edges) != (self.bins, self.ply_edges, self.rating_edges):
            raise ValueError("cannot merge scorers with different bins or edges")
        self.total.merge(other.total)
        for mine, theirs in zip(self.by_ply + self.by_rating, other.by_ply + other.by_rating):
            mine.merge(theirs)
        self.bin_count += other.bin_count
        self.bin_prob += other.bin_prob
        self.bin_label += other.bin_label

    def reliability(self) -> list[dict[str, Any]]:
        """Non-empty calibration bins: lo, hi, positions, mean_prob, mean_label."""
        rows = []
        for b in np.flatnonzero(self.bin_count):
            n = int(self.bin_count[b])
            rows.append({"lo": b / self.bins, "hi": (b + 1) / self.bins, "positions": n,
                         "mean_prob": float(self.bin_prob[b] / n), "mean_label": float(self.bin_label[b] / n)})
        return rows

    def ece(self) -> float | None:
        """Expected calibration error (None when nothing was added)."""
        n = int(self.bin_count.sum())
        if n == 0:
            return None
        return float(np.abs(self.bin_prob - self.bin_label).sum() / n)

    def summary(self, with_buckets: bool = True) -> dict[str, Any]:
        """JSON-ready scores: positions, loss, accuracy, brier, ece, decisive, draws, reliability,
        by_ply and by_rating (non-empty buckets only; by_* left out when with_buckets is False)."""
        result = self.total.summary()
        result["ece"] = self.ece()
        if with_buckets:
            result["reliability"] = self.reliability()
            result["by_ply"] = _bucket_rows(self.by_ply, self.ply_edges)
            result["by_rating"] = _bucket_rows(self.by_rating, self.rating_edges)
        return result


def _add_bucketed(buckets: list[_Sums], edges: tuple[float, ...], key: np.ndarray,
                  x: np.ndarray, y: np.ndarray) -> None:
    index = np.searchsorted(np.asarray(edges), key, side="right") - 1
    for b in np.unique(index[np.isfinite(key)]):
        if 0 <= b < len(buckets):
            mask = index == b
            buckets[b].add(x[mask], y[mask])


def _bucket_rows(buckets: list[_Sums], edges: tuple[float, ...]) -> list[dict[str, Any]]:
    rows = []
    for b, sums in enumerate(buckets):
        if sums.count:
            row = {"lo": _edge(edges[b]), "hi": _edge(edges[b + 1])}
            summary = sums.summary()
            row.update({k: summary[k] for k in ("positions", "loss", "accuracy", "brier", "decisive")})
            rows.append(row)
    return rows


def _edge(value: float) -> float | None:
    """Bucket edge for JSON: None stands for an infinite edge."""
    return None if math.isinf(value) else value


def spread(values: Sequence[float | None]) -> float | None:
    """max - min of the non-None values (None when fewer than one)."""
    present = [v for v in values if v is not None]
    return float(max(present) - min(present)) if present else None


__all__ = [
    "CALIBRATION_BINS",
    "LABEL_DRAW",
    "LABEL_LOSS",
    "LABEL_WIN",
    "PLY_EDGES",
    "RATING_EDGES",
    "Scorer",
    "accuracy",
    "brier",
    "cross_entropy",
    "log_loss",
    "reliability_table",
    "sigmoid",
    "spread",
]
