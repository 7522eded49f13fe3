"""Reference predictors that give the model's scores a meaning (numpy only, streaming over shards).

Both are fitted on the TRAINING split of a run's own data and scored on the evaluated split:

  side_to_move   "the side to move wins". Its accuracy is the share of decisive positions won by the
                 side to move; its probability (for loss, Brier) is the constant rate at which the side
                 to move scored in the training split (label mean, draws 0.5).
  material       logistic regression on material balance: one feature per piece kind, own minus opponent
                 count, on the board (13 kinds, kings left out) and in hand (7 kinds), plus a bias. The
                 fitted weights are the piece values in logits. Fitted by Newton's method with a small L2
                 penalty, on the training positions aggregated by distinct material vector, so the fit
                 streams over shards once and stays exact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn import run_files, shards
from shogi_dnn.analysis import scoring
from shogi_dnn.errors import RunError, ShardFormatError
from shogi_dnn.features import HAND_SIZE, NUM_HAND_TYPES, NUM_PIECE_CODES
from shogi_dnn.rules import HAND_PIECE_TYPES, NUM_PIECE_TYPES, SFEN_PIECE

KING = 8
BOARD_KINDS = tuple(t for t in range(1, NUM_PIECE_TYPES + 1) if t != KING)     # 13 piece types on the board
NUM_MATERIAL_FEATURES = len(BOARD_KINDS) + NUM_HAND_TYPES                      # 20
FEATURE_NAMES = tuple([SFEN_PIECE[t] for t in BOARD_KINDS] + [f"{SFEN_PIECE[t]}*" for t in HAND_PIECE_TYPES])
READ_ROWS = 65536            # positions read per slice when streaming a shard
L2 = 1.0                     # ridge penalty on the piece values (not the bias): keeps tiny fits finite
PROB_CLIP = 1e-6


def iter_batches(paths: Sequence[str | Path], keys: Sequence[str] = (shards.KEY_BOARD, shards.KEY_HANDS,
                 shards.KEY_WIN, shards.KEY_PLY), rows: int = READ_ROWS) -> Iterator[dict[str, np.ndarray]]:
    """Stream shards in file order, `rows` positions at a time: dicts of the chosen POSITION_SCHEMA keys.

    When "rating" is among `keys`, each batch also holds [n] float64 game ratings (position_ratings).
    """
    for path in paths:
        with shards.open_shard(path) as f:
            n = int(f[shards.KEY_WIN].shape[0])
        ratings = position_ratings(path) if "rating" in keys else None
        for start in range(0, n, rows):
            batch = shards.read_positions(path, start, min(n, start + rows),
                                          [k for k in keys if k != "rating"]).arrays
            if ratings is not None:
                batch["rating"] = ratings[start:start + rows]
            yield batch


def position_ratings(path: str | Path) -> np.ndarray:
    """[N] float64: mean of both players' ratings of each position's game (NaN when either is unknown)."""
    games = shards.read_games(path)
    game_of_position = shards.read_positions(path, keys=[shards.KEY_GAME]).arrays[shards.KEY_GAME]
    ids = np.asarray(games["game_id"], np.int64)
    mean = (np.asarray(games["black_rating"], np.float64) + np.asarray(games["white_rating"], np.float64)) / 2
    order = np.argsort(ids)
    where = np.clip(np.searchsorted(ids[order], game_of_position), 0, max(len(ids) - 1, 0))
    if len(ids) == 0:
        return np.full(len(game_of_position), np.nan)
    found = ids[order][where] == game_of_position
    return np.where(found, mean[order][where], np.nan)


def material_features(board: np.ndarray, hands: np.ndarray) -> np.ndarray:
    """Own-minus-opponent piece counts.

    Args:
        board: [N, 81] uint8 piece codes; hands: [N, 14] uint8 counts (features.py encoding).
    Returns:
        [N, 20] int8: board kinds in BOARD_KINDS order, then hand kinds in HAND_PIECE_TYPES order.
    """
    n = board.shape[0]
    codes = board.astype(np.int64) + NUM_PIECE_CODES * np.arange(n)[:, None]
    counts = np.bincount(codes.reshape(-1), minlength=n * NUM_PIECE_CODES).reshape(n, NUM_PIECE_CODES)
    own = counts[:, list(BOARD_KINDS)]
    opp = counts[:, [t + NUM_PIECE_TYPES for t in BOARD_KINDS]]
    hand = hands[:, :NUM_HAND_TYPES].astype(np.int16) - hands[:, NUM_HAND_TYPES:HAND_SIZE].astype(np.int16)
    return np.concatenate([own - opp, hand], axis=1).astype(np.int8)


@dataclasses.dataclass(frozen=True)
class Baselines:
    """Fitted baselines. `weights` [20] float64 are the material piece values (logits)."""

    side_to_move_rate: float
    weights: tuple[float, ...]
    bias: float
    train_positions: int

    def side_to_move_logits(self, n: int) -> np.ndarray:
        """[n] float64 constant logit of the training-split rate."""
        p = min(max(self.side_to_move_rate, PROB_CLIP), 1 - PROB_CLIP)
        return np.full(n, math.log(p / (1 - p)))

    def material_logits(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        """[N] float64 logits of the material regression for [N, 81] boards and [N, 14] hands."""
        return material_features(board, hands).astype(np.float64) @ np.asarray(self.weights) + self.bias

    def piece_values(self) -> dict[str, float]:
        """Fitted value of each feature, in logits, keyed by FEATURE_NAMES ('P', '+R', 'P*', ...)."""
        return dict(zip(FEATURE_NAMES, self.weights))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Baselines:
        return cls(float(data["side_to_move_rate"]), tuple(float(w) for w in data["weights"]),
                   float(data["bias"]), int(data["train_positions"]))


def fit_baselines(train_paths: Sequence[str | Path], l2: float = L2) -> Baselines:
    """Fit both baselines on training shards in one streaming pass.

    Raises:
        ValueError: the shards hold no positions.
    """
    table: dict[bytes, np.ndarray] = {}          # material vector -> [positions, label sum]
    total, label_sum = 0, 0.0
    for batch in iter_batches(train_paths, (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN)):
        win = batch[shards.KEY_WIN].astype(np.float64)
        total += win.size
        label_sum += float(win.sum())
        rows, inverse = np.unique(material_features(batch[shards.KEY_BOARD], batch[shards.KEY_HANDS]),
                                  axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse, minlength=len(rows))
        sums = np.bincount(inverse, weights=win, minlength=len(rows))
        for row, c, s in zip(rows, counts, sums):
            table.setdefault(row.tobytes(), np.zeros(2))[:] += (c, s)
    if total == 0:
        raise ValueError("no training positions to fit the baselines on")
    features = np.stack([np.frombuffer(k, np.int8) for k in table]).astype(np.float64)
    stats = np.stack(list(table.values()))
    weights, bias = _fit_logistic(features, stats[:, 0], stats[:, 1], l2)
    return Baselines(label_sum / total, tuple(float(w) for w in weights), float(bias), total)


def _fit_logistic(x: np.ndarray, count: np.ndarray, label_sum: np.ndarray, l2: float,
                  iterations: int = 50) -> tuple[np.ndarray, float]:
    """Weighted logistic regression by Newton's method: rows `x` [U, F] seen `count` times with
    `label_sum` total label; returns (weights [F], bias)."""
    design = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    theta = np.zeros(design.shape[1])
    penalty = np.full(design.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = scoring.sigmoid(design @ theta)
        gradient = design.T @ (count * p - label_sum) + penalty * theta
        hessian = (design * (count * p * (1 - p))[:, None]).T @ design + np.diag(penalty) + 1e-9 * np.eye(len(theta))
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.max(np.abs(step)) < 1e-9:
            break
    return theta[:-1], float(theta[-1])


def score_baselines(baselines: Baselines, paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """Scores of both baselines on the given (evaluated) shards.

    Returns:
        {"side_to_move": {accuracy, loss, brier, ece, positions, rate}, "material": {accuracy, loss,
        brier, ece, positions, piece_values}}; accuracy over decisive positions as in scoring.
    """
    constant, material = scoring.Scorer(), scoring.Scorer()
    side_wins, decisive = 0, 0
    for batch in iter_batches(paths, (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN)):
        win = batch[shards.KEY_WIN]
        constant.add(baselines.side_to_move_logits(win.size), win)
        material.add(baselines.material_logits(batch[shards.KEY_BOARD], batch[shards.KEY_HANDS]), win)
        side_wins += int((win == scoring.LABEL_WIN).sum())
        decisive += int((win != scoring.LABEL_DRAW).sum())
    keys = ("positions", "accuracy", "loss", "brier", "ece")
    stm = {k: constant.summary(with_buckets=False)[k] for k in keys}
    stm["accuracy"] = side_wins / decisive if decisive else None     # always "the side to move wins"
    stm["rate"] = baselines.side_to_move_rate
    mat = {k: material.summary(with_buckets=False)[k] for k in keys}
    mat["piece_values"] = baselines.piece_values()
    mat["bias"] = baselines.bias
    return {"side_to_move": stm, "material": mat, "train_positions": baselines.train_positions}


def fitted_baselines(run_dir: Path, data_dir: Path) -> tuple[Baselines, str]:
    """Baselines fitted on the training split of the run's own data (cached in RUN/baselines.json,
    keyed by the training shards' sha256). Falls back to `data_dir`'s training split."""
    for source in _baseline_sources(run_dir, data_dir):
        try:
            manifest = shards.read_manifest(source)
        except ShardFormatError:
            continue
        train = manifest.split("train")
        if not train:
            continue
        shards.verify_shards(manifest, train)
        key = {"data_dir": str(source), "train_shards": [s.sha256 for s in train]}
        cache = run_dir / run_files.BASELINES_JSON
        if cache.is_file():
            cached = run_files.read_json(cache)
            if cached.get("key") == key:
                return Baselines.from_dict(cached["baselines"]), str(source)
        fitted = fit_baselines([manifest.shard_path(s) for s in train])
        run_files.write_json_atomic(cache, {"key": key, "baselines": fitted.to_dict()}, allow_nan=False)
        return fitted, str(source)
    raise RunError(f"{run_dir}: no training split to fit the baselines on (run data or {data_dir})")


def _baseline_sources(run_dir: Path, data_dir: Path) -> list[Path]:
    recorded = run_files.read_run_json(run_dir).get("data_dir")
    return [Path(recorded), data_dir] if recorded else [data_dir]
