"""What a player evaluates positions with: the trained network (Keras run or exported ONNX) or the material
baseline. Every evaluator answers one question, for a batch of positions encoded as features.encode_position
does (side to move's view):

  win_probability(board [N, 81] uint8, hands [N, 14] uint8) -> [N] float64 P(the side to move wins)

and a network with a policy head (a model with a second output, [N, 2187] logits in dataset/policy.py's
labels) answers a second one, `evaluate_logits(board, hands) -> (win [N] float64, logits [N, 2187] float32
or None)`; `has_policy` tells, after load(), whether the logits come. `evaluate(evaluator, board, hands,
labels)` is what the search calls: the win probabilities, and the priors over each position's legal moves
(a softmax of the logits at the legal moves' labels, `legal_priors`) when the evaluator has a policy,
else None (the search then uses uniform priors and a capture quiescence search).

  KerasEvaluator     a run's model (RUN/model.keras or a checkpoint); mirror-averaged as evaluate and predict
                     (training.model.value_logits; the policy logits as the mean of the position's and of
                     its mirror's, relabelled with policy.mirror_labels); TensorFlow is imported by load()
  OnnxEvaluator      a `shogi-dnn export --format onnx` file on onnxruntime (no TensorFlow); the export's
                     output is already the probability (mirror-averaged unless exported without); a second
                     output of shape [batch, 2187] (or named `policy*`) is read as the policy logits
  MaterialEvaluator  the material baseline (analysis/baselines.py) fitted on the run's training split:
                     sigmoid(piece values . material balance + bias), the floor of the strength ladder;
                     fixed_material(): the same with rules.PIECE_VALUES (no fit, no data), the
                     engine's move when the network cannot give one

load() does the slow part (TensorFlow, the model file, onnxruntime's session) and warm_up() runs one batch,
so a USI engine does both before `readyok`, never at the first `go`. check(evaluator) finds the faults
that need neither TensorFlow nor a fit (a missing model file, an ONNX file that onnxruntime cannot read or
whose inputs and outputs are not the export's); it loads an ONNX model (onnxruntime only).
"""

from __future__ import annotations

import dataclasses
import re
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeGuard

import numpy as np

from shogi_dnn import packaged
from shogi_dnn.analysis import baselines, run_model, scoring
from shogi_dnn.dataset import evalfit, features, policy
from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import HAND_PIECE_TYPES, NUM_SQUARES, PIECE_VALUES, PieceType, Position, new_position

KINDS = ("network", "material")
ONNX_SUFFIX = ".onnx"


class Evaluator(Protocol):
    """Batched win probabilities for the side to move (see the module docstring). An evaluator may also
    have `has_policy` and `evaluate_logits` (the network evaluators do); `evaluate` asks for them."""

    name: str

    def load(self) -> None:
        """Load what the evaluator needs (idempotent)."""

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        """[N, 81] uint8 boards, [N, 14] uint8 hands -> [N] float64 probabilities."""


