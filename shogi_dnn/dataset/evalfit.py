"""Engine evaluations as win probabilities: sigmoid(eval / a), with a (and trust) fitted on results.

Used by the trainer's evaluation targets (EvalTarget, resolve_eval_target) and the engine baseline of
`evaluate`. numpy only. The fit streams over shards once and is exact: positions are aggregated by
(ply range, clipped evaluation) into counts and label sums, and p = sigmoid(k · eval), k = 1 / a, is
solved by Newton's method (no bias: 0 means even). Evaluations are clipped to ±FIT_CLIP, so mate scores
weigh no more than FIT_CLIP. Per ply range r (PLY_EDGES): scale[r] is a fitted on r alone; gain[r] =
max(0, ln 2 - logloss[r]) / ln 2 at the global scale; trust[r] = gain[r] / max(gain).

Table of EvalFit.to_dict() (stored in a run's run.json under "eval_fit" and printed by the trainer):

  key         type          meaning
  scale       float         a used: `fitted` when the fit saw enough games and positions (MIN_FIT_GAMES,
                            MIN_FIT_POSITIONS), else DEFAULT_SCALE
  fitted      float         a fitted on every evaluated training position (centipawns per logit)
  interval    [2] float     95% bootstrap interval of `fitted` over games (BOOTSTRAP_RESAMPLES resamples of
                            the first BOOTSTRAP_POSITIONS positions' games); [] when under two games
  games       int           games with an evaluated position that the fit saw
  positions   int           evaluated positions the fit saw (clipped evals, draws as 0.5)
  coverage    float         share of the training positions that carry an evaluation
  ply_edges   [R] int       lower edge of each ply range
  scales      [R] float     per-range a (the global a where a range has too few positions)
  gains       [R] float     per-range gain (0 where a range has no positions)
  trust       [R] float     per-range trust in [0, 1]
  counts      [R] int       evaluated positions per range
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.config import TrainConfig
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import EVAL_NONE  # noqa: F401  (re-exported: evalfit.EVAL_NONE)

FIT_CLIP = 4000                                   # |eval| used for fitting and for the engine predictor
PLY_RANGE_WIDTH = 20
PLY_EDGES = tuple(range(0, 220, PLY_RANGE_WIDTH))  # 0, 20, ..., 200: the last range is [200, inf)
MIN_RANGE_POSITIONS = 200                         # a range with fewer keeps the global scale
DEFAULT_SCALE = 756.0                             # dlshogi's a: the fallback when nothing can be fitted
MIN_FIT_GAMES = 50                                # fewer evaluated games: a stays DEFAULT_SCALE (a warning)
MIN_FIT_POSITIONS = 2000                          # fewer evaluated positions: likewise
BOOTSTRAP_RESAMPLES = 100
BOOTSTRAP_POSITIONS = 1_000_000                   # positions kept (in stream order) for the interval
LN2 = math.log(2.0)


def ply_range(ply: np.ndarray) -> np.ndarray:
    """[N] int64 index into PLY_EDGES of each ply ([N] int)."""
    return np.clip(np.asarray(ply, np.int64) // PLY_RANGE_WIDTH, 0, len(PLY_EDGES) - 1)


class EvalStats:
    """Streaming aggregate: per (ply range, clipped eval) position counts and label sums."""

    def __init__(self) -> None:
        width = 2 * FIT_CLIP + 1
        self.count = np.zeros((len(PLY_EDGES), width), np.float64)
        self.label = np.zeros((len(PLY_EDGES), width), np.float64)
        self.total = 0                            # every position seen, evaluated or not
        self.with_eval = 0                        # positions with an evaluation, with or without a result
        self.games: set[int] = set()              # ids of the games with an evaluated position and a result
        # (eval index, win, game) of the first BOOTSTRAP_POSITIONS positions, for the bootstrap
        self.kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.kept_rows = 0

    def add(self, evals: np.ndarray, win: np.ndarray, ply: np.ndarray,
            game: np.ndarray | None = None) -> None:
        """Add a batch: evals [N] int16 (EVAL_NONE: none), win [N] float, ply [N] int, game [N] int."""
        evals = np.asarray(evals).reshape(-1)
        self.total += evals.size
        self.with_eval += int(np.count_nonzero(evals != EVAL_NONE))
        # A position without a game result (win NaN: annotate's off-path positions) says nothing of a.
        has = (evals != EVAL_NONE) & np.isfinite(np.asarray(win, np.float64).reshape(-1))
        if not has.any():
            return
        e = np.clip(evals[has].astype(np.int64), -FIT_CLIP, FIT_CLIP) + FIT_CLIP
        r = ply_range(np.asarray(ply).reshape(-1)[has])
        flat = r * self.count.shape[1] + e
        size = self.count.size
        self.count += np.bincount(flat, minlength=size).reshape(self.count.shape)
        labels = np.asarray(win, np.float64).reshape(-1)[has]
        self.label += np.bincount(flat, weights=labels, minlength=size).reshape(self.count.shape)
        if game is None:          # no game ids: positions stand for games (ids past any real one)
            ids = np.arange(self.evaluated - e.size, self.evaluated, dtype=np.int64) + (1 << 40)
        else:
            ids = np.asarray(game, np.int64).reshape(-1)[has]
        self.games.update(np.unique(ids).tolist())
        room = BOOTSTRAP_POSITIONS - self.kept_rows
        if room > 0:
            self.kept.append((e[:room].astype(np.int16), labels[:room].astype(np.float32), ids[:room]))
            self.kept_rows += min(room, e.size)

    @property
    def evaluated(self) -> int:
        return int(self.count.sum())


def fit_scale(count: np.ndarray, label: np.ndarray, iterations: int = 100) -> float:
    """a of p = sigmoid(eval / a) maximising the likelihood of the aggregate.

    Args:
        count, label: [2 * FIT_CLIP + 1] float64 positions and label sums, index eval + FIT_CLIP.
    Returns:
        a > 0 in centipawns per logit; DEFAULT_SCALE when the evaluations do not favour the winner.
    """
    x = np.arange(-FIT_CLIP, FIT_CLIP + 1, dtype=np.float64)
    keep = count > 0
    x, n, s = x[keep], count[keep], label[keep]
    if n.sum() == 0 or not np.any(x != 0):
        return DEFAULT_SCALE
    k = 1.0 / DEFAULT_SCALE
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-k * x))
        gradient = float(np.sum(x * (n * p - s)))
        hessian = float(np.sum(x * x * n * p * (1 - p))) + 1e-12
        step = gradient / hessian
        k = min(max(k - step, 1e-7), 1.0)        # k > 0: evaluations never read backwards
        if abs(step) < 1e-12:
            break
    return float(1.0 / k) if k > 1e-7 else DEFAULT_SCALE * 1e4


def log_loss(count: np.ndarray, label: np.ndarray, scale: float) -> float:
    """Mean binary cross-entropy of sigmoid(eval / scale) over an aggregate (NaN when empty)."""
    x = np.arange(-FIT_CLIP, FIT_CLIP + 1, dtype=np.float64) / scale
    n = count.sum()
    if n == 0:
        return float("nan")
    # BCE(z, y) = softplus(z) - y z, summed as count * softplus - label * z
    softplus = np.logaddexp(0.0, x)
    return float((np.sum(count * softplus) - np.sum(label * x)) / n)


@dataclasses.dataclass(frozen=True)
class EvalFit:
    """What the training split's evaluations say about results (module docstring: the table)."""

    scale: float
    positions: int
    coverage: float
    ply_edges: tuple[int, ...]
    scales: tuple[float, ...]
    gains: tuple[float, ...]
    trust: tuple[float, ...]
    counts: tuple[int, ...]
    fitted: float = 0.0
    games: int = 0
    interval: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalFit:
        return cls(float(data["scale"]), int(data["positions"]), float(data["coverage"]),
                   tuple(int(v) for v in data["ply_edges"]), tuple(float(v) for v in data["scales"]),
                   tuple(float(v) for v in data["gains"]), tuple(float(v) for v in data["trust"]),
                   tuple(int(v) for v in data["counts"]), float(data.get("fitted", data["scale"])),
                   int(data.get("games", 0)), tuple(float(v) for v in data.get("interval", ())))

    @property
    def enough(self) -> bool:
        """Whether the fit saw MIN_FIT_GAMES games and MIN_FIT_POSITIONS positions (then scale = fitted)."""
        return self.games >= MIN_FIT_GAMES and self.positions >= MIN_FIT_POSITIONS

    def fit_text(self) -> str:
        """'a = 512 cp/logit (95% interval 480-550 over 1,234 games, 56,789 positions)'."""
        interval = (f"95% interval {self.interval[0]:.0f}-{self.interval[1]:.0f} over "
                    if len(self.interval) == 2 else "")
        return (f"a = {self.fitted:.0f} cp/logit ({interval}{self.games:,} games, "
                f"{self.positions:,} positions)")

    def warning(self) -> str | None:
        """One line when the fit saw too little to be used (scale is then DEFAULT_SCALE), else None."""
        if self.enough:
            return None
        return (f"the evaluation scale fitted on results ({self.fit_text()}) rests on fewer than "
                f"{MIN_FIT_GAMES} games or {MIN_FIT_POSITIONS:,} positions: using the default "
                f"a = {DEFAULT_SCALE:.0f} cp/logit (set train.eval_scale to choose one)")

    def trust_text(self) -> str:
        """The trust by ply range for a log line: '0+:0.03 20+:0.16 ...' (ranges with positions only)."""
        return " ".join(f"{e}+:{t:.2f}" for e, t, c in zip(self.ply_edges, self.trust, self.counts) if c)


