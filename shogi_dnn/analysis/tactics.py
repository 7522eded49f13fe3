"""Free captures: positions where the side to move can take a piece that cannot be taken back (no TF).

A *free capture* is a legal capture of an opponent piece (not the king) on a square t after which the
opponent has no legal move to t. Exact: checked on the position after the capture (the mover's king not
attacked, a recapture not leaving the opponent's king attacked); promotion does not change the answer
and drops capture nothing. free_captures works on features' boards ([N, 81] uint8, side to move's view,
read as Black to move) with rules/moves.py and a reach table.

A capture's value is the captured piece's board value plus its unpromoted kind's hand value
(CaptureValues: [29] float64 per piece code): the material baseline's fitted logits, else
rules.PIECE_VALUES in centipawns:

  P 90   L 315   N 405   S 495   G 540   B 855   R 990   +P +L +N +S 540   +B 945   +R 1395

free_capture_block: eval-<split>.json's `free_capture` block, on positions with and without a free
capture: the model's mean win probability, the result rate, the engine's mean probability, and model
minus result with its bootstrap interval over games.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from shogi_dnn.analysis import scoring
from shogi_dnn.dataset.features import NUM_PIECE_CODES
from shogi_dnn.rules import (
    HAND_PIECE_TYPES,
    NUM_PIECE_TYPES,
    NUM_SQUARES,
    PIECE_VALUES,
    SFEN_PIECE,
    UNPROMOTED,
    PieceType,
    attacks,
    in_check,
)

_KING = int(PieceType.KING)
_OPP_KING = NUM_PIECE_TYPES + _KING                       # 22: never a target (its capture ends nothing)
_BLACK, _WHITE = 0, 1                                     # the view's side to move reads as Black



def capture_values(board_values: Mapping[PieceType, float],
                   hand_values: Mapping[PieceType, float]) -> np.ndarray:
    """[29] float64 gain of capturing each opponent code: board_values[t] + hand_values[unpromoted(t)]."""
    values = np.zeros(NUM_PIECE_CODES)
    for piece_type in PieceType:
        if piece_type != _KING:
            base = UNPROMOTED.get(piece_type, piece_type)
            values[NUM_PIECE_TYPES + piece_type] = board_values[piece_type] + hand_values[base]
    return values


DEFAULT_CAPTURE_VALUES = capture_values(PIECE_VALUES, PIECE_VALUES)


def capture_values_from_material(piece_values: Mapping[str, float]) -> np.ndarray:
    """capture_values from the material baseline's fitted values (baselines.Baselines.piece_values():
    'P', '+R', ... on the board, 'P*', ... in hand, in logits). [29] float64."""
    board = {t: piece_values[SFEN_PIECE[t]] for t in PieceType if t != _KING}
    hand = {t: piece_values[f"{SFEN_PIECE[t]}*"] for t in HAND_PIECE_TYPES}
    return capture_values(board, hand)


@functools.lru_cache(maxsize=1)
def _reach() -> tuple[tuple[int, ...], ...]:
    """[29][81] 81-bit masks: the squares the piece of that code on that square attacks on an empty
    board (rules.attacks). Built once (about 0.2 s)."""
    table = []
    for code in range(NUM_PIECE_CODES):
        row = []
        for square in range(NUM_SQUARES):
            if code == 0:
                row.append(0)
                continue
            codes = [0] * NUM_SQUARES
            codes[square] = code
            row.append(sum(1 << t for t in range(NUM_SQUARES) if t != square and attacks(codes, square, t)))
        table.append(tuple(row))
    return tuple(table)


def _recaptured(codes: list[int], target: int, reach) -> bool:
    """Whether the opponent (White here, to move) has a legal move to `target` in `codes`."""
    for square, code in enumerate(codes):
        if code > NUM_PIECE_TYPES and reach[code][square] >> target & 1 and attacks(codes, square, target):
            after = codes.copy()
            after[target], after[square] = code, 0
            if not in_check(after, _WHITE):
                return True
    return False


def best_free_capture(codes: list[int], values: np.ndarray) -> tuple[int, int] | None:
    """(origin, destination) of the most valuable free capture of one position, None without one.

    Args:
        codes: 81 piece codes of the side to move's view (own 1..14 = Black's, to move).
        values: [29] capture value per piece code (targets are tried most valuable first).
    """
    reach = _reach()
    own = [s for s, c in enumerate(codes) if 0 < c <= NUM_PIECE_TYPES]
    targets = sorted((t for t, c in enumerate(codes) if c > NUM_PIECE_TYPES and c != _OPP_KING),
                     key=lambda t: -values[codes[t]])
    for target in targets:
        for origin in own:
            piece = codes[origin]
            if not reach[piece][origin] >> target & 1 or not attacks(codes, origin, target):
                continue
            after = codes.copy()
            after[target], after[origin] = piece, 0
            if not in_check(after, _BLACK) and not _recaptured(after, target, reach):
                return origin, target
    return None


def free_captures(board: np.ndarray, values: np.ndarray = DEFAULT_CAPTURE_VALUES
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(free [N] bool, best [N] float64: the best free capture's value, else 0) of board [N, 81] uint8
    (side to move's view), with `values` [29] float per piece code.
    """
    board = np.asarray(board)
    free = np.zeros(board.shape[0], bool)
    best = np.zeros(board.shape[0])
    for i, row in enumerate(board.tolist()):
        found = best_free_capture(row, values)
        if found is not None:
            free[i], best[i] = True, values[row[found[1]]]
    return free, best


