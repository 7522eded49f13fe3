"""A trained value network out of Python: ONNX (onnxruntime, any language) or a TensorFlow SavedModel.

The exported graph takes the compact inputs exactly as the training pipeline feeds the model and gives
the win probability of the side to move (the sigmoid applied; by default the mean over the position and
its left-right mirror, as evaluate and predict do; mirror_average=False: the model alone):

  input   board            [B, 81] uint8   piece codes, side to move's view (features.py docstring)
  input   hands            [B, 14] uint8   hand counts: own P L N S G B R, then the opponent's
  output  win_probability  [B]     float32 P(the side to move wins), in [0, 1]
  output  policy_logits    [B, 2187] float32 only for a model with a policy head (model.policy_head): the
                           move logits, label = direction * 81 + square in the side to move's view
                           (dataset/policy.py: 27 directions x 81 squares; softmax over them = the move's
                           probability, illegal labels included: mask them with the legal moves);
                           mirror-averaged (the default) they are log-probabilities, the log of the mean of
                           the two softmaxes (model.policy_logits)

B is dynamic (ONNX dim_param "batch") unless a fixed batch is asked for. The input planes (and the
attack planes of model.features = "attacks") are computed inside the graph, as in training.

Building the inputs from a position (features.encode_position does it in Python, TensorFlow-free):
  square i = 0..80 in SFEN order: rank a..i top to bottom, file 9..1 left to right,
             i = (rank - 1) * 9 + (9 - file) ('9a' = 0, '1a' = 8, '5e' = 40, '1i' = 80).
  code      0 empty; 1..14 a piece of the side to move, 15..28 (14 + t) the opponent's, with the piece
            type t = 1 P, 2 L, 3 N, 4 S, 5 G, 6 B, 7 R, 8 K, 9 +P, 10 +L, 11 +N, 12 +S, 13 +B, 14 +R.
  Black to move: board[i] = code of square i (Black's pieces "own"); hands = Black's 7 counts then White's.
  White to move: the board is rotated 180 degrees and the colours swapped, board[i] = code of square 80 - i
            with White's pieces "own"; hands = White's 7 counts then Black's.

ONNX: converted with tf2onnx (extra `export`) from a tf.function with an explicit input signature, opset
ONNX_OPSET (the attack planes use BitwiseAnd/BitwiseOr, ONNX operators since opset 18; keras'
model.export(format="onnx") refuses this functional model, and log-space mirror averaging would need
Log1p, which tf2onnx does not convert, so the graph averages the two probabilities directly).
Next to each export, `<path>.json` (SIDECAR_SUFFIX) describes the inputs and output (describe()) and
records the model's sha256 (MODEL_DIGEST); export_model replaces the two as one unit, check_pair
verifies that a sidecar describes the model beside it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from shogi_dnn import __version__
from shogi_dnn.config import ModelConfig
from shogi_dnn.dataset import features, shards
from shogi_dnn.dataset.policy import NUM_MOVE_LABELS
from shogi_dnn.errors import RunError, disk_full, is_disk_full
from shogi_dnn.folders import run_files
from shogi_dnn.rules import NUM_SQUARES
from shogi_dnn.training import model as model_lib

FORMATS = ("onnx", "savedmodel")
ONNX_OPSET = 18
OUTPUT = "win_probability"
POLICY_OUTPUT = "policy_logits"       # a model with a policy head only
BATCH_DIM = "batch"                   # ONNX name of the dynamic batch dimension
SIDECAR_SUFFIX = ".json"
SIGNATURE = "serving_default"         # the SavedModel's signature
MODEL_DIGEST = "model_sha256"         # the sidecar's key for model_digest(export)


def default_path(run_dir: Path, fmt: str) -> Path:
    """RUN/export/model.onnx or RUN/export/saved_model (run_files.EXPORT_DIR)."""
    return run_files.export_path(run_dir, fmt)


def sidecar_path(path: Path) -> Path:
    """The description written next to an export: model.onnx -> model.onnx.json."""
    return path.with_name(path.name + SIDECAR_SUFFIX)


def serving_function(model: keras.Model, batch: int | None = None, mirror_average: bool = True):
    """tf.function (board [B, 81] uint8, hands [B, 14] uint8) -> {OUTPUT: [B] float32 probability}, and
    POLICY_OUTPUT: [B, 2187] float32 for a model with a policy head."""
    with_policy = model_lib.has_policy_head(model)

    def outputs(raw, mirrored: bool) -> dict[str, tf.Tensor]:
        value = raw[model_lib.OUTPUT_VALUE] if with_policy else raw
        p = tf.reshape(tf.sigmoid(tf.cast(value, tf.float32)), (2, -1) if mirrored else (-1,))
        out = {OUTPUT: (p[0] + p[1]) / 2 if mirrored else p}
        if with_policy:
            logits = tf.cast(raw[model_lib.OUTPUT_POLICY], tf.float32)
            out[POLICY_OUTPUT] = model_lib.average_policy(logits) if mirrored else logits
        return out

    signature = [tf.TensorSpec((batch, NUM_SQUARES), tf.uint8, name=model_lib.INPUT_BOARD),
                 tf.TensorSpec((batch, features.HAND_SIZE), tf.uint8, name=model_lib.INPUT_HANDS)]

    @tf.function(input_signature=signature)
    def serve(board, hands):
        if not mirror_average:
            inputs = {model_lib.INPUT_BOARD: board, model_lib.INPUT_HANDS: hands}
            return outputs(model(inputs, training=False), False)
        both = {model_lib.INPUT_BOARD: tf.concat([board, model_lib.mirror_board(board)], axis=0),
                model_lib.INPUT_HANDS: tf.concat([hands, hands], axis=0)}
        return outputs(model(both, training=False), True)

    return serve, signature


def export_onnx(model: keras.Model, path: Path, batch: int | None = None,
                mirror_average: bool = True) -> Path:
    """Write the model as ONNX (opset ONNX_OPSET) to `path` (as it is: export_model writes it to a temp
    name and renames it with its sidecar). Raises RunError if tf2onnx/onnx are not installed."""
    try:
        import tf2onnx
    except ImportError as exc:
        raise RunError(f"ONNX export needs tf2onnx and onnx: pip install 'shogi-dnn[export]' "
                       f"({exc})") from exc
    serve, signature = serving_function(model, batch, mirror_average)
    proto, _ = tf2onnx.convert.from_function(serve, input_signature=signature, opset=ONNX_OPSET)
    if batch is None:
        for value in list(proto.graph.input) + list(proto.graph.output):
            dim = value.type.tensor_type.shape.dim[0]
            dim.Clear()
            dim.dim_param = BATCH_DIM
    path.write_bytes(proto.SerializeToString())
    return path


CALIBRATION_BATCH = 64                # positions per calibration batch of the int8 quantizer


CALIBRATION_POSITIONS = 2048          # int8 calibration: positions from the dataset's validation split


def calibration_positions(data_dir: Path,
                          count: int = CALIBRATION_POSITIONS) -> tuple[np.ndarray, np.ndarray]:
    """(board [N, 81] uint8, hands [N, 14] uint8): the first `count` positions of the dataset's validation
    split (its training split when it has none), for quantize_onnx's activation ranges.

    Raises:
        RunError / ShardFormatError: no readable dataset there (one line).
    """
    manifest = shards.read_manifest(data_dir)
    infos = manifest.split("validation") or manifest.split("train")
    boards, hands, have = [], [], 0
    for info in infos:
        rows = shards.read_positions(manifest.shard_path(info),
                                     keys=(shards.KEY_BOARD, shards.KEY_HANDS)).arrays
        boards.append(rows[shards.KEY_BOARD][:count - have])
        hands.append(rows[shards.KEY_HANDS][:count - have])
        have += len(boards[-1])
        if have >= count:
            break
    if not have:
        raise RunError(f"{data_dir}: no positions to calibrate the int8 export on")
    return np.concatenate(boards), np.concatenate(hands)


def quantize_onnx(path: Path, out: Path, board: np.ndarray, hands: np.ndarray) -> Path:
    """Write an int8 copy of the ONNX model at `path` to `out`: onnxruntime's static quantization (QDQ
    format, weights int8 per output channel, activations uint8) of the convolutions, the activation ranges
    calibrated on real positions (board [N, 81] uint8, hands [N, 14] uint8; a few thousand suffice).
    Everything else stays float: the plane expansion, the value head's dense layers (quantized too, they
    cost a 3x32 network 1.1 points of held-out accuracy; the convolutions alone cost none: docs/accuracy.md),
    the mirror average, the sigmoid.

    Raises:
        RunError: onnxruntime's quantization tools are not installed, or no calibration positions.
    """
    try:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as exc:
        raise RunError(f"--quantize int8 needs onnxruntime: pip install 'shogi-dnn[export]' ({exc})") from exc
    if len(board) == 0:
        raise RunError("--quantize int8 needs calibration positions (the dataset's validation or training "
                       "split)")

    class Positions(CalibrationDataReader):
        def __init__(self) -> None:
            self.starts = iter(range(0, len(board), CALIBRATION_BATCH))

        def get_next(self) -> dict[str, np.ndarray] | None:
            start = next(self.starts, None)
            if start is None:
                return None
            stop = start + CALIBRATION_BATCH
            return {model_lib.INPUT_BOARD: board[start:stop], model_lib.INPUT_HANDS: hands[start:stop]}

    prepared = out.with_name(out.name + ".pre")
    try:
        quant_pre_process(str(path), str(prepared), skip_symbolic_shape=True)
        quantize_static(str(prepared), str(out), Positions(), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["Conv"], per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    finally:
        prepared.unlink(missing_ok=True)
    return out


def export_savedmodel(model: keras.Model, path: Path, batch: int | None = None,
                      mirror_average: bool = True) -> Path:
    """Write a TensorFlow SavedModel directory at `path` with the signature SIGNATURE (board, hands ->
    OUTPUT, and POLICY_OUTPUT for a policy model)."""
    serve, _ = serving_function(model, batch, mirror_average)
    module = tf.Module()
    module.model = model               # tracks the weights
    module.serve = serve
    try:
        tf.saved_model.save(module, str(path), signatures={SIGNATURE: serve})
    except tf.errors.OpError as exc:   # TensorFlow's own I/O errors (permission, full disk): one line
        if is_disk_full(exc):
            raise disk_full(path) from exc
        raise RunError(f"{path}: cannot write the SavedModel ({str(exc).strip().splitlines()[0]})") from exc
    return path


def model_digest(path: Path) -> str:
    """sha256 of an export: of the ONNX file's bytes; of a SavedModel folder, of every file's relative
    path and bytes in sorted order. The sidecar records it (MODEL_DIGEST), so a pair can be checked."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if file != path:
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def check_pair(path: str | Path) -> dict[str, Any]:
    """The sidecar of the export at `path`, after checking it describes that very model (its
    MODEL_DIGEST). Raises RunError when the sidecar is missing or belongs to another export."""
    path = Path(path)
    info = run_files.read_json(sidecar_path(path))
    recorded = info.get(MODEL_DIGEST)
    if not path.exists():
        raise RunError(f"{path}: missing (its sidecar {sidecar_path(path).name} is there)")
    if recorded != model_digest(path):
        raise RunError(f"{sidecar_path(path)}: describes another export than {path.name} "
                       f"({MODEL_DIGEST} differs); export again")
    return info


