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

`Scorer` accumulates sums and merges (per-GPU scorers sum to the total). Intervals are a bootstrap over
GAMES (`GameSums`, `bootstrap_games`: BOOTSTRAP_RESAMPLES resamples, BOOTSTRAP_SEED, percentile interval
at BOOTSTRAP_LEVEL); comparisons are PAIRED (both predictors weighed by the same resampled games); a
difference whose interval contains 0 is not resolved. Policy (`PolicySums`, `policy_block`): top-1 and
top-5 of the move played among the LEGAL moves, ties counted against the model (`move_ranks`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from shogi_dnn.dataset.features import LABEL_DRAW, LABEL_LOSS, LABEL_WIN

CALIBRATION_BINS = 10
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
BOOTSTRAP_LEVEL = 0.95
RESAMPLE_CELLS = 1 << 22     # resamples x games held at once (32 MB of float64 counts)
# Game-phase buckets by ply (moves played before the position): [0, 20), [20, 40), ... [150, inf).
PLY_EDGES: tuple[float, ...] = (0, 20, 40, 60, 80, 100, 150, math.inf)
# Rating bands (mean of both players' ratings): [-inf, 1000), [1000, 1500), ... [3500, inf).
RATING_EDGES: tuple[float, ...] = (-math.inf, 1000, 1500, 2000, 2500, 3000, 3500, math.inf)
CHANCE_ACCURACY = 0.52     # a validation accuracy at or below this: the model has learned nothing


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
                      bins: int = CALIBRATION_BINS) -> tuple[list[dict[str, Any]], float | None]:
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
        """Add a batch: logits [N] float (side to move's win logit), labels [N] float32 in {0, 0.5, 1},
        ply [N] int and rating [N] float (NaN unknown), each skipped when None.
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
        mine = (self.bins, self.ply_edges, self.rating_edges)
        if (other.bins, other.ply_edges, other.rating_edges) != mine:
            raise ValueError("cannot merge scorers with different bins or edges")
        self.total.merge(other.total)
        for own, theirs in zip(self.by_ply + self.by_rating, other.by_ply + other.by_rating):
            own.merge(theirs)
        self.bin_count += other.bin_count
        self.bin_prob += other.bin_prob
        self.bin_label += other.bin_label

    def reliability(self) -> list[dict[str, Any]]:
        """Non-empty calibration bins: lo, hi, positions, mean_prob, mean_label."""
        rows = []
        for b in np.flatnonzero(self.bin_count):
            n = int(self.bin_count[b])
            rows.append({"lo": b / self.bins, "hi": (b + 1) / self.bins, "positions": n,
                         "mean_prob": float(self.bin_prob[b] / n),
                         "mean_label": float(self.bin_label[b] / n)})
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


_GAME_FIELDS = ("positions", "loss", "brier", "decisive", "correct")
POSITIONS, LOSS, BRIER, DECISIVE, CORRECT = range(len(_GAME_FIELDS))


class GameSums:
    """One predictor's score sums per game, for intervals over games (bootstrap_games).

    `sums` [5, ids] float64, column = game id (dataset-wide, >= 0): positions, cross-entropy sum, squared
    error sum, decisive positions, correct decisive positions. Games without positions are zero columns.
    """

    def __init__(self) -> None:
        self.sums = np.zeros((len(_GAME_FIELDS), 0))

    def add(self, games: np.ndarray, logits: np.ndarray, labels: np.ndarray, mask: np.ndarray | None = None,
            predicted_win: np.ndarray | None = None) -> None:
        """Add a batch: games [N] int, logits [N] float, labels [N] in {0, 0.5, 1}; mask [N] bool keeps
        positions; predicted_win [N] bool replaces logits > 0 for accuracy.

        Raises:
            ValueError: lengths differ, or a negative game id.
        """
        g = np.asarray(games).reshape(-1).astype(np.int64)
        x = np.asarray(logits, np.float64).reshape(-1)
        y = np.asarray(labels, np.float64).reshape(-1)
        if not g.size == x.size == y.size:
            raise ValueError(f"{g.size} game ids, {x.size} logits, {y.size} labels")
        says_win = x > 0 if predicted_win is None else np.asarray(predicted_win, bool).reshape(-1)
        if mask is not None:
            keep = np.asarray(mask, bool).reshape(-1)
            g, x, y, says_win = g[keep], x[keep], y[keep], says_win[keep]
        if g.size == 0:
            return
        if int(g.min()) < 0:
            raise ValueError(f"game id {int(g.min())}: ids must be >= 0")
        self._grow(int(g.max()) + 1)
        decisive = y != LABEL_DRAW
        columns = (np.ones_like(x), cross_entropy(x, y), (sigmoid(x) - y) ** 2, decisive,
                   decisive & (says_win == (y == LABEL_WIN)))
        for field, values in enumerate(columns):
            self.sums[field] += np.bincount(g, weights=values.astype(np.float64),
                                            minlength=self.sums.shape[1])

    def _grow(self, ids: int) -> None:
        if ids > self.sums.shape[1]:
            grown = np.zeros((len(_GAME_FIELDS), max(ids, 2 * self.sums.shape[1])))
            grown[:, :self.sums.shape[1]] = self.sums
            self.sums = grown

    def merge(self, other: GameSums) -> None:
        """Add another predictor-part's sums (e.g. another tower's)."""
        self._grow(other.sums.shape[1])
        self.sums[:, :other.sums.shape[1]] += other.sums

    def game_ids(self) -> np.ndarray:
        """[G] int64 ids of the games with at least one position."""
        return np.flatnonzero(self.sums[POSITIONS] > 0)

    def summary(self) -> dict[str, Any]:
        """positions, games, loss, accuracy (decisive positions), brier, decisive: as Scorer.summary."""
        total = [float(v) for v in self.sums.sum(axis=1)]
        return {"positions": int(total[POSITIONS]), "games": int(self.game_ids().size),
                "loss": _ratio(total[LOSS], total[POSITIONS]),
                "accuracy": _ratio(total[CORRECT], total[DECISIVE]),
                "brier": _ratio(total[BRIER], total[POSITIONS]), "decisive": int(total[DECISIVE])}


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap interval [lo, hi] (percentiles of the resampled statistic); all
    three None where the statistic is undefined (accuracy on a split without a decisive position)."""

    estimate: float | None
    lo: float | None
    hi: float | None

    @classmethod
    def of(cls, estimate: float, lo: float, hi: float) -> Interval:
        """The interval, or the undefined one when any of the three is not finite (JSON has no NaN)."""
        if all(math.isfinite(v) for v in (estimate, lo, hi)):
            return cls(float(estimate), float(lo), float(hi))
        return cls(None, None, None)

    @property
    def resolved(self) -> bool:
        """For a difference: the interval excludes 0, so its sign is resolved at the bootstrap's level."""
        return self.lo is not None and self.hi is not None and (self.lo > 0 or self.hi < 0)

    def to_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "lo": self.lo, "hi": self.hi}