# CalibrationSums columns, per game: positions, model probability, result label, positions with an
# engine evaluation, engine probability there.
_POSITIONS, _MODEL, _RESULT, _EVALUATED, _ENGINE = range(5)
GROUPS = ("free", "other")                 # positions with a free capture, and all the others


class CalibrationSums:
    """Per-game sums of the model's probability and the result, for positions with a free capture and
    for the others (`sums` [2 groups, 5 fields, ids] float64, column = game id), and the engine's
    probability on the positions with an evaluation."""

    def __init__(self) -> None:
        self.sums = np.zeros((len(GROUPS), 5, 0))
        self.value_sum = 0.0               # best free capture's value summed over the free positions

    def _grow(self, ids: int) -> None:
        if ids > self.sums.shape[2]:
            grown = np.zeros((len(GROUPS), 5, max(ids, 2 * self.sums.shape[2])))
            grown[:, :, :self.sums.shape[2]] = self.sums
            self.sums = grown

    def add_model(self, games: np.ndarray, logits: np.ndarray, labels: np.ndarray, free: np.ndarray) -> None:
        """A batch of the model's predictions: games [N] ids >= 0, logits [N], labels [N] in {0, 0.5, 1},
        free [N] bool (free_captures' first output for those rows)."""
        self._add(games, free, {_POSITIONS: np.ones(np.size(games)), _MODEL: scoring.sigmoid(
            np.asarray(logits, np.float64).reshape(-1)), _RESULT: np.asarray(labels, np.float64).reshape(-1)})

    def add_engine(self, games: np.ndarray, engine_logits: np.ndarray, evaluated: np.ndarray,
                   free: np.ndarray, best: np.ndarray) -> None:
        """A batch of the engine baseline's logits [N] (used where evaluated [N] bool), and each row's best
        free capture value [N] (summed over the free rows)."""
        evaluated = np.asarray(evaluated, bool).reshape(-1)
        p = np.where(evaluated, scoring.sigmoid(np.asarray(engine_logits, np.float64).reshape(-1)), 0.0)
        self._add(games, free, {_EVALUATED: evaluated.astype(np.float64), _ENGINE: p})
        self.value_sum += float(np.asarray(best, np.float64)[np.asarray(free, bool)].sum())

    def _add(self, games: np.ndarray, free: np.ndarray, columns: dict[int, np.ndarray]) -> None:
        g = np.asarray(games, np.int64).reshape(-1)
        if g.size == 0:
            return
        if int(g.min()) < 0:
            raise ValueError(f"game id {int(g.min())}: ids must be >= 0")
        self._grow(int(g.max()) + 1)
        free = np.asarray(free, bool).reshape(-1)
        for group, keep in enumerate((free, ~free)):
            for field, values in columns.items():
                self.sums[group, field] += np.bincount(g[keep], weights=values[keep],
                                                       minlength=self.sums.shape[2])

    def block(self, resamples: int = scoring.BOOTSTRAP_RESAMPLES, seed: int = scoring.BOOTSTRAP_SEED,
              level: float = scoring.BOOTSTRAP_LEVEL) -> dict[str, Any]:
        """RUN/eval-<split>.json's `free_capture` block (see free_capture_block)."""
        return free_capture_block(self, resamples, seed, level)


