"""Helpers of the engine tests: a fixed material evaluator (no TensorFlow, no data), a slow one, and a
stream that records the engine's output lines and waits for one."""

from __future__ import annotations

import threading
import time

import numpy as np

from shogi_dnn.analysis.baselines import Baselines
from shogi_dnn.engine.players import MaterialEvaluator

# Piece values in logits (board kinds P L N S G B R +P +L +N +S +B +R, then hand P L N S G B R).
WEIGHTS = (0.1, 0.3, 0.35, 0.5, 0.55, 0.8, 1.0, 0.55, 0.55, 0.55, 0.55, 1.1, 1.3,
           0.12, 0.35, 0.4, 0.55, 0.6, 0.9, 1.1)


def material(bias: float = 0.0) -> MaterialEvaluator:
    """A material evaluator with fixed piece values."""
    return MaterialEvaluator(Baselines(0.5, WEIGHTS, bias, 1, piece_square=None, engine=None))  # material only


class SlowEvaluator:
    """The fixed material evaluator, `delay` seconds a batch (a search that lasts); counts loads."""

    name = "slow"

    def __init__(self, delay: float = 0.005) -> None:
        self.inner = material()
        self.delay = delay
        self.loads = 0

    def load(self) -> None:
        self.loads += 1

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        time.sleep(self.delay)
        return self.inner.win_probability(board, hands)


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