def fit_stats(stats: EvalStats) -> EvalFit | None:
    """EvalFit of an aggregate; None when no position carries an evaluation."""
    if stats.evaluated == 0:
        return None
    fitted = fit_scale(stats.count.sum(axis=0), stats.label.sum(axis=0))
    games = len(stats.games)
    scale = fitted if games >= MIN_FIT_GAMES and stats.evaluated >= MIN_FIT_POSITIONS else DEFAULT_SCALE
    scales, gains, counts = [], [], []
    for r in range(len(PLY_EDGES)):
        n = int(stats.count[r].sum())
        counts.append(n)
        scales.append(fit_scale(stats.count[r], stats.label[r]) if n >= MIN_RANGE_POSITIONS else scale)
        gains.append(max(0.0, LN2 - log_loss(stats.count[r], stats.label[r], scale)) / LN2 if n else 0.0)
    best = max(gains)
    trust = [g / best if best > 0 else 0.0 for g in gains]
    return EvalFit(scale, stats.evaluated, stats.with_eval / max(stats.total, 1), PLY_EDGES,
                   tuple(scales), tuple(gains), tuple(trust), tuple(counts), fitted, games,
                   bootstrap_interval(stats))


def bootstrap_interval(stats: EvalStats, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> tuple[float, ...]:
    """(low, high): 2.5% and 97.5% quantiles of a refitted on games resampled (Poisson(1) weights); () under
    2 games.
    """
    if not stats.kept:
        return ()
    e = np.concatenate([k[0] for k in stats.kept]).astype(np.int64)
    win = np.concatenate([k[1] for k in stats.kept]).astype(np.float64)
    _, game = np.unique(np.concatenate([k[2] for k in stats.kept]), return_inverse=True)
    games = int(game.max()) + 1
    if games < 2:
        return ()
    rng = np.random.default_rng(seed)
    width = 2 * FIT_CLIP + 1
    fits = []
    for _ in range(resamples):
        weight = rng.poisson(1.0, games).astype(np.float64)[game]
        fits.append(fit_scale(np.bincount(e, weights=weight, minlength=width),
                              np.bincount(e, weights=weight * win, minlength=width)))
    low, high = np.quantile(fits, [0.025, 0.975])
    return (float(low), float(high))


def fit_batches(batches: Iterable[tuple[np.ndarray, ...]]) -> EvalFit | None:
    """EvalFit of (evals [N] int16, win [N] float, ply [N] int[, game [N] int]) batches; None without any."""
    stats = EvalStats()
    for evals, win, ply, *game in batches:
        stats.add(evals, win, ply, game[0] if game else None)
    return fit_stats(stats)


def logits(evals: np.ndarray, scale: float) -> np.ndarray:
    """[N] float64 clip(eval) / scale, the logit of `probabilities`; 0 (p = 0.5) where evals is EVAL_NONE."""
    evals = np.asarray(evals).reshape(-1)
    return np.where(evals == EVAL_NONE, 0.0, np.clip(evals.astype(np.float64), -FIT_CLIP, FIT_CLIP) / scale)


def probabilities(evals: np.ndarray, scale: float) -> np.ndarray:
    """[N] float64 sigmoid(clip(eval) / scale); 0.5 where evals is EVAL_NONE."""
    return 1.0 / (1.0 + np.exp(-logits(evals, scale)))


# ----------------------------------------------------------------------------------------------------
# The evaluation target a run trains on


@dataclasses.dataclass(frozen=True)
class EvalTarget:
    """The evaluation target a run trains on.

    weight: λ (0 = results only); scale: a, centipawns per logit; trust: None or [R] per-ply-range factors
    of λ; fit: None when no position carries an evaluation or λ = 0; requested: train.eval_weight.
    """

    weight: float
    scale: float
    trust: tuple[float, ...] | None
    weighting: str
    fit: EvalFit | None
    requested: float = 0.0

    def describe(self) -> str:
        """The run log's line: coverage, λ, a and the weighting."""
        if self.fit is None:
            return ("no engine evaluations in the training split: results only" if self.requested > 0 else
                    "evaluation targets off (train.eval_weight = 0): results only")
        coverage = f"evaluations on {self.fit.coverage:.1%} of training positions"   # fit: λ > 0 (resolved)
        trust = "" if self.trust is None else f", trust by ply {self.fit.trust_text()}"   # trust is fit.trust
        how = "fitted" if self.fitted_scale else "set" if self.set_scale else "default: too few games"
        return (f"{coverage}, λ = {self.weight:g}, a = {self.scale:.0f} cp/logit"
                f" ({how}; fitted on results: {self.fit.fit_text()[len('a = '):]})"
                f", weighting {self.weighting}{trust}")

    @classmethod
    def results_only(cls, cfg: TrainConfig) -> EvalTarget:
        """λ = 0, no fit; a = train.eval_scale, or DEFAULT_SCALE when that is 0."""
        return cls(0.0, cfg.eval_scale or DEFAULT_SCALE, None, cfg.eval_weighting, None)

    @property
    def fitted_scale(self) -> bool:
        return self.fit is not None and self.fit.enough and not self.set_scale

    set_scale: bool = False                       # train.eval_scale > 0 chose a

    def to_dict(self) -> dict[str, Any]:
        return {"weight": self.weight, "requested": self.requested, "scale": self.scale,
                "set_scale": self.set_scale,
                "weighting": self.weighting, "trust": None if self.trust is None else list(self.trust),
                "fit": None if self.fit is None else self.fit.to_dict()}


def resolve_eval_target(cfg: TrainConfig, manifest: shards.Manifest) -> EvalTarget:
    """λ, a and the trust table for a run; a dataset without evaluations trains on results only."""
    if cfg.eval_weight == 0:
        return EvalTarget.results_only(cfg)
    paths = [manifest.shard_path(s) for s in manifest.split("train")]
    fit = fit_batches(_eval_columns(paths))
    if fit is None:
        return dataclasses.replace(EvalTarget.results_only(cfg), requested=cfg.eval_weight)
    scale = cfg.eval_scale if cfg.eval_scale > 0 else fit.scale
    trust = fit.trust if cfg.eval_weighting == "trust" else None
    return EvalTarget(cfg.eval_weight, scale, trust, cfg.eval_weighting, fit, cfg.eval_weight,
                      cfg.eval_scale > 0)


def _eval_columns(paths: list[Path]) -> Iterator[tuple[np.ndarray, ...]]:
    """(eval [N] int16, win [N] float32, ply [N] int16, game [N] int32) a shard at a time; a shard without
    `eval` is only counted.
    """
    for path in paths:
        with shards.open_shard(path) as f:
            if shards.KEY_EVAL not in f:
                n = int(f[shards.KEY_WIN].shape[0])
                yield (np.full(n, EVAL_NONE, np.int16), np.zeros(n, np.float32), np.zeros(n, np.int16),
                       np.zeros(n, np.int32))
                continue
            rows = shards.read_rows(f, 0, None, [shards.KEY_EVAL, shards.KEY_WIN, shards.KEY_PLY,
                                                 shards.KEY_GAME])
        yield rows[shards.KEY_EVAL], rows[shards.KEY_WIN], rows[shards.KEY_PLY], rows[shards.KEY_GAME]