def _mean(total: np.ndarray, field: int, denominator: int) -> float | None:
    return float(total[field] / total[denominator]) if total[denominator] > 0 else None


def free_capture_block(sums: CalibrationSums, resamples: int = scoring.BOOTSTRAP_RESAMPLES,
                       seed: int = scoring.BOOTSTRAP_SEED, level: float = scoring.BOOTSTRAP_LEVEL
                       ) -> dict[str, Any]:
    """The `free_capture` block: positions (with a free capture), share (of all positions), mean_value (of
    the best free capture, in the capture values' unit), then per group ("free", "other"): positions,
    games, model (mean win probability), result (label mean, draws 0.5), engine (mean engine probability
    on the evaluated positions, None without), evaluated (their count), model_minus_result {estimate, lo,
    hi, resolved} (interval: bootstrap over the group's games); bootstrap {unit, resamples, seed, level}.
    """
    block: dict[str, Any] = {}
    all_positions = float(sums.sums[:, _POSITIONS].sum())
    tails = (100 * (1 - level) / 2, 100 * (1 + level) / 2)
    for group, name in enumerate(GROUPS):
        columns = sums.sums[group]
        ids = np.flatnonzero(columns[_POSITIONS] > 0)
        total = columns.sum(axis=1)
        row: dict[str, Any] = {"positions": int(total[_POSITIONS]), "games": int(ids.size),
                               "model": _mean(total, _MODEL, _POSITIONS),
                               "result": _mean(total, _RESULT, _POSITIONS),
                               "engine": _mean(total, _ENGINE, _EVALUATED),
                               "evaluated": int(total[_EVALUATED]), "model_minus_result": None}
        if ids.size:
            kept = columns[:, ids]                                           # [5, G]
            resampled = np.concatenate([counts @ kept.T
                                        for counts in scoring.resample_counts(ids.size, resamples, seed)])
            gap = (resampled[:, _MODEL] - resampled[:, _RESULT]) / resampled[:, _POSITIONS]
            lo, hi = np.percentile(gap, tails)
            interval = scoring.Interval(row["model"] - row["result"], float(lo), float(hi))
            row["model_minus_result"] = {**interval.to_dict(), "resolved": interval.resolved}
        block[name] = row
    free = block["free"]["positions"]
    block = {"positions": free, "share": free / all_positions if all_positions else None,
             "mean_value": sums.value_sum / free if free else None, **block,
             "bootstrap": {"unit": "game", "resamples": int(resamples), "seed": int(seed),
                           "level": float(level)}}
    return block


def free_capture_text(block: Mapping[str, Any]) -> str:
    """One line for evaluate's table: 'free capture: 1,234 positions (12.0%): model 0.4390, result 0.5470,
    engine 0.5010, model - result -0.1080 (95% -0.1300..-0.0850 over games); other positions: model ...'."""
    if not block["positions"]:
        return "free capture: no position has one"
    level = block["bootstrap"]["level"]
    parts = []
    for name, words in (("free", f"free capture: {block['positions']:,} positions ({block['share']:.1%})"),
                        ("other", "other positions")):
        row = block[name]
        if not row["positions"]:
            continue
        engine = "" if row["engine"] is None else f", engine {row['engine']:.4f}"
        gap = row["model_minus_result"]
        parts.append(f"{words}: model {row['model']:.4f}, result {row['result']:.4f}{engine}, model - result "
                     f"{gap['estimate']:+.4f} ({scoring.interval_text(gap['lo'], gap['hi'], level)})")
    return "; ".join(parts)
