"""Helpers of the engine tests: a fixed material evaluator (no TensorFlow, no data), a slow one, one with a
policy (fixed random logits), test positions, and a stream that records the engine's output lines and
waits for one."""

from __future__ import annotations

import threading
import time

import numpy as np

from shogi_dnn.analysis.baselines import Baselines
from shogi_dnn.engine.players import MaterialEvaluator

MATE_IN_ONE = "4k4/9/4P4/9/9/9/9/9/4K4 b G 1"          # G*5b, guarded by the pawn on 5c
MATE_IN_THREE = "8k/8p/9/9/9/9/9/9/4K4 b BG 1"         # B*3c; K2a (forced); G*2b (brute force: test_search)
HANGING = "4k4/9/4s4/4p4/9/9/9/4R4/4K4 b - 1"          # R5hx5d wins a pawn and loses the rook to S5cx5d
DECLARE = "K+R+R+B+BGGGS/PPPPPPPPP/9/9/9/9/9/9/k8 b - 1"   # 17 pieces, 33 points in White's camp

# Piece values in logits (board kinds P L N S G B R +P +L +N +S +B +R, then hand P L N S G B R).
WEIGHTS = (0.1, 0.3, 0.35, 0.5, 0.55, 0.8, 1.0, 0.55, 0.55, 0.55, 0.55, 1.1, 1.3,
           0.12, 0.35, 0.4, 0.55, 0.6, 0.9, 1.1)


def material(bias: float = 0.0) -> MaterialEvaluator:
    """A material evaluator with fixed piece values."""
    # material only: no piece-square table, no engine fit
    return MaterialEvaluator(Baselines(0.5, WEIGHTS, bias, 1, piece_square=None, engine=None))


class SlowEvaluator:
    """The fixed material evaluator, `delay` seconds a batch plus `per_position` seconds of CPU work per
    position (a search that lasts, as a network's does); counts loads and batch sizes."""

    name = "slow"

    def __init__(self, delay: float = 0.005, per_position: float = 0.0) -> None:
        self.inner = material()
        self.delay = delay
        self.per_position = per_position
        self.loads = 0
        self.batches: list[int] = []

    def load(self) -> None:
        self.loads += 1

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        time.sleep(self.delay)
        busy = time.thread_time() + self.per_position * len(board)     # CPU time, as a network spends it
        while time.thread_time() < busy:
            pass
        self.batches.append(len(board))
        return self.inner.win_probability(board, hands)


class PolicyEvaluator:
    """The fixed material value and policy logits board . W (W fixed random [81, 2187]); records batches."""

    name = "policy"
    has_policy = True

    def __init__(self, seed: int = 0, scale: float = 0.05) -> None:
        self.inner = material()
        self.weights = (np.random.default_rng(seed).normal(size=(81, 2187)) * scale).astype(np.float32)
        self.batches: list[int] = []

    def load(self) -> None:
        pass

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        return self.inner.win_probability(board, hands)

    def evaluate_logits(self, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.batches.append(len(board))
        return self.win_probability(board, hands), board.astype(np.float32) @ self.weights


class Lines:
    """A text stream for UsiEngine(out=...): keeps whole lines, lets a test wait for one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._buffer = ""
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            self._buffer += text
            *done, self._buffer = self._buffer.split("\n")
            self.lines += done
            self._changed.notify_all()
        return len(text)

    def flush(self) -> None:
        pass

    def wait_for(self, prefix: str, timeout: float = 10.0, start: int = 0) -> str:
        """The first line from index `start` on that starts with `prefix` (AssertionError after timeout)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[start:]:
                    if line.startswith(prefix):
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line starting {prefix!r} in {self.lines[start:]}")
                self._changed.wait(left)

    def since(self, start: int) -> list[str]:
        with self._changed:
            return list(self.lines[start:])
