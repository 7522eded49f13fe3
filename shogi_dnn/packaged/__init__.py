"""The network shipped with shogi-dnn, so that `shogi-dnn usi` and `shogi-dnn predict` work on a fresh install
before any training: a value + policy network trained on the project's own Fairy-Stockfish self-play corpus
(MODEL_CARD.md beside the files says on what, with which command, and what it scores on held-out games).

The files are package data in `shogi_dnn/packaged/<NAME>/`, laid out as a run directory that holds only
its model, so every command that reads a run's model reads this one too:

  file               read by                          what
  model.keras        predict; usi without onnxruntime  the Keras model (folders/run_files.MODEL_FILE)
  model.onnx         usi (no TensorFlow)               its ONNX export, mirror-averaged
  model.onnx.json    usi                               the export's sidecar (training/export.py)
  trained-games.npz  predict                           keys of the games it trained on (dataset/game_keys)
  MODEL_CARD.md      the user                          data, command, held-out figures

TensorFlow-free: this module only finds and checks the files (present, not empty, the right container);
loading them is the model readers' work.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from shogi_dnn.errors import RunError

NAME = "fairy-medium"
TRAINED_ON = "one engine's self-play (Fairy-Stockfish, 2,677 games)"   # what MODEL_CARD.md says it learned
KERAS_FILE, ONNX_FILE, ONNX_SIDECAR = "model.keras", "model.onnx", "model.onnx.json"
CARD_FILE, TRAINED_GAMES_FILE = "MODEL_CARD.md", "trained-games.npz"
# An ONNX file is a protobuf ModelProto; its first field (ir_version, field 1, varint) starts with 0x08.
_ONNX_FIRST_BYTE = 0x08


def model_dir(root: Path | None = None) -> Path:
    """The packaged model's folder (root: where the packaged models live; default beside this module)."""
    return (root or Path(__file__).resolve().parent) / NAME


def describe(root: Path | None = None) -> str:
    """How a console line names the packaged model: `the packaged model fairy-medium (.../MODEL_CARD.md)`."""
    return f"the packaged model {NAME} ({model_dir(root) / CARD_FILE})"


def model_file(kind: str, root: Path | None = None) -> Path:
    """The packaged model's file of `kind` ("keras" or "onnx"), checked for presence and its container.

    Raises:
        RunError: the file is missing, empty or not a Keras zip / ONNX protobuf (one line, naming it).
    """
    name = {"keras": KERAS_FILE, "onnx": ONNX_FILE}[kind]
    path = model_dir(root) / name
    hint = "reinstall shogi-dnn, or name a model: --run-dir RUN or --model FILE.onnx"
    if not path.is_file():
        raise RunError(f"{path}: the packaged model's {name} is missing ({hint})")
    try:
        with path.open("rb") as handle:
            first = handle.read(1)
    except OSError as exc:
        raise RunError(f"{path}: the packaged model's {name} is not readable "
                       f"({exc.strerror}; {hint})") from exc
    damaged = (not first or (kind == "keras" and not zipfile.is_zipfile(path))
               or (kind == "onnx" and first[0] != _ONNX_FIRST_BYTE))
    if damaged:
        raise RunError(f"{path}: the packaged model's {name} is damaged ({hint})")
    return path
