"""Atomic training checkpoints in RUN/checkpoints, and the final model for evaluation.

Layout of one checkpoint (a directory, renamed into place only when complete, so a crash during a
save never leaves a half-written checkpoint that looks valid):

  RUN/checkpoints/ckpt-00001200/
      weights.index, weights.data-*   tf.train.Checkpoint(model=..., optimizer=...): the model's
                                      weights and the optimizer state (iterations, slots, loss scale)
      state.json                      {"state": TrainState, "config": resolved Config, "saved": time,
                                       "dataset": the identity of the data it was trained on (identity.py)}

Only the last `keep` checkpoints are kept. A checkpoint restores onto any number of towers: the
variables are mirrored, their saved values are per variable, not per device.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from shogi_dnn.config import Config, from_dict
from shogi_dnn.errors import RunError, ShogiDnnError, disk_full
from shogi_dnn.folders.run_files import (
    CHECKPOINT_STATE,
    CHECKPOINT_WEIGHTS,
    CHECKPOINTS_DIR,
    KEY_DATASET,
    MODEL_FILE,
    atomic_path,
    checkpoint_name,
    find_checkpoint,
    list_checkpoints,
    remove_stale_temp_files,
    write_json_atomic,
)
from shogi_dnn.training import memory
from shogi_dnn.training.stages import TrainState


def read_state(path: Path) -> tuple[TrainState, Config]:
    """The TrainState and resolved Config stored in a checkpoint directory."""
    origin = str(path / CHECKPOINT_STATE)
    try:
        raw = json.loads((path / CHECKPOINT_STATE).read_text(encoding="utf-8"))
        return TrainState.from_dict(raw["state"], origin), from_dict(raw["config"], origin=origin)
    except ShogiDnnError:
        raise                    # already one line naming the file (RunError, ConfigError)
    # also bad UTF-8, non-dict JSON
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RunError(f"{origin}: unreadable checkpoint state ({_first_line(exc)})") from exc


def read_dataset(path: Path) -> dict[str, Any] | None:
    """The dataset identity a checkpoint records (identity.DatasetIdentity's JSON), None when it records
    none (saved before checkpoints recorded one). Raises RunError when state.json is unreadable."""
    origin = path / CHECKPOINT_STATE
    try:
        raw = json.loads(origin.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{origin}: unreadable checkpoint state ({_first_line(exc)})") from exc
    return raw.get(KEY_DATASET) if isinstance(raw, dict) else None


# What reading a damaged weights file can raise: besides OpError, a truncated weights.data-* raises
# IndexError ("Read less bytes than requested"), a mangled index ValueError/KeyError/...
_READ_ERRORS = (tf.errors.OpError, AssertionError, ValueError, IndexError, KeyError, TypeError, OSError,
                RuntimeError)


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name when it has none."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class CheckpointManager:
    """Saves, prunes and restores a run's checkpoints (model + optimizer + TrainState + config)."""

    def __init__(self, run_dir: Path, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 keep: int, dataset: dict[str, Any] | None = None) -> None:
        self.root = Path(run_dir) / CHECKPOINTS_DIR
        self.keep = keep
        self.dataset = dataset        # the identity of the data trained on, recorded in every state.json
        self.tracked = tf.train.Checkpoint(model=model, optimizer=optimizer)
        self.last_saved_step = -1
        for stale in self.root.glob(".tmp-ckpt-*"):     # saves cut short by a kill: never valid checkpoints
            shutil.rmtree(stale, ignore_errors=True)
        remove_stale_temp_files(Path(run_dir))          # and a final model save or JSON write cut short

    def save(self, state: TrainState, config: Config) -> Path:
        """Write a checkpoint atomically (temp directory, fsynced, then renamed: run_files.atomic_path) and
        drop the oldest beyond `keep`. A same step saved again (a stop right after a periodic save) replaces
        the earlier one."""
        self.root.mkdir(exist_ok=True)      # no parents: a run dir deleted under the run is an error
        final = self.root / checkpoint_name(state.step)
        needed = self._size_estimate()
        try:            # nothing half-written is left (a .tmp-ckpt-* is never restored anyway)
            with atomic_path(final, tmp=self.root / f".tmp-{final.name}-{os.getpid()}", needed=needed,
                             fsync=True) as tmp:
                tmp.mkdir()
                self.tracked.write(str(tmp / CHECKPOINT_WEIGHTS))
                state_json = {"state": state.to_dict(), "config": config.to_dict(),
                              "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
                if self.dataset is not None:
                    state_json[KEY_DATASET] = self.dataset
                write_json_atomic(tmp / CHECKPOINT_STATE, state_json, sort_keys=True)
        except tf.errors.ResourceExhaustedError:    # TensorFlow's writer: a full disk whatever its words
            raise disk_full(final, needed) from None
        self.last_saved_step = state.step
        for old in list_checkpoints(self.root.parent)[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _size_estimate(self) -> int | None:
        """Bytes a checkpoint takes: the newest one's size (None before the first)."""
        found = list_checkpoints(self.root.parent)
        return sum(p.stat().st_size for p in found[-1].rglob("*") if p.is_file()) if found else None

    def restore(self, path: Path) -> TrainState:
        """Load weights and optimizer state from a checkpoint (optimizer already built). Returns its state."""
        try:
            self.tracked.read(str(path / CHECKPOINT_WEIGHTS)).assert_existing_objects_matched()
        except _READ_ERRORS as exc:
            raise RunError(f"{path}: cannot restore ({_first_line(exc)})") from exc
        self.last_saved_step = read_state(path)[0].step
        return read_state(path)[0]


def restore_model(run_dir: str | Path, checkpoint: str | None = None) -> keras.Model:
    """The model of a run's checkpoint (None = the latest), for evaluate --checkpoint.

    The architecture comes from the checkpoint's stored config. Raises RunError when missing.
    """
    from shogi_dnn.training.model import build_model

    path = find_checkpoint(Path(run_dir), checkpoint)
    _, config = read_state(path)
    memory.check_model_size(config.model)      # a checkpoint's config, before any allocation
    model = build_model(config.model)
    try:
        tf.train.Checkpoint(model=model).read(str(path / CHECKPOINT_WEIGHTS)).expect_partial()
    except _READ_ERRORS as exc:
        raise RunError(f"{path}: cannot restore the model ({_first_line(exc)})") from exc
    return model


def save_model(model: keras.Model, run_dir: Path) -> Path:
    """Save RUN/model.keras atomically (Keras format; load with model.load_model)."""
    final = Path(run_dir) / MODEL_FILE
    needed = sum(int(v.numpy().nbytes) for v in model.weights)
    try:
        with atomic_path(final, tmp=final.with_name(f".tmp-{os.getpid()}-{MODEL_FILE}"),
                         needed=needed) as tmp:
            model.save(tmp)
    except tf.errors.ResourceExhaustedError as exc:
        raise disk_full(final, needed) from exc
    return final