def describe(fmt: str, path: Path, cfg: ModelConfig, batch: int | None, mirror_average: bool,
             source: str = "") -> dict[str, Any]:
    """The sidecar: what the export takes and gives, in the words of this module's docstring."""
    shape = batch if batch is not None else BATCH_DIM
    info: dict[str, Any] = {
        "format": fmt,
        "file": path.name,
        "source": source,
        "shogi_dnn_version": __version__,
        "model": {"blocks": cfg.blocks, "filters": cfg.filters, "features": cfg.features,
                  "value_head": cfg.value_head, "policy_head": cfg.policy_head, "block": cfg.block},
        "inputs": [
            {"name": model_lib.INPUT_BOARD, "dtype": "uint8", "shape": [shape, NUM_SQUARES],
             "meaning": "piece codes from the side to move's view: 0 empty, 1..14 own piece type t "
                        "(1 P 2 L 3 N 4 S 5 G 6 B 7 R 8 K 9 +P 10 +L 11 +N 12 +S 13 +B 14 +R), 15..28 "
                        "opponent piece 14 + t; square i = (rank - 1) * 9 + (9 - file) (9a = 0, 1i = 80); "
                        "White to move: board rotated 180 degrees (square 80 - i) and colours swapped"},
            {"name": model_lib.INPUT_HANDS, "dtype": "uint8", "shape": [shape, features.HAND_SIZE],
             "meaning": "pieces in hand: the side to move's P L N S G B R counts, then the opponent's"},
        ],
        "outputs": [{"name": OUTPUT, "dtype": "float32", "shape": [shape],
                     "meaning": "probability that the side to move wins"
                                + (" (mean over the position and its left-right mirror)" if mirror_average
                                   else "")}]
        + ([{"name": POLICY_OUTPUT, "dtype": "float32", "shape": [shape, NUM_MOVE_LABELS],
             "meaning": "move logits, label = direction * 81 + square, side to move's view (27 directions "
                        "x 81 squares: shogi_dnn/dataset/policy.py); softmax over them is the move's "
                        "probability"
                        + (" (log of the mean over the position and its mirror, labels mapped back)"
                           if mirror_average else "")}] if cfg.policy_head else []),
        "mirror_average": mirror_average,
        "encoding": "shogi_dnn.dataset.features.encode_position(shogi_dnn.rules.position_from_sfen(sfen)) "
                    "-> (board, hands) "
                    "(position_from_sfen refuses a position no game reaches); "
                    "layout in shogi_dnn/dataset/features.py and shogi_dnn/training/export.py docstrings",
    }
    if fmt == "onnx":
        info["opset"] = ONNX_OPSET
    else:
        info["signature"] = SIGNATURE
    return info