@dataclasses.dataclass(frozen=True)
class GameBootstrap:
    """bootstrap_games' result: intervals[name][metric] and differences[(a, b)][metric] (a minus b),
    metric "accuracy" or "loss"."""

    games: int
    resamples: int
    seed: int
    level: float
    intervals: dict[str, dict[str, Interval]]
    differences: dict[tuple[str, str], dict[str, Interval]]

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings: unit, games, resamples, seed, level."""
        return {"unit": "game", "games": self.games, "resamples": self.resamples, "seed": self.seed,
                "level": self.level}


def resample_counts(games: int, resamples: int = BOOTSTRAP_RESAMPLES,
                    seed: int = BOOTSTRAP_SEED) -> Iterator[np.ndarray]:
    """Yield [r, games] float64 blocks (r resamples at a time, `resamples` in all): how many times each
    game is drawn when `games` games are drawn with replacement. Same arguments, same blocks."""
    rng = np.random.default_rng(seed)
    block = max(1, RESAMPLE_CELLS // max(games, 1))
    for start in range(0, resamples, block):
        r = min(block, resamples - start)
        draws = rng.integers(0, games, size=(r, games)) + games * np.arange(r)[:, None]
        yield np.bincount(draws.reshape(-1), minlength=r * games).reshape(r, games).astype(np.float64)


def bootstrap_games(predictors: Mapping[str, GameSums], differences: Sequence[tuple[str, str]] = (),
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                    level: float = BOOTSTRAP_LEVEL) -> GameBootstrap:
    """Paired bootstrap over games of accuracy and log loss of `predictors` (name -> GameSums of the SAME
    positions) and of `differences` ((a, b): a minus b).

    Raises:
        ValueError: no positions, or the predictors were scored on different positions.
    """
    names = list(predictors)
    ids = predictors[names[0]].game_ids() if names else np.zeros(0, np.int64)
    if ids.size == 0:
        raise ValueError("no positions to bootstrap")
    stacked = {name: _columns(predictors[name].sums, ids) for name in names}
    reference = stacked[names[0]][POSITIONS]
    for name in names:
        if not np.array_equal(stacked[name][POSITIONS], reference) or \
                predictors[name].sums[POSITIONS].sum() != reference.sum():
            raise ValueError(f"{name!r} and {names[0]!r} were scored on different positions")
    draws: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for counts in resample_counts(ids.size, resamples, seed):
        for name in names:
            draws[name].append(counts @ stacked[name].T)           # [r, 5] resampled sums
    totals = {name: np.concatenate(parts) for name, parts in draws.items()}
    point = {name: stacked[name].sum(axis=1)[None, :] for name in names}
    tails = (100 * (1 - level) / 2, 100 * (1 + level) / 2)

    def interval(statistic) -> dict[str, Interval]:
        out = {}
        for metric, (num, den) in (("accuracy", (CORRECT, DECISIVE)), ("loss", (LOSS, POSITIONS))):
            estimate = float(statistic(point, num, den)[0])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)     # a resample without decisive positions
                lo, hi = np.nanpercentile(statistic(totals, num, den), tails)
            out[metric] = Interval.of(estimate, float(lo), float(hi))
        return out

    return GameBootstrap(int(ids.size), int(resamples), int(seed), float(level),
                         {n: interval(lambda t, a, b, n=n: _ratios(t[n], a, b)) for n in names},
                         {(a, b): interval(lambda t, i, j, a=a, b=b:
                                           _ratios(t[a], i, j) - _ratios(t[b], i, j))
                          for a, b in differences})


def _columns(sums: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """[5, G] sums of the games `ids` (zero for ids beyond the array)."""
    out = np.zeros((sums.shape[0], ids.size))
    inside = ids < sums.shape[1]
    out[:, inside] = sums[:, ids[inside]]
    return out


def _ratios(totals: np.ndarray, numerator: int, denominator: int) -> np.ndarray:
    """[r] totals[:, numerator] / totals[:, denominator] (NaN where the denominator is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(totals[:, denominator] > 0, totals[:, numerator] / totals[:, denominator], np.nan)


TOP_K = (1, 5)                    # the policy's top-k accuracies: the move played among the first k
_POLICY_FIELDS = ("positions", *(f"top{k}" for k in TOP_K))
POLICY_METRICS = _POLICY_FIELDS[1:]   # "top1", "top5"


def move_ranks(logits: np.ndarray, labels: np.ndarray, legal: np.ndarray | None = None) -> np.ndarray:
    """[N] int64: how many other legal moves score at least as high as the move played (ties count against).

    Args:
        logits: [N, L] float, one logit per move label.
        labels: [N] int, the label of the move played.
        legal: [N, L] bool, the legal moves; None: every label counts.
    Raises:
        ValueError: shapes disagree, a label out of range, an illegal move played, a non-finite legal logit.
    """
    x = np.asarray(logits)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)            # float32 logits stay float32: [N, 2187] a batch, compared exactly
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    if x.ndim != 2 or x.shape[0] != y.size:
        raise ValueError(f"logits of shape {x.shape} for {y.size} labels: want [{y.size}, labels]")
    ok = np.ones(x.shape, bool) if legal is None else np.asarray(legal, bool)
    if ok.shape != x.shape:
        raise ValueError(f"a legal mask of shape {ok.shape} for logits of shape {x.shape}")
    if y.size and (y.min() < 0 or y.max() >= x.shape[1]):
        raise ValueError(f"labels must lie in 0..{x.shape[1] - 1}")
    rows = np.arange(y.size)
    if not ok[rows, y].all():
        i = int(np.flatnonzero(~ok[rows, y])[0])
        raise ValueError(f"position {i}: the move played (label {int(y[i])}) is not among its legal moves")
    if not np.isfinite(x[ok]).all():
        raise ValueError("a legal move's logit is not finite")
    played = x[rows, y][:, None]
    return ((x >= played) & ok).sum(axis=1).astype(np.int64) - 1


