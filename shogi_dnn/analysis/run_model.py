"""Loading a run's model for inference with no more than that needs (TensorFlow, Keras, training/model.py;
the checkpoint reader only without model.keras). MIRROR_AVERAGE is the one default of mirror averaging.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files

# Whether a run's model is scored as the mean over each position and its left-right mirror unless told
# otherwise: evaluate, predict, export and usi, their commands and their Python functions alike.
MIRROR_AVERAGE = True


def load_run_model(run_dir: Path, checkpoint: str | None = None) -> Any:
    """The run's model: a checkpoint if named, else RUN/model.keras, else the latest checkpoint.

    Call inside strategy.scope() to place the weights on every tower. Raises RunError (one line).
    """
    import_keras_lean()
    from shogi_dnn.training import model as model_lib  # registers the model's custom layers

    final = Path(run_dir) / run_files.MODEL_FILE
    if checkpoint is None and final.is_file():
        return model_lib.load_model(final)
    try:
        from shogi_dnn.training import checkpoints
    except ImportError as exc:
        raise RunError(f"{run_dir}: no {run_files.MODEL_FILE} and checkpoints are not readable "
                       f"by this version ({exc})") from exc
    return checkpoints.restore_model(Path(run_dir), checkpoint)


def load_predictor(run_dir: Path, checkpoint: str | None = None,
                   mirror_average: bool = MIRROR_AVERAGE) -> Any:
    """The run's model as `shogi-dnn predict` calls it (analysis/predict.py): mirror-averaged
    (training.model.mirror_averaged) unless `mirror_average` is False."""
    model = load_run_model(run_dir, checkpoint)
    if not mirror_average:
        return model
    from shogi_dnn.training.model import mirror_averaged

    return mirror_averaged(model)


def model_name(run_dir: Path, checkpoint: str | None = None) -> str:
    """What load_run_model will load, named without importing TensorFlow (for a progress line)."""
    if checkpoint:
        return f"checkpoint {checkpoint}"
    final = Path(run_dir) / run_files.MODEL_FILE
    return str(final) if final.is_file() else "the latest checkpoint"


# Optional imports of Keras that inference never uses (a notebook display of its file editor, an image
# gallery plot): ~0.7 s of predict's cold start. Keras imports each inside `try: ... except ImportError`.
_NOT_NEEDED = ("IPython", "matplotlib.pyplot")


def import_keras_lean() -> None:
    """Import Keras (and TensorFlow) without the optional modules inference does not use; a no-op when
    Keras is already imported. Those modules stay importable afterwards."""
    if "keras" in sys.modules:
        return
    blocked = [name for name in _NOT_NEEDED if name not in sys.modules]
    for name in blocked:
        # `import name` raises ImportError while this is set (the import system's documented None entry,
        # which typeshed's dict[str, ModuleType] does not allow)
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import keras  # noqa: F401
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