def export_model(model: keras.Model, cfg: ModelConfig, fmt: str, path: Path, batch: int | None = None,
                 mirror_average: bool = True, source: str = "",
                 calibration: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Path, Path]:
    """Export in `fmt` ("onnx" | "savedmodel") to `path` and write its sidecar; (path, sidecar path).

    The two are replaced as one unit (run_files.atomic_pair): both are written into a temp folder beside
    `path` first (an error or an interrupt there leaves the previous pair as it was, and the temp folder
    removed); then the old sidecar is removed, the model renamed into place and the new sidecar after it,
    so a reader never finds a new model beside an old sidecar (in the instant between the renames, no
    sidecar at all). The sidecar records the model's sha256 (MODEL_DIGEST): check_pair verifies a pair.
    calibration: (board, hands) positions: the ONNX export is quantized to int8 (quantize_onnx) and the
    sidecar's "quantized" says so.
    """
    if fmt not in FORMATS:
        raise RunError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")
    path = Path(path)
    sidecar = sidecar_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with run_files.atomic_pair(path, sidecar) as (new_model, new_sidecar):     # a full disk: one line
        if fmt == "onnx" and calibration is not None:
            full = new_model.with_name(new_model.name + ".float")
            export_onnx(model, full, batch, mirror_average)
            quantize_onnx(full, new_model, *calibration)
            full.unlink()
        elif fmt == "onnx":
            export_onnx(model, new_model, batch, mirror_average)
        else:
            export_savedmodel(model, new_model, batch, mirror_average)
        info = describe(fmt, path, cfg, batch, mirror_average, source)
        if calibration is not None:
            info["quantized"] = (f"int8: the convolutions (onnxruntime static QDQ, per-channel weights), "
                                 f"calibrated on {len(calibration[0]):,} positions")
        info[MODEL_DIGEST] = model_digest(new_model)
        run_files.write_json_atomic(new_sidecar, info)
    return path, sidecar