class PolicySums:
    """A policy's hits per game, for top-k accuracy with intervals over games (policy_block).

    `sums` [1 + len(TOP_K), ids] float64, column = game id (dataset-wide, >= 0): positions with a move
    played, moves played that were the top 1, in the top 5. Games without such positions are zero columns.
    """

    def __init__(self) -> None:
        self.sums = np.zeros((len(_POLICY_FIELDS), 0))

    def add(self, games: np.ndarray, logits: np.ndarray, labels: np.ndarray,
            legal: np.ndarray | None = None) -> None:
        """Add a batch: games [N] int game ids, logits [N, L] float, labels [N] int (policy.move_labels:
        LABEL_NONE, -1, at a final position, which is skipped), legal [N, L] bool (None: all labels).

        Raises:
            ValueError: lengths differ, a negative game id, or as move_ranks.
        """
        g = np.asarray(games).reshape(-1).astype(np.int64)
        y = np.asarray(labels).reshape(-1).astype(np.int64)
        x = np.asarray(logits)
        if not g.size == y.size == x.shape[0]:
            raise ValueError(f"{g.size} game ids, {x.shape[0]} logit rows, {y.size} labels")
        keep = y >= 0
        if not keep.any():
            return
        ranks = move_ranks(x[keep], y[keep], None if legal is None else np.asarray(legal, bool)[keep])
        g = g[keep]
        if int(g.min()) < 0:
            raise ValueError(f"game id {int(g.min())}: ids must be >= 0")
        self._grow(int(g.max()) + 1)
        columns = (np.ones(g.size), *((ranks < k).astype(np.float64) for k in TOP_K))
        for field, values in enumerate(columns):
            self.sums[field] += np.bincount(g, weights=values, minlength=self.sums.shape[1])

    def _grow(self, ids: int) -> None:
        if ids > self.sums.shape[1]:
            grown = np.zeros((len(_POLICY_FIELDS), max(ids, 2 * self.sums.shape[1])))
            grown[:, :self.sums.shape[1]] = self.sums
            self.sums = grown

    def merge(self, other: PolicySums) -> None:
        """Add another part's sums (e.g. another tower's)."""
        self._grow(other.sums.shape[1])
        self.sums[:, :other.sums.shape[1]] += other.sums

    def game_ids(self) -> np.ndarray:
        """[G] int64 ids of the games with at least one scored position."""
        return np.flatnonzero(self.sums[0] > 0)

    def summary(self) -> dict[str, Any]:
        """positions, games, top1, top5 (None when nothing was added)."""
        total = self.sums.sum(axis=1)
        return {"positions": int(total[0]), "games": int(self.game_ids().size),
                **{name: _ratio(total[i + 1], total[0]) for i, name in enumerate(POLICY_METRICS)}}


