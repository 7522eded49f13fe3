"""Reference predictors that give the model's scores a meaning (numpy only, streaming over shards).

Each is fitted on the TRAINING split of a run's own data and scored on the evaluated split's positions:

  side_to_move   "the side to move wins": accuracy is the share of decisive positions won by the side to
                 move; its probability is the training split's label mean (draws 0.5).
  material       logistic regression on material balance: own minus opponent count per kind on the board
                 (13 kinds, no kings) and in hand (7), plus a bias; the weights are piece values in logits.
                 Newton's method with a small L2 penalty on positions aggregated by material vector (exact).
  piece_square   logistic regression on one-hot (square, piece code) of the side to move's view (81 x 28),
                 the count of each code (28) and both hands (14), plus a bias; PIECE_SQUARE_L2 on the
                 square columns and L2 on the others shrink a square's weight toward its piece's value.
                 Streaming Newton's method (fit_piece_square).
  engine         p = sigmoid(clip(eval) / a), a fitted by evalfit.py; 0.5 without an evaluation. Scored on
                 every position and on the evaluated ones; absent when no position carries an evaluation.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse

from shogi_dnn.analysis import scoring
from shogi_dnn.dataset import evalfit, shards
from shogi_dnn.dataset.features import EVAL_NONE, HAND_SIZE, NUM_HAND_TYPES, NUM_PIECE_CODES
from shogi_dnn.errors import RunError, ShardFormatError
from shogi_dnn.folders import run_files
from shogi_dnn.rules import HAND_PIECE_TYPES, NUM_PIECE_TYPES, NUM_SQUARES, SFEN_PIECE
from shogi_dnn.wording import plural

log = logging.getLogger(__name__)

KING = 8
BOARD_KINDS = tuple(t for t in range(1, NUM_PIECE_TYPES + 1) if t != KING)     # 13 piece types on the board
NUM_MATERIAL_FEATURES = len(BOARD_KINDS) + NUM_HAND_TYPES                      # 20
FEATURE_NAMES = tuple([SFEN_PIECE[t] for t in BOARD_KINDS] + [f"{SFEN_PIECE[t]}*" for t in HAND_PIECE_TYPES])
READ_ROWS = 65536            # positions read per slice when streaming a shard
L2 = 1.0                     # ridge penalty on the piece values (not the bias): keeps tiny fits finite
PROB_CLIP = 1e-6
# Baselines.to_dict's layout (2: piece_square and engine; 3: the engine fit's games and interval):
# part of evaluate's cache key
BASELINES_VERSION = 3
# 28 piece codes a square can hold (0, empty, is the reference)
BOARD_CODES = NUM_PIECE_CODES - 1
SQUARE_COLUMNS = NUM_SQUARES * BOARD_CODES        # 2268 one-hot (square, code) columns
COUNT_COLUMNS = SQUARE_COLUMNS                    # then 28 columns: squares holding each code
HAND_COLUMNS = COUNT_COLUMNS + BOARD_CODES        # then 14 hand counts
NUM_PIECE_SQUARE_FEATURES = HAND_COLUMNS + HAND_SIZE                    # 2310, then the bias
# ridge penalty of the (square, code) weights: the deviations from the piece values
PIECE_SQUARE_L2 = 300.0
NEWTON_ROWS = 16384          # positions a batch in the piece-square passes (bounds the sparse temporaries)
NEWTON_PASSES = 30           # passes over the training shards at most (one Newton step, or one halving, each)
NEWTON_TOLERANCE = 1e-7      # stop when a Newton step would lower the mean loss by less than this (nats)


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


def piece_square_features(board: np.ndarray, hands: np.ndarray,
                          bias: bool = False) -> scipy.sparse.csr_matrix:
    """The piece-square design matrix: [N, 2310 (+1 with `bias`)] float64 CSR with sorted indices.

    board [N, 81] uint8 and hands [N, 14] uint8, side to move's view. Column s * 28 + c - 1 is 1 when square
    s holds code c (1..28); column 2268 + c - 1 counts the squares holding code c; column 2296 + k is the
    count of hand kind k (own first); the bias column is NUM_PIECE_SQUARE_FEATURES.
    """
    n = board.shape[0]
    counts = np.bincount((board.astype(np.int64) + NUM_PIECE_CODES * np.arange(n)[:, None]).reshape(-1),
                         minlength=n * NUM_PIECE_CODES).reshape(n, NUM_PIECE_CODES)[:, 1:]
    slots = np.concatenate([board, counts.astype(np.uint8), hands, np.ones((n, int(bias)), np.uint8)], axis=1)
    flat = np.flatnonzero(slots)        # row-major: each row's columns come out increasing
    slot = flat % slots.shape[1]
    value = slots.reshape(-1)[flat]
    on_board = slot < NUM_SQUARES
    # board slot s holding code c -> column s * 28 + c - 1; every later slot -> its own column, in order
    columns = np.where(on_board, slot * BOARD_CODES + value.astype(np.int64) - 1,
                       slot - NUM_SQUARES + SQUARE_COLUMNS)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.count_nonzero(slots, axis=1), out=indptr[1:])
    matrix = scipy.sparse.csr_matrix((np.where(on_board, 1.0, value), columns.astype(np.int32), indptr),
                                     shape=(n, NUM_PIECE_SQUARE_FEATURES + int(bias)))
    matrix.has_sorted_indices = True
    return matrix


@dataclasses.dataclass(frozen=True)
class PieceSquare:
    """The fitted piece-square model, in logits: weights [2310] (piece_square_features' columns), bias, l2,
    passes, converged (the last Newton step gained less than NEWTON_TOLERANCE).
    """

    weights: tuple[float, ...]
    bias: float
    l2: float
    passes: int
    converged: bool

    def logits(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        """[N] float64 logits for [N, 81] boards and [N, 14] hands."""
        return piece_square_features(board, hands) @ np.asarray(self.weights) + self.bias

    def square_values(self) -> np.ndarray:
        """[81, 29] float64: what a piece code on a square adds to the logit (its square weight plus its
        piece value; code 0, empty, adds 0)."""
        w = np.asarray(self.weights)
        table = np.zeros((NUM_SQUARES, NUM_PIECE_CODES))
        table[:, 1:] = w[:SQUARE_COLUMNS].reshape(NUM_SQUARES, BOARD_CODES) + w[COUNT_COLUMNS:HAND_COLUMNS]
        return table

    def to_dict(self) -> dict[str, Any]:
        return {"weights": list(self.weights), "bias": self.bias, "l2": self.l2, "passes": self.passes,
                "converged": self.converged}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PieceSquare:
        weights = tuple(float(w) for w in data["weights"])
        if len(weights) != NUM_PIECE_SQUARE_FEATURES:
            raise ValueError(f"{len(weights)} piece-square weights, expected {NUM_PIECE_SQUARE_FEATURES}")
        return cls(weights, float(data["bias"]), float(data["l2"]), int(data["passes"]),
                   bool(data["converged"]))


def piece_square_penalty(l2: float = PIECE_SQUARE_L2, value_l2: float = L2) -> np.ndarray:
    """[2311] float64 ridge penalty per column (bias last): l2 on the (square, code) columns, value_l2 on
    the piece counts and hand counts, 0 on the bias."""
    penalty = np.full(NUM_PIECE_SQUARE_FEATURES + 1, float(value_l2))
    penalty[:SQUARE_COLUMNS] = l2
    penalty[-1] = 0.0
    return penalty


def fit_piece_square(train_paths: Sequence[str | Path], l2: float = PIECE_SQUARE_L2,
                     max_passes: int = NEWTON_PASSES) -> PieceSquare:
    """Fit the piece-square logistic regression on training shards by Newton's method, streaming.

    Minimises the cross-entropies (draws as 0.5) + 1/2 sum_j penalty_j w_j^2. Each pass sums the objective,
    the gradient [2311] and the exact Hessian [2311, 2311] over NEWTON_ROWS positions at a time, then takes
    one Cholesky Newton step (a step that raised the objective is halved). Memory about 180 MB whatever the
    positions. Stops after max_passes with converged False.

    Raises:
        ValueError: no positions, or l2 <= 0.
    """
    if l2 <= 0:
        raise ValueError(f"l2 = {l2}: the piece-square fit needs a positive ridge penalty")
    penalty = piece_square_penalty(l2)
    theta, step = np.zeros(penalty.size), np.zeros(penalty.size)
    best_theta, best_objective, passes, converged = theta, math.inf, 0, False
    while passes < max_passes and not converged:
        objective, gradient, hessian, positions = _newton_sums(train_paths, theta)
        passes += 1
        objective += 0.5 * float(penalty @ theta ** 2)
        if objective > best_objective:         # overshot: go back half-way along the last step
            step /= 2
            theta = best_theta - step
            continue
        best_theta, best_objective = theta, objective
        gradient += penalty * theta
        # A column no training position uses has a zero gradient and stays 0: solve on the others only
        # (a tiny dataset's solve is tiny; a real one uses most of the 2311 columns).
        active = np.flatnonzero(np.diag(hessian) > 0)
        block = hessian[np.ix_(active, active)]
        block[np.diag_indices(active.size)] += penalty[active] + 1e-9
        step = np.zeros(penalty.size)
        step[active] = _solve(block, gradient[active])
        theta = theta - step
        # Newton's decrement: the step lowers the objective by about gradient . step / 2
        converged = float(gradient @ step) / 2 < NEWTON_TOLERANCE * positions
    return PieceSquare(tuple(float(w) for w in theta[:-1]), float(theta[-1]), float(l2), passes, converged)


def _newton_sums(paths: Sequence[str | Path], theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, int]:
    """Cross-entropy sum, its gradient [F] and Hessian [F, F] at theta [F] (bias last) over the shards,
    and the number of positions. Raises ValueError when the shards hold no positions."""
    objective, gradient, hessian, total = 0.0, np.zeros(theta.size), np.zeros((theta.size, theta.size)), 0
    for batch in iter_batches(paths, (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN), NEWTON_ROWS):
        x = piece_square_features(batch[shards.KEY_BOARD], batch[shards.KEY_HANDS], bias=True)
        win = batch[shards.KEY_WIN].astype(np.float64)
        z = x @ theta
        p = scoring.sigmoid(z)
        total += win.size
        objective += float(scoring.cross_entropy(z, win).sum())
        gradient += x.T @ (p - win)
        weighted = x.copy()
        weighted.data *= np.repeat(np.sqrt(p * (1 - p)), np.diff(x.indptr))
        product = (weighted.T @ weighted).tocoo()        # canonical: each (row, col) once
        hessian[product.row, product.col] += product.data
    if total == 0:
        raise ValueError("no training positions to fit the piece-square baseline on")
    return objective, gradient, hessian, total


def _solve(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix^-1 vector for a symmetric positive definite matrix (least squares if it is not)."""
    try:
        return scipy.linalg.cho_solve(scipy.linalg.cho_factor(matrix, check_finite=False), vector,
                                      check_finite=False)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(matrix, vector, rcond=None)[0]


@dataclasses.dataclass(frozen=True)
class Baselines:
    """Fitted baselines. `weights` [20] float64 are the material piece values (logits); piece_square the
    piece-square model; engine the training split's evaluation fit (None: no training position has one)."""

    side_to_move_rate: float
    weights: tuple[float, ...]
    bias: float
    train_positions: int
    piece_square: PieceSquare
    engine: evalfit.EvalFit | None

    def side_to_move_logits(self, n: int) -> np.ndarray:
        """[n] float64 constant logit of the training-split rate."""
        p = min(max(self.side_to_move_rate, PROB_CLIP), 1 - PROB_CLIP)
        return np.full(n, math.log(p / (1 - p)))

    def material_logits(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        """[N] float64 logits of the material regression for [N, 81] boards and [N, 14] hands."""
        return material_features(board, hands).astype(np.float64) @ np.asarray(self.weights) + self.bias

    def engine_logits(self, evals: np.ndarray) -> np.ndarray:
        """[N] float64 logits of sigmoid(clip(eval) / a) for [N] int16 evals (0, p = 0.5, where none).
        Call only when `engine` is not None."""
        assert self.engine is not None
        return evalfit.logits(evals, self.engine.scale)

    def piece_values(self) -> dict[str, float]:
        """Fitted value of each feature, in logits, keyed by FEATURE_NAMES ('P', '+R', 'P*', ...)."""
        return dict(zip(FEATURE_NAMES, self.weights))

    def to_dict(self) -> dict[str, Any]:
        return {"side_to_move_rate": self.side_to_move_rate, "weights": list(self.weights), "bias": self.bias,
                "train_positions": self.train_positions, "piece_square": self.piece_square.to_dict(),
                "engine": None if self.engine is None else self.engine.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Baselines:
        """Raises KeyError, TypeError or ValueError for a dict of another layout (an older cache)."""
        engine = data["engine"]
        return cls(float(data["side_to_move_rate"]), tuple(float(w) for w in data["weights"]),
                   float(data["bias"]), int(data["train_positions"]),
                   PieceSquare.from_dict(data["piece_square"]),
                   None if engine is None else evalfit.EvalFit.from_dict(engine))


def fit_baselines(train_paths: Sequence[str | Path], l2: float = L2,
                  piece_square_l2: float = PIECE_SQUARE_L2) -> Baselines:
    """Fit every baseline on training shards: side to move, material and the engine's scale in one
    streaming pass, then the piece-square model (fit_piece_square: a few more passes).

    Raises:
        ValueError: the shards hold no positions.
    """
    table: dict[bytes, np.ndarray] = {}          # material vector -> [positions, label sum]
    total, label_sum = 0, 0.0
    evals = evalfit.EvalStats()
    for batch in iter_batches(train_paths, (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN,
                                            shards.KEY_PLY, shards.KEY_EVAL, shards.KEY_GAME)):
        win = batch[shards.KEY_WIN].astype(np.float64)
        total += win.size
        label_sum += float(win.sum())
        evals.add(batch[shards.KEY_EVAL], win, batch[shards.KEY_PLY], batch[shards.KEY_GAME])
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
    return Baselines(label_sum / total, tuple(float(w) for w in weights), float(bias), total,
                     fit_piece_square(train_paths, piece_square_l2), evalfit.fit_stats(evals))


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
        hessian = ((design * (count * p * (1 - p))[:, None]).T @ design + np.diag(penalty)
                   + 1e-9 * np.eye(len(theta)))
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.max(np.abs(step)) < 1e-9:
            break
    return theta[:-1], float(theta[-1])


SCORE_KEYS = ("positions", "accuracy", "loss", "brier", "ece")


def score_baselines(baselines: Baselines, paths: Sequence[str | Path]) -> dict[str, Any]:
    """Scores of every baseline on the given (evaluated) shards: score_baselines_by_game's first half."""
    return score_baselines_by_game(baselines, paths)[0]


def score_baselines_by_game(baselines: Baselines, paths: Sequence[str | Path]
                            ) -> tuple[dict[str, Any], dict[str, scoring.GameSums]]:
    """Scores of every baseline on the given (evaluated) shards, and their sums per game.

    Returns:
        (scores, games). scores: {"side_to_move": {positions, accuracy, loss, brier, ece, rate},
        "material": {..., piece_values, bias}, "piece_square": {..., l2, passes}, "engine": {..., scale,
        coverage, train_coverage, evaluated: {positions, games, engine: {positions, games, loss, accuracy,
        brier, decisive}}}, "train_positions"}; accuracy over decisive positions as in scoring. "engine" is
        absent when no training position or no scored position carries an evaluation; it is scored on
        every position (p = 0.5 where none) and, under "evaluated", on the evaluated positions only.
        games: name -> scoring.GameSums of the same names, and "engine_evaluated" (evaluated positions).
    """
    predictors = ["side_to_move", "material", "piece_square"] + (["engine"] if baselines.engine else [])
    scorers = {name: scoring.Scorer() for name in predictors}
    games = {name: scoring.GameSums() for name in predictors + ["engine_evaluated"]}
    side_wins, decisive, evaluated = 0, 0, 0
    for batch in iter_batches(paths, (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN, shards.KEY_GAME,
                                      shards.KEY_EVAL)):
        win, game = batch[shards.KEY_WIN], batch[shards.KEY_GAME]
        board, hands = batch[shards.KEY_BOARD], batch[shards.KEY_HANDS]
        logits = {"side_to_move": baselines.side_to_move_logits(win.size),
                  "material": baselines.material_logits(board, hands),
                  "piece_square": baselines.piece_square.logits(board, hands)}
        if baselines.engine is not None:
            logits["engine"] = baselines.engine_logits(batch[shards.KEY_EVAL])
            has_eval = batch[shards.KEY_EVAL] != EVAL_NONE
            games["engine_evaluated"].add(game, logits["engine"], win, has_eval)
            evaluated += int(has_eval.sum())
        for name, x in logits.items():
            scorers[name].add(x, win)
            games[name].add(game, x, win,
                            predicted_win=np.ones(win.size, bool) if name == "side_to_move" else None)
        side_wins += int((win == scoring.LABEL_WIN).sum())
        decisive += int((win != scoring.LABEL_DRAW).sum())
    rows = {name: {k: scorer.summary(with_buckets=False)[k] for k in SCORE_KEYS}
            for name, scorer in scorers.items()}
    # always "the side to move wins"
    rows["side_to_move"]["accuracy"] = side_wins / decisive if decisive else None
    rows["side_to_move"]["rate"] = baselines.side_to_move_rate
    rows["material"].update(piece_values=baselines.piece_values(), bias=baselines.bias)
    rows["piece_square"].update(l2=baselines.piece_square.l2, passes=baselines.piece_square.passes)
    if baselines.engine is not None and evaluated:
        rows["engine"].update(scale=baselines.engine.scale, fit=baselines.engine.fit_text(),
                              fit_used=baselines.engine.enough,
                              coverage=evaluated / rows["engine"]["positions"],
                              train_coverage=baselines.engine.coverage,
                              evaluated={"positions": evaluated,
                                         "games": games["engine_evaluated"].summary()["games"],
                                         "engine": games["engine_evaluated"].summary()})
    else:
        rows.pop("engine", None)
        games.pop("engine", None)
        games.pop("engine_evaluated")
    return {**rows, "train_positions": baselines.train_positions}, games


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
        key = {"data_dir": str(source), "train_shards": [s.sha256 for s in train],
               "baselines": BASELINES_VERSION}
        cache = run_dir / run_files.BASELINES_JSON
        if cache.is_file():
            cached = run_files.read_json(cache)
            if cached.get("key") == key:
                try:
                    return Baselines.from_dict(cached["baselines"]), str(source)
                except (KeyError, TypeError, ValueError):
                    log.warning("%s: unreadable cached baselines: fitting them again", cache)
        log.info("fitting the baselines on %s's training split (%s; cached in %s)", source,
                 plural(sum(s.positions for s in train), "position"), run_files.BASELINES_JSON)
        fitted = fit_baselines([manifest.shard_path(s) for s in train])
        run_files.write_json_atomic(cache, {"key": key, "baselines": fitted.to_dict()}, allow_nan=False)
        return fitted, str(source)
    raise RunError(f"{run_dir}: no training split to fit the baselines on (run data or {data_dir})")


def _baseline_sources(run_dir: Path, data_dir: Path) -> list[Path]:
    recorded = run_files.read_run_json(run_dir).get("data_dir")
    return [Path(recorded), data_dir] if recorded else [data_dir]
