"""What a player evaluates positions with: the trained network (Keras run or exported ONNX) or the material
baseline. Every evaluator answers one question, for a batch of positions encoded as features.encode_position
does (side to move's view):

  win_probability(board [N, 81] uint8, hands [N, 14] uint8) -> [N] float64 P(the side to move wins)

  KerasEvaluator     a run's model (RUN/model.keras or a checkpoint); mirror-averaged as evaluate and predict
                     (training.model.value_logits); TensorFlow is imported by load(), not before
  OnnxEvaluator      a `shogi-dnn export --format onnx` file on onnxruntime (no TensorFlow); the export's
                     output is already the probability (mirror-averaged unless exported without)
  MaterialEvaluator  the material baseline (analysis/baselines.py) fitted on the run's training split:
                     sigmoid(piece values . material balance + bias), the floor of the strength ladder

load() does the slow part (TensorFlow, the model file, onnxruntime's session) and warm_up() runs one batch,
so a USI engine does both at `isready`, never at the first `go`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from shogi_dnn.dataset import features
from shogi_dnn.folders import run_files
from shogi_dnn.analysis import baselines, scoring
from shogi_dnn.errors import RunError
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import NUM_SQUARES, new_position

KINDS = ("network", "material")
ONNX_SUFFIX = ".onnx"


class Evaluator(Protocol):
    """Batched win probabilities for the side to move (see the module docstring)."""

    name: str

    def load(self) -> None:
        """Load what the evaluator needs (idempotent)."""

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        """[N, 81] uint8 boards, [N, 14] uint8 hands -> [N] float64 probabilities."""


def warm_up(evaluator: Evaluator) -> None:
    """Load the evaluator and run it once on the start position's replies (traces graphs, allocates)."""
    evaluator.load()
    position = new_position(STANDARD_START_SFEN)
    boards, hands = [], []
    for move in position.legal_usi():
        child = position.copy()
        child.push_usi(move)
        board, hand = features.encode_position(child)
        boards.append(board)
        hands.append(hand)
    evaluator.win_probability(np.stack(boards), np.stack(hands))


class KerasEvaluator:
    """A run's Keras model. `mirror_average`: the mean over the position and its left-right mirror."""

    def __init__(self, run_dir: Path, checkpoint: str | None = None, mirror_average: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.checkpoint = checkpoint
        self.mirror_average = mirror_average
        self.name = f"{self.run_dir.name}" + (f"@{checkpoint}" if checkpoint else "")
        self._function = None

    def load(self) -> None:
        if self._function is not None:
            return
        from shogi_dnn.analysis import run_model
        model = run_model.load_run_model(self.run_dir, self.checkpoint)      # TensorFlow from here
        import tensorflow as tf

        from shogi_dnn.training import model as model_lib
        signature = [tf.TensorSpec((None, NUM_SQUARES), tf.uint8), tf.TensorSpec((None, features.HAND_SIZE), tf.uint8)]
        mirror = self.mirror_average

        @tf.function(input_signature=signature)      # one trace for every batch size
        def probability(board, hands):
            return tf.sigmoid(model_lib.value_logits(model, board, hands, mirror_average=mirror))

        self._function = probability

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        self.load()
        return np.asarray(self._function(board, hands), np.float64).reshape(-1)


class OnnxEvaluator:
    """An exported ONNX model (training/export.py: inputs board, hands; output win_probability)."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        self.path = Path(path)
        self.threads = threads
        self.name = self.path.stem
        self._session = None

    def load(self) -> None:
        if self._session is not None:
            return
        if not self.path.is_file():
            raise RunError(f"{self.path}: no such ONNX model (make one with `shogi-dnn export --format onnx`)")
        try:
            import onnxruntime
        except ImportError as exc:
            raise RunError(f"an ONNX model needs onnxruntime: pip install 'shogi-dnn[export]' ({exc})") from exc
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        try:
            self._session = onnxruntime.InferenceSession(str(self.path), options,
                                                         providers=["CPUExecutionProvider"])
        except Exception as exc:        # onnxruntime raises its own (Fail, InvalidGraph, ...) types
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RunError(f"{self.path}: not a readable ONNX model ({first})") from exc

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        self.load()
        out = self._session.run(None, {"board": np.ascontiguousarray(board, np.uint8),
                                       "hands": np.ascontiguousarray(hands, np.uint8)})[0]
        return np.asarray(out, np.float64).reshape(-1)


class MaterialEvaluator:
    """The material baseline: fitted piece values (logits) applied to the material balance."""

    def __init__(self, fitted: baselines.Baselines | None = None, run_dir: Path | None = None,
                 data_dir: Path | None = None) -> None:
        self.fitted = fitted
        self.run_dir = run_dir
        self.data_dir = data_dir
        self.name = "material"

    def load(self) -> None:
        if self.fitted is not None:
            return
        if self.run_dir is None:
            raise RunError("the material player needs fitted baselines or a run directory")
        data = run_files.data_dir(self.run_dir, self.data_dir)
        self.fitted, _ = baselines.fitted_baselines(self.run_dir, data)

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        self.load()
        return scoring.sigmoid(self.fitted.material_logits(board, hands))


def make_evaluator(kind: str, model: Path, checkpoint: str | None = None, mirror_average: bool = True,
                   data_dir: Path | None = None) -> Evaluator:
    """The evaluator of a player: `kind` "network" (a run directory, or an .onnx file) or "material"
    (a run directory: baselines fitted on its training split, cached in RUN/baselines.json).

    Raises:
        RunError: an unknown kind, a missing path, or a material player asked of an ONNX file.
    """
    model = Path(model)
    if kind not in KINDS:
        raise RunError(f"unknown player {kind!r} (one of {', '.join(KINDS)})")
    if not model.exists():
        raise RunError(f"{model}: no such run directory or model file")
    is_onnx = model.is_file() and model.suffix == ONNX_SUFFIX
    if kind == "material":
        if is_onnx:
            raise RunError(f"{model}: the material player needs the run directory (its training split)")
        return MaterialEvaluator(run_dir=run_files.check_run_dir(model), data_dir=data_dir)
    if is_onnx:
        return OnnxEvaluator(model)
    return KerasEvaluator(run_files.check_run_dir(model), checkpoint, mirror_average)