def bootstrap_policy(sums: PolicySums, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                     level: float = BOOTSTRAP_LEVEL) -> dict[str, Interval]:
    """top1 and top5 with their bootstrap intervals over games (resample_counts, as bootstrap_games).

    Raises:
        ValueError: no positions.
    """
    ids = sums.game_ids()
    if ids.size == 0:
        raise ValueError("no positions to bootstrap")
    columns = _columns(sums.sums, ids)                                   # [3, G]
    totals = np.concatenate([counts @ columns.T for counts in resample_counts(ids.size, resamples, seed)])
    tails = (100 * (1 - level) / 2, 100 * (1 + level) / 2)
    out = {}
    for i, name in enumerate(POLICY_METRICS):
        lo, hi = np.percentile(_ratios(totals, i + 1, 0), tails)        # a resample holds >= 1 position
        out[name] = Interval(float(columns[i + 1].sum() / columns[0].sum()), float(lo), float(hi))
    return out


def policy_block(sums: PolicySums, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                 level: float = BOOTSTRAP_LEVEL) -> dict[str, Any]:
    """RUN/eval-<split>.json's "policy" block: positions, games, top1, top5, intervals {top1: [lo, hi],
    top5: [lo, hi]} and bootstrap {unit, games, resamples, seed, level}; no intervals without positions."""
    block = sums.summary()
    if block["positions"]:
        intervals = bootstrap_policy(sums, resamples, seed, level)
        block["intervals"] = {name: [i.lo, i.hi] for name, i in intervals.items()}
        block["bootstrap"] = {"unit": "game", "games": block["games"], "resamples": int(resamples),
                              "seed": int(seed), "level": float(level)}
    return block