class PolicyEvaluator(Evaluator, Protocol):
    """An evaluator that may give policy logits beside the win probabilities (has_policy once loaded)."""

    has_policy: bool

    def evaluate_logits(self, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """[N] float64 win probabilities and [N, 2187] float32 policy logits (None without a policy)."""
        ...


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What the search gets for a batch of N positions.

    Attributes:
        win: [N] float64 P(the side to move wins).
        priors: None (no policy), or N arrays, the i-th [M_i] float64 summing to 1: the prior of each
            legal move of position i, in the order of the labels given to `evaluate`.
    """

    win: np.ndarray
    priors: list[np.ndarray] | None


def legal_labels(position: Position, moves: Sequence[str]) -> np.ndarray:
    """The policy labels of `moves` (USI, legal in `position`): [M] int64 (dataset/policy.py)."""
    turn = position.turn
    codes = np.fromiter((features.encode_move(move, turn) for move in moves), np.int64, len(moves))
    return policy.move_labels(codes).astype(np.int64)


def legal_priors(logits: np.ndarray, labels: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Softmax of each position's logits over its legal moves' labels.

    Args:
        logits: [N, NUM_MOVE_LABELS] policy logits (any float dtype).
        labels: N arrays of labels, [M_i] int each.
    Returns:
        N arrays [M_i] float64 summing to 1 (an empty array where M_i = 0).
    """
    priors = []
    for row, moves in zip(np.asarray(logits, np.float64), labels):
        x = row[np.asarray(moves, np.int64)]
        if x.size:
            x = np.exp(x - x.max())
            x /= x.sum()
        priors.append(x)
    return priors


def has_policy(evaluator: Evaluator) -> TypeGuard[PolicyEvaluator]:
    """True when the (loaded) evaluator gives policy logits."""
    return bool(getattr(evaluator, "has_policy", False))


def evaluate(evaluator: Evaluator, board: np.ndarray, hands: np.ndarray,
             labels: Sequence[np.ndarray] | None = None) -> Evaluation:
    """Win probabilities of a batch, and priors over `labels` when the evaluator has a policy.

    Args:
        board: [N, 81] uint8; hands: [N, 14] uint8 (features.encode_position).
        labels: None (no priors wanted), or N arrays [M_i] int: the legal moves' labels (legal_labels).
    """
    if labels is not None and has_policy(evaluator):
        win, logits = evaluator.evaluate_logits(board, hands)
        if logits is not None:
            return Evaluation(np.asarray(win, np.float64).reshape(-1), legal_priors(logits, labels))
        return Evaluation(np.asarray(win, np.float64).reshape(-1), None)
    return Evaluation(np.asarray(evaluator.win_probability(board, hands), np.float64).reshape(-1), None)


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
    """A run's Keras model. `mirror_average`: the mean over the position and its left-right mirror. A model
    with two outputs (value logit [B, 1], policy logits [B, 2187], told apart by their width) has a policy."""

    def __init__(self, run_dir: Path, checkpoint: str | None = None,
                 mirror_average: bool = run_model.MIRROR_AVERAGE) -> None:
        self.run_dir = Path(run_dir)
        self.checkpoint = checkpoint
        self.mirror_average = mirror_average
        self.name = f"{self.run_dir.name}" + (f"@{checkpoint}" if checkpoint else "")
        self.has_policy = False
        # (board, hands) -> (win [N], logits [N, 2187] or None), a tf.function built by load()
        self._function: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]] | None = None

    def check(self) -> None:
        """The model file (a zip whose config.json has no Lambda layer, which Keras refuses to load) or
        the checkpoint is there; TensorFlow waits for load()."""
        final = self.run_dir / run_files.MODEL_FILE
        if self.checkpoint is not None or not final.is_file():
            run_files.find_checkpoint(self.run_dir, self.checkpoint)
            return
        try:
            with zipfile.ZipFile(final) as archive:
                config = archive.read("config.json").decode("utf-8", "replace")
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            raise RunError(f"{final}: not a readable Keras model file ({exc})") from None
        if re.search(r'"class_name":\s*"Lambda"', config):
            raise RunError(f"{final}: the model has a Lambda layer (Python code), which Keras will not load")

    def load(self) -> None:
        if self._function is not None:
            return
        model = run_model.load_run_model(self.run_dir, self.checkpoint)      # TensorFlow from here
        import tensorflow as tf

        from shogi_dnn.training import model as model_lib
        signature = [tf.TensorSpec((None, NUM_SQUARES), tf.uint8),
                     tf.TensorSpec((None, features.HAND_SIZE), tf.uint8)]
        mirror = self.mirror_average
        self.has_policy = len(model.outputs) == 2
        if not self.has_policy:
            @tf.function(input_signature=signature)      # one trace for every batch size
            def probability(board, hands):
                return tf.sigmoid(model_lib.value_logits(model, board, hands, mirror_average=mirror)), None

            self._function = probability
            return
        mirrored = tf.constant(policy.mirror_labels(np.arange(policy.NUM_MOVE_LABELS)), tf.int32)
        inputs = (model_lib.INPUT_BOARD, model_lib.INPUT_HANDS)

        @tf.function(input_signature=signature)
        def both(board, hands):
            if mirror:
                board = tf.concat([board, model_lib.mirror_board(board)], axis=0)
                hands = tf.concat([hands, hands], axis=0)
            value, logits = _value_and_policy(model(dict(zip(inputs, (board, hands)))))
            win = tf.sigmoid(tf.reshape(tf.cast(value, tf.float32), (-1,)))
            logits = tf.cast(logits, tf.float32)
            if mirror:                       # the mirror's move labels back to the position's
                win = tf.reduce_mean(tf.reshape(win, (2, -1)), axis=0)
                own, other = tf.split(logits, 2, axis=0)
                logits = (own + tf.gather(other, mirrored, axis=1)) / 2
            return win, logits

        self._function = both

    def evaluate_logits(self, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """[N] float64 win probabilities and [N, 2187] float32 policy logits (None without a policy)."""
        self.load()
        assert self._function is not None          # load() built it
        win, logits = self._function(board, hands)
        return np.asarray(win, np.float64).reshape(-1), None if logits is None else np.asarray(logits)

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        return self.evaluate_logits(board, hands)[0]


def _value_and_policy(outputs) -> tuple:
    """(value [B, 1], policy [B, 2187]) of a two-output model's outputs (a list or a dict), by width."""
    outputs = list(outputs.values()) if isinstance(outputs, dict) else list(outputs)
    if outputs[0].shape[-1] == policy.NUM_MOVE_LABELS:
        outputs.reverse()
    return outputs[0], outputs[1]


class OnnxEvaluator:
    """An exported ONNX model (training/export.py: inputs board, hands; output win_probability; a second
    output [batch, 2187] or named policy*: the policy logits)."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        self.path = Path(path)
        self.threads = threads
        self.name = self.path.stem
        self.has_policy = False
        self._session: Any = None                  # an onnxruntime.InferenceSession once loaded
        self._outputs: list[str] = []

    def load(self) -> None:
        if self._session is not None:
            return
        if not self.path.is_file():
            raise RunError(f"{self.path}: no such ONNX model "
                           "(make one with `shogi-dnn export --format onnx`)")
        try:
            import onnxruntime
        except ImportError as exc:
            raise RunError(f"an ONNX model needs onnxruntime: pip install 'shogi-dnn[export]' "
                           f"({exc})") from exc
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3                  # errors only: its warnings would reach a GUI's stderr
        try:
            session = onnxruntime.InferenceSession(str(self.path), options,
                                                   providers=["CPUExecutionProvider"])
        except Exception as exc:        # onnxruntime raises its own (Fail, InvalidGraph, ...) types
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RunError(f"{self.path}: not a readable ONNX model ({first})") from exc
        outputs = session.get_outputs()
        policies = [o.name for o in outputs if o.name.startswith("policy")
                    or (o.shape and o.shape[-1] == policy.NUM_MOVE_LABELS)]
        values = [o.name for o in outputs if o.name not in policies]
        self._outputs = values[:1] + policies[:1]
        _check_signature(self.path, session.get_inputs(), outputs, self._outputs)
        self.has_policy = bool(policies)
        self._session = session

    def check(self) -> None:
        """Load the model (onnxruntime only): the whole check of an ONNX file."""
        self.load()

    def evaluate_logits(self, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """[N] float64 win probabilities and [N, 2187] float32 policy logits (None without a policy)."""
        self.load()
        out = self._session.run(self._outputs, {"board": np.ascontiguousarray(board, np.uint8),
                                                "hands": np.ascontiguousarray(hands, np.uint8)})
        win = np.asarray(out[0], np.float64).reshape(-1)
        return win, (np.asarray(out[1], np.float32).reshape(len(win), -1) if self.has_policy else None)

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        return self.evaluate_logits(board, hands)[0]


_ONNX_INPUTS = {"board": ("tensor(uint8)", NUM_SQUARES), "hands": ("tensor(uint8)", features.HAND_SIZE)}
_ONNX_FLOATS = ("tensor(float)", "tensor(double)", "tensor(float16)")


def _check_signature(path: Path, inputs: Sequence, outputs: Sequence, used: Sequence[str]) -> None:
    """Raise RunError unless the session's inputs are the export's (board [batch, 81] uint8, hands
    [batch, 14] uint8) and its value output (and policy output, when there is one) are float, one value
    ([batch] or [batch, 1]) and [batch, 2187]."""
    given = {i.name: i for i in inputs}
    if sorted(given) != sorted(_ONNX_INPUTS):
        raise RunError(f"{path}: inputs {sorted(given)}, not the export's {sorted(_ONNX_INPUTS)}")
    for name, (dtype, width) in _ONNX_INPUTS.items():
        shape = list(given[name].shape)
        if given[name].type != dtype or len(shape) != 2 or shape[1] != width:
            raise RunError(f"{path}: input {name} is {given[name].type} {shape}, "
                           f"not {dtype} [batch, {width}]")
    if not used:
        raise RunError(f"{path}: no output")
    by_name = {o.name: o for o in outputs}
    for k, name in enumerate(used):
        shape, dtype = list(by_name[name].shape), by_name[name].type
        width = policy.NUM_MOVE_LABELS if k else 1
        ok_shape = len(shape) == 2 and shape[1] == width or (k == 0 and len(shape) == 1)
        if dtype not in _ONNX_FLOATS or not ok_shape:
            wanted = f"[batch, {width}]" if k else "[batch] or [batch, 1]"
            raise RunError(f"{path}: output {name} is {dtype} {shape}, not a float {wanted}")


def check(evaluator: Evaluator) -> None:
    """The checks an evaluator can make before loading (module docstring). Raises RunError."""
    checker = getattr(evaluator, "check", None)
    if checker is not None:
        checker()


class MaterialEvaluator:
    """The material baseline: fitted piece values (logits) applied to the material balance."""

    def __init__(self, fitted: baselines.Baselines | None = None, run_dir: Path | None = None,
                 data_dir: Path | None = None) -> None:
        self.fitted = fitted
        self.run_dir = run_dir
        self.data_dir = data_dir
        self.name = "material"

    def check(self) -> None:
        """The run's dataset folder is known (the fit itself waits for load)."""
        if self.fitted is None and self.run_dir is not None:
            run_files.data_dir(self.run_dir, self.data_dir)

    def load(self) -> None:
        if self.fitted is not None:
            return
        if self.run_dir is None:
            raise RunError("the material player needs fitted baselines or a run directory")
        data = run_files.data_dir(self.run_dir, self.data_dir)
        self.fitted, _ = baselines.fitted_baselines(self.run_dir, data)

    def win_probability(self, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
        self.load()
        assert self.fitted is not None             # load() fitted them or raised
        return scoring.sigmoid(self.fitted.material_logits(board, hands))


def fixed_material() -> MaterialEvaluator:
    """The material evaluator with rules.PIECE_VALUES (centipawns / evalfit.DEFAULT_SCALE as
    logits): no fit, no data, no model."""
    values = PIECE_VALUES
    scale = evalfit.DEFAULT_SCALE
    kinds = list(baselines.BOARD_KINDS) + list(HAND_PIECE_TYPES)
    weights = [values[PieceType(t)] / scale for t in kinds]
    # Only material_logits is ever asked of these baselines: there is no piece-square model to give.
    fixed = baselines.Baselines(0.5, tuple(weights), 0.0, 0, piece_square=None,  # type: ignore[arg-type]
                                engine=None)
    return MaterialEvaluator(fixed)


def onnxruntime_available() -> bool:
    """Whether onnxruntime imports (it comes with the `export` extra)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def open_network(run_dir: Path | None = None, model: Path | None = None, checkpoint: str | None = None,
                 mirror_average: bool = run_model.MIRROR_AVERAGE) -> KerasEvaluator | OnnxEvaluator:
    """The network a command plays or predicts with, checked (check(): no TensorFlow yet):

      model      an exported ONNX file (onnxruntime; the export decided its mirror averaging)
      run_dir    a run's Keras model (RUN/model.keras, or `checkpoint`), averaged over the mirror as asked
      neither    the packaged network (shogi_dnn/packaged): its ONNX export where onnxruntime is installed
                 and mirror averaging is wanted (the export has it built in; several times faster a call,
                 no TensorFlow), else its Keras model

    Raises:
        RunError: both a run and a model named, a missing or damaged file, a checkpoint of the packaged
            network, an ONNX file onnxruntime cannot read (one line, naming it).
    """
    if run_dir is not None and model is not None:
        raise RunError("name a run (--run-dir) or an ONNX model (--model), not both")
    evaluator: KerasEvaluator | OnnxEvaluator
    if model is not None:
        evaluator = OnnxEvaluator(Path(model))
    elif run_dir is not None:
        evaluator = KerasEvaluator(run_files.check_run_dir(run_dir), checkpoint, mirror_average)
    elif checkpoint is not None:
        raise RunError(f"--checkpoint {checkpoint}: the packaged network has no checkpoints (name --run-dir)")
    elif mirror_average and onnxruntime_available():
        evaluator = OnnxEvaluator(packaged.model_file("onnx"))
    else:
        evaluator = KerasEvaluator(packaged.model_file("keras").parent, None, mirror_average)
    evaluator.check()
    return evaluator


def make_evaluator(kind: str, model: Path | None, checkpoint: str | None = None,
                   mirror_average: bool = run_model.MIRROR_AVERAGE,
                   data_dir: Path | None = None) -> Evaluator:
    """The evaluator of a player: `kind` "network" (a run directory, an .onnx file, or None: the packaged
    network; open_network) or "material" (a run directory: baselines fitted on its training split, cached
    in RUN/baselines.json).

    Raises:
        RunError: an unknown kind, a missing path, or a material player asked of an ONNX file or of no run.
    """
    if kind not in KINDS:
        raise RunError(f"unknown player {kind!r} (one of {', '.join(KINDS)})")
    if model is None:
        if kind == "material":
            raise RunError("the material player needs a run directory (the baseline is fitted on its "
                           "training split)")
        return open_network(checkpoint=checkpoint, mirror_average=mirror_average)
    model = Path(model)
    if not model.exists():
        raise RunError(f"{model}: no such run directory or model file")
    is_onnx = model.is_file() and model.suffix == ONNX_SUFFIX
    if kind == "material":
        if is_onnx:
            raise RunError(f"{model}: the material player needs the run directory (its training split)")
        return MaterialEvaluator(run_dir=run_files.check_run_dir(model), data_dir=data_dir)
    if is_onnx:
        return open_network(model=model)
    return open_network(run_dir=model, checkpoint=checkpoint, mirror_average=mirror_average)