def policy_text(block: Mapping[str, Any]) -> str:
    """One line for evaluate's table: 'policy: top-1 0.4120 (95% 0.3900..0.4300 over games), top-5 ...
    on 1,234 positions of 56 games' ('policy: no positions with a move played' when empty)."""
    if not block["positions"]:
        return "policy: no positions with a move played"
    level = block.get("bootstrap", {}).get("level", BOOTSTRAP_LEVEL)
    parts = []
    for name in POLICY_METRICS:
        span = block.get("intervals", {}).get(name)
        interval = f" ({interval_text(span[0], span[1], level, signed=False)})" if span else ""
        parts.append(f"top-{name[3:]} {block[name]:.4f}{interval}")
    return f"policy: {', '.join(parts)} on {block['positions']:,} positions of {block['games']:,} games"


UNDEFINED = "n/a"      # how tables show a metric that has no value (accuracy without a decisive position)


def interval_text(lo: float | None, hi: float | None, level: float = BOOTSTRAP_LEVEL,
                  signed: bool = True) -> str:
    """'95% +0.0040..+0.0380 over games' (signed: for a difference); UNDEFINED without bounds."""
    if lo is None or hi is None:
        return UNDEFINED
    fmt = "+.4f" if signed else ".4f"
    return f"{level:.0%} {lo:{fmt}}..{hi:{fmt}} over games"


def comparison_text(baseline: str, comparison: Mapping[str, Mapping[str, Any]],
                    level: float = BOOTSTRAP_LEVEL) -> str:
    """One line on the model against a baseline: 'model ahead of material: accuracy +0.0210 (95% ...),
    log loss -0.0500 (95% ...)'; "behind" when both resolved against it, else "vs"; "not resolved" when 0
    is inside.
    """
    parts, verdicts = [], []
    for metric, label, better in (("accuracy", "accuracy", 1.0), ("loss", "log loss", -1.0)):
        d = comparison[metric]
        if d["estimate"] is None:                      # undefined: no decisive position
            verdicts.append(0)
            parts.append(f"{label} {UNDEFINED}")
            continue
        resolved = d["lo"] > 0 or d["hi"] < 0
        side = 1.0 if d["lo"] > 0 else -1.0          # which side of 0 a resolved interval lies on
        verdicts.append(0 if not resolved else (1 if better * side > 0 else -1))
        suffix = "" if resolved else ": not resolved"
        parts.append(f"{label} {d['estimate']:+.4f} ({interval_text(d['lo'], d['hi'], level)}{suffix})")
    verb = "ahead of" if verdicts == [1, 1] else "behind" if verdicts == [-1, -1] else "vs"
    return f"model {verb} {baseline}: " + ", ".join(parts)


def spread(values: Sequence[float | None]) -> float | None:
    """max - min of the non-None values (None when fewer than one)."""
    present = [v for v in values if v is not None]
    return float(max(present) - min(present)) if present else None


__all__ = [
    "BOOTSTRAP_LEVEL",
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "CALIBRATION_BINS",
    "POLICY_METRICS",
    "TOP_K",
    "LABEL_DRAW",
    "LABEL_LOSS",
    "LABEL_WIN",
    "PLY_EDGES",
    "RATING_EDGES",
    "GameBootstrap",
    "GameSums",
    "Interval",
    "PolicySums",
    "Scorer",
    "accuracy",
    "bootstrap_games",
    "bootstrap_policy",
    "brier",
    "comparison_text",
    "cross_entropy",
    "interval_text",
    "log_loss",
    "move_ranks",
    "policy_block",
    "policy_text",
    "reliability_table",
    "resample_counts",
    "sigmoid",
    "spread",
]
