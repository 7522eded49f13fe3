"""The run directory: the one owner of every RUN/ file name and its read/write helpers (no TensorFlow).
Also the one atomic write of the package (atomic_path and its forms write_atomic, write_json_atomic,
atomic_pair): a temp, then a rename; nothing partial on an error; a full disk is one line.

  file                          written by                  holds
  RUN/run.json                  training.trainer            data_dir, dataset (identity.py: the data
                                                            trained on), history (data changes on resume),
                                                            eval_target (evalfit.EvalTarget: λ, a, trust,
                                                            evalfit fit), devices, planned_steps
                                                            (the run's planned updates), ...
  RUN/trained-games.npz         dataset.game_keys           the games trained on (one key a game: evaluate
                                                            counts the scored games among them)
  RUN/config.json               training.trainer            the resolved Config (config.from_dict reads it)
  RUN/metrics.jsonl             training.run_log            one JSON object per line (kind train | validation)
  RUN/tb/                       training.run_log            TensorBoard events (rebuilt from metrics.jsonl)
  RUN/checkpoints/ckpt-NNNNNNNN training.checkpoints        state.json (TrainState, config, dataset),
                                                            weights.*
  RUN/model.keras               training.checkpoints        the final model (training.model.load_model)
  RUN/eval-<split>.json         analysis.evaluate           metrics, baselines, per-phase tables (the
                                                            run's dataset; another: eval_path)
  RUN/baselines.json            analysis.evaluate           baselines fitted on the training split (a cache)
  RUN/report.md, RUN/plots/     analysis.report             the report and its plots
  RUN/export/model.onnx(.json)  training.export             `shogi-dnn export`: ONNX model and its sidecar
  RUN/export/saved_model(.json) training.export             TensorFlow SavedModel directory and its sidecar
  RUN/writer.lock               commands.train (locks.py)   the writer's lock: command, pid, host, start time
  RUN/workerI/                  training.cluster            a cluster worker's own checkpoints (and its lock)

run.json "history": one entry per `train --resume --data-changed`: {time, event: "data changed", checkpoint,
command, from: the identity trained on until then, to: the new one} (identity.py's table).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shogi_dnn.config import Config, from_dict
from shogi_dnn.errors import (
    ConfigError,
    OutputError,
    RunError,
    disk_full,
    file_too_large,
    is_disk_full,
    is_file_too_large,
)
from shogi_dnn.folders import locks

log = logging.getLogger(__name__)

RUN_JSON = "run.json"
CONFIG_JSON = "config.json"
METRICS_JSONL = "metrics.jsonl"
MODEL_FILE = "model.keras"
CHECKPOINTS_DIR = "checkpoints"
EVAL_PREFIX = "eval-"
BASELINES_JSON = "baselines.json"     # evaluate's cache of the baselines fitted on the training split
TB_DIR = "tb"
REPORT_MD = "report.md"
PLOTS_DIR = "plots"
EXPORT_DIR = "export"                 # `shogi-dnn export`'s default folder
EXPORT_ONNX = "model.onnx"
EXPORT_SAVEDMODEL = "saved_model"
CHECKPOINT_STATE = "state.json"       # inside RUN/checkpoints/ckpt-NNNNNNNN/
CHECKPOINT_WEIGHTS = "weights"        # tf.train.Checkpoint prefix inside a checkpoint folder
WRITER_LOCK = locks.WRITER_LOCK       # the one writer's lock file
TRAINED_GAMES = "trained-games.npz"   # the keys of the games the run trained on (dataset/game_keys.py)
KEY_DATASET, KEY_HISTORY = "dataset", "history"     # run.json (and state.json) keys of the data identity
KEY_PLANNED_STEPS = "planned_steps"   # run.json: the optimizer updates the whole run plans (its last start)


def export_path(run_dir: str | Path, fmt: str) -> Path:
    """`shogi-dnn export`'s default output: RUN/export/model.onnx (fmt "onnx") or RUN/export/saved_model."""
    return Path(run_dir) / EXPORT_DIR / (EXPORT_ONNX if fmt == "onnx" else EXPORT_SAVEDMODEL)


def check_run_dir(run_dir: str | Path) -> Path:
    """The run directory as a Path. Raises RunError when it is missing or holds no run file."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunError(f"{path}: no such run directory")
    markers = (RUN_JSON, MODEL_FILE, CHECKPOINTS_DIR, METRICS_JSONL)
    if not any((path / m).exists() for m in markers):
        raise RunError(f"{path}: not a run directory (none of {', '.join(markers)})")
    return path


_CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{8,})$")


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run (RUN/checkpoints/ckpt-NNNNNNNN holding state.json), oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _CHECKPOINT_NAME.match(p.name) and (p / CHECKPOINT_STATE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[1]))


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:08d}"


def find_checkpoint(run_dir: Path, checkpoint: str | None = None) -> Path:
    """The latest checkpoint (None), or one named "ckpt-00000012", "12" or by path. Raises RunError."""
    found = list_checkpoints(run_dir)
    if checkpoint is None:
        if not found:
            raise RunError(f"{run_dir}: no checkpoint in {Path(run_dir) / CHECKPOINTS_DIR}")
        return found[-1]
    candidates = [Path(checkpoint), Path(run_dir) / CHECKPOINTS_DIR / checkpoint]
    if checkpoint.isdigit():
        candidates.append(Path(run_dir) / CHECKPOINTS_DIR / checkpoint_name(int(checkpoint)))
    for path in candidates:
        if (path / CHECKPOINT_STATE).is_file():
            return path
    names = ", ".join(p.name for p in found) or "none"
    raise RunError(f"{run_dir}: no checkpoint {checkpoint!r} (have: {names})")


@dataclasses.dataclass(frozen=True)
class CheckpointProgress:
    """Where a checkpoint stands in its run: the updates and epochs done against the run's plan."""

    name: str
    step: int
    samples: int
    epoch: int
    epochs: int
    planned_steps: int | None       # run.json's planned_steps (None: not recorded)
    run_finished: bool = False      # the run has its final model (model.keras): it went on past this one

    @property
    def finished(self) -> bool:
        """Whether the checkpoint is the end of the run (every planned epoch done)."""
        return self.epoch >= self.epochs

    def text(self) -> str:
        """'checkpoint ckpt-00000398 at step 398 of 3,316 (25,472 samples, epoch 0 of 3): the run is ...'."""
        planned = (f"of {self.planned_steps:,} " if self.planned_steps else "")
        where = f"step {self.step:,} {planned}({self.samples:,} samples, epoch {self.epoch} of {self.epochs})"
        state = ("the run's end" if self.finished else
                 f"an earlier checkpoint (the run's final model is {MODEL_FILE})" if self.run_finished else
                 "the run is unfinished")
        return f"checkpoint {self.name} at {where}: {state}"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "finished": self.finished}


def checkpoint_progress(run_dir: str | Path, checkpoint: Path) -> CheckpointProgress:
    """The progress of a checkpoint folder. Raises RunError when its state.json is unreadable."""
    path = checkpoint / CHECKPOINT_STATE
    raw = read_json(path)
    try:
        state, epochs = raw["state"], raw["config"]["train"]["epochs"]
        planned = read_run_json(run_dir).get(KEY_PLANNED_STEPS)
        return CheckpointProgress(checkpoint.name, int(state["step"]), int(state["samples"]),
                                  int(state["epoch"]), int(epochs),
                                  int(planned) if isinstance(planned, int) else None,
                                  (Path(run_dir) / MODEL_FILE).is_file())
    except (KeyError, TypeError, ValueError) as exc:
        raise RunError(f"{path}: unreadable checkpoint state ({type(exc).__name__}: {exc})") from exc


def unfinished_checkpoint(run_dir: str | Path) -> CheckpointProgress | None:
    """The latest checkpoint of a run without model.keras when it is not the run's end, else None."""
    found = list_checkpoints(run_dir)
    if (Path(run_dir) / MODEL_FILE).is_file() or not found:
        return None
    progress = checkpoint_progress(run_dir, found[-1])
    return None if progress.finished else progress


def existing_run_message(run_dir: str | Path, latest: Path) -> str:
    """The refusal of a new run in a folder that already has checkpoints."""
    return (f"{run_dir} already has checkpoints (latest {latest.name}): add --resume to continue it, "
            f"or choose a new --run-dir")


def refuse_existing_run(run_dir: str | Path) -> None:
    """Raise RunError when a new run (no --resume) goes into a folder with a complete checkpoint."""
    existing = list_checkpoints(run_dir)
    if existing:
        raise RunError(existing_run_message(run_dir, existing[-1]))


_RUN_MARKERS = (RUN_JSON, CONFIG_JSON, METRICS_JSONL, CHECKPOINTS_DIR, MODEL_FILE, WRITER_LOCK, TRAINED_GAMES)
_WORKER_DIR = re.compile(r"^worker\d+$")     # a cluster worker's folder in a shared RUN (training.cluster)


def refuse_foreign_folder(run_dir: str | Path, flag: str = "--run-dir") -> None:
    """Raise RunError for a run folder that is neither new, empty, nor a shogi-dnn run."""
    path = Path(run_dir)
    if not path.is_dir():
        return
    names = sorted(p.name for p in path.iterdir())
    if not names or any(n in _RUN_MARKERS or _WORKER_DIR.match(n) for n in names):
        return
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    raise RunError(f"{flag} {path}: not empty and not a shogi-dnn run ({shown}; no {RUN_JSON}); "
                   f"choose an empty or new {flag}")


def lock_run_dir(run_dir: str | Path, command: str) -> locks.WriterLock:
    """Take the run directory's writer lock for `command`. Raises locks.LockedError when it is held."""
    return locks.acquire(run_dir, WRITER_LOCK, command, instead="choose another --run-dir")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file. Raises RunError (one line) if unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RunError(f"{path}: missing") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunError(f"{path}: corrupt JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise RunError(f"{path}: expected a JSON object")
    return data


def read_run_json(run_dir: str | Path) -> dict[str, Any]:
    """RUN/run.json ({} when the run has none, e.g. a bare model directory)."""
    path = check_run_dir(run_dir) / RUN_JSON
    return read_json(path) if path.exists() else {}


def read_config(run_dir: str | Path) -> Config:
    """RUN/config.json as a Config (defaults when absent). Raises RunError if it is invalid."""
    path = check_run_dir(run_dir) / CONFIG_JSON
    if not path.exists():
        return Config()
    try:
        return from_dict(read_json(path), origin=str(path))
    except ConfigError as exc:
        raise RunError(str(exc)) from exc


def data_dir(run_dir: str | Path, override: str | Path | None = None) -> Path:
    """The dataset folder: `override` if given, else run.json's data_dir. Raises RunError if neither."""
    if override is not None:
        return Path(override)
    recorded = read_run_json(run_dir).get("data_dir")
    if not recorded:
        raise RunError(f"{run_dir}/{RUN_JSON}: no data_dir recorded; pass --data DIR")
    return Path(recorded)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Records of RUN/metrics.jsonl, a truncated last line skipped. Raises RunError on a corrupt line."""
    path = check_run_dir(run_dir) / METRICS_JSONL
    if not path.is_file():
        raise RunError(f"{path}: missing (has the run logged anything?)")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                log.warning("%s:%d: skipping a truncated last line", path, number)
                continue
            raise RunError(f"{path}:{number}: corrupt JSON line ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise RunError(f"{path}:{number}: expected a JSON object")
        records.append(record)
    return records


EVAL_OTHER_DATA = "@"        # eval-<split>@<folder>-<hash>.json: a split of a dataset other than the run's


def eval_path(run_dir: str | Path, split: str, other_data: Path | None = None) -> Path:
    """RUN/eval-<split>.json, or RUN/eval-<split>@<folder>-<hash>.json for another dataset folder `other_data`
    (8 hex digits of its absolute path).
    """
    name = f"{EVAL_PREFIX}{split}"
    if other_data is not None:
        folder = Path(os.path.abspath(other_data))
        digest = hashlib.sha256(str(folder).encode("utf-8", "surrogateescape")).hexdigest()[:8]
        name += f"{EVAL_OTHER_DATA}{re.sub(r'[^A-Za-z0-9._-]', '_', folder.name)}-{digest}"
    return Path(run_dir) / f"{name}.json"


def is_own_data(run_dir: str | Path, data: str | Path) -> bool:
    """Whether the dataset folder `data` is the one run.json records (by absolute path)."""
    recorded = read_run_json(run_dir).get("data_dir")
    return not recorded or os.path.realpath(recorded) == os.path.realpath(data)


def read_evals(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Every RUN/eval-<split>.json of the run's own dataset, keyed by split."""
    path = check_run_dir(run_dir)
    return {p.stem[len(EVAL_PREFIX):]: read_json(p) for p in sorted(path.glob(f"{EVAL_PREFIX}*.json"))
            if EVAL_OTHER_DATA not in p.stem}


ALLOW_CHANGED_DATA = "--allow-changed-data"   # evaluate's and report's flag to proceed on changed data
ALLOW_TRAINED_GAMES = "--allow-trained-games"  # evaluate's flag to score games the run trained on (the old
                                               # --allow-changed-data is its alias)


def eval_labels(result: dict[str, Any]) -> list[str]:
    """The labels an eval-<split>.json's numbers need: TRAINED GAMES, DATA CHANGED and its "warnings"."""
    check = result.get("data_check") or {}
    status = check.get("status")
    changed = ([f"DATA CHANGED since training, scored with {ALLOW_CHANGED_DATA}: {check.get('detail')}"]
               if status == "changed" else
               [f"TRAINED GAMES scored, with {ALLOW_TRAINED_GAMES}: {check.get('detail')}"]
               if status == "overlap" else [])
    return [*changed, *unfinished_label(result), *in_sample_label(result),
            *(str(w) for w in result.get("warnings") or [])]


def unfinished_label(result: dict[str, Any]) -> list[str]:
    """'UNFINISHED RUN: ...' (or EARLIER CHECKPOINT) for an evaluation short of the run's end."""
    checkpoint = result.get("checkpoint")
    if not isinstance(checkpoint, dict) or checkpoint.get("finished") is not False:
        return []
    try:
        fields = {f.name: checkpoint[f.name] for f in dataclasses.fields(CheckpointProgress)}
        progress = CheckpointProgress(**fields)
    except (KeyError, TypeError):
        return [f"UNFINISHED RUN: checkpoint {checkpoint.get('name', '?')}: these are a partly trained "
                "model's scores"]
    head = "EARLIER CHECKPOINT" if progress.run_finished else "UNFINISHED RUN"
    return [f"{head}: {progress.text()}; these are a partly trained model's scores"]


IN_SAMPLE_SPLITS = ("train", "all")     # splits of the run's own dataset that hold its training games


def in_sample_label(result: dict[str, Any]) -> list[str]:
    """'IN-SAMPLE: 16 of these 19 games are games the run trained on ...' for the run's own training split."""
    split = result.get("split")
    status = (result.get("data_check") or {}).get("status")
    if split not in IN_SAMPLE_SPLITS or status in ("foreign", "overlap", "changed"):
        return []
    splits = (result.get(KEY_DATASET) or {}).get("splits") or {}
    trained, games = (splits.get("train") or {}).get("games"), result.get("games")
    known = isinstance(trained, int) and isinstance(games, int)
    counts = f"{trained:,} of these {games:,} games are" if known else "these games include"
    return [f"IN-SAMPLE: {counts} the run's training games (split {split}): not a held-out figure; score "
            "--split validation or test, or a held-out set with --data"]


def write_atomic(path: Path, data: str | bytes, *, tmp: Path | None = None, mode: int | None = None) -> Path:
    """Write text (UTF-8) or bytes to `path` through atomic_path; `mode`: the file's permission bits."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path, tmp=tmp, needed=len(payload)) as temp:
        if isinstance(data, str):
            temp.write_text(data, encoding="utf-8")
        else:
            temp.write_bytes(data)
        if mode is not None:
            os.chmod(temp, mode)
    return path


def write_json_atomic(path: Path, data: dict[str, Any], *, sort_keys: bool = False,
                      allow_nan: bool = True) -> Path:
    """Write JSON (indent 2, UTF-8) to `path` through write_atomic.

    Args:
        sort_keys: sort object keys.
        allow_nan: False for files other programs read as strict JSON.
    """
    text = json.dumps(data, indent=2, sort_keys=sort_keys, ensure_ascii=False, allow_nan=allow_nan) + "\n"
    return write_atomic(path, text, tmp=path.with_name(f".{path.name}.{os.getpid()}.tmp"))


_SPECIAL_FILES = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                  (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def refuse_special_file(path: str | Path, flag: str | None = None) -> None:
    """Raise OutputError for an existing `path` that is neither a regular file nor a folder (device, FIFO)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:             # absent (or unreadable): the write itself reports it
        return
    for test, kind in _SPECIAL_FILES:
        if test(mode):
            named = f"{flag} {path}" if flag else str(path)
            raise OutputError(f"{named}: {kind}, not a regular file or folder; shogi-dnn writes only files "
                              "and folders: choose another path")


@contextlib.contextmanager
def atomic_path(path: Path, *, tmp: Path | None = None, needed: int | None = None,
                fsync: bool = False) -> Iterator[Path]:
    """Write `path` (a file or a folder) through a temp path, yielded, renamed into place on success.

    A stale temp is removed first; on any error the temp is removed, and a full disk is a DiskFullError
    naming `path`, `needed` bytes and free. A folder replaces a folder through a rename aside.

    Args:
        tmp: the temp path, beside `path` (same filesystem); `path.tmp` by default.
        fsync: fsync every file under the temp, then the folder holding `path`, before the rename.
    """
    tmp = tmp or path.with_name(path.name + ".tmp")
    for checked in (path, tmp):
        refuse_special_file(checked)
    with _removed_on_error(tmp, path, needed):
        yield tmp
        if fsync:
            _fsync_tree(tmp)
        _move_into_place(tmp, path)
    if fsync:
        _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_pair(path: Path, companion: Path, *, staging: Path | None = None,
                needed: int | None = None) -> Iterator[tuple[Path, Path]]:
    """atomic_path for a file or folder and its companion file beside it (a model and its sidecar).

    Yields their temp paths in a staging folder beside `path`, removed at the end. On success the old
    companion is removed, then `path` and the companion are renamed in: a new `path` never sits beside an
    old companion.
    """
    staging = staging or path.with_name(f".{path.name}.{os.getpid()}.tmp")
    for checked in (path, companion, staging):
        refuse_special_file(checked)
    with _removed_on_error(staging, path, needed):
        staging.mkdir()
        new_path, new_companion = staging / path.name, staging / companion.name
        yield new_path, new_companion
        companion.unlink(missing_ok=True)
        _move_into_place(new_path, path)
        os.replace(new_companion, companion)
        _remove(staging)


@contextlib.contextmanager
def _removed_on_error(tmp: Path, path: Path, needed: int | None) -> Iterator[None]:
    """Remove a stale `tmp` now and `tmp` again on any error; a full disk becomes disk_full(path, needed)."""
    _remove(tmp)
    try:
        yield
    except BaseException as exc:
        _remove(tmp)
        if is_disk_full(exc):
            raise disk_full(path, needed) from None
        if is_file_too_large(exc):
            raise file_too_large(path, needed) from None
        raise


def _move_into_place(tmp: Path, path: Path) -> None:
    """Rename `tmp` to `path`; a folder over a folder goes through a rename of the old one aside."""
    if not (tmp.is_dir() and path.is_dir() and not path.is_symlink()):
        os.replace(tmp, path)
        return
    old = tmp.with_name(tmp.name + ".old")
    _remove(old)
    os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.replace(old, path)
        raise
    _remove(old)


def _remove(path: Path) -> None:
    """Remove a file or a folder tree if it is there (a link itself, not what it points to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    """Make a folder's entries (a rename, new files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsync a file, or every file under a folder and then the folder itself."""
    for path in [root] if root.is_file() else root.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    if root.is_dir():
        _fsync_dir(root)


def check_writable(folder: str | Path, flag: str, value: str | Path | None = None) -> Path:
    """Prove that files can be written in `folder` (a probe file, created and removed) before any work.

    Args:
        flag: the option that named the folder; value: what it said, when not `folder` itself.
    Raises:
        OutputError: `flag value: cannot write in folder (reason); choose a writable folder`.
    """
    folder = Path(folder)
    refuse_special_file(folder if value is None else value, flag)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{existing} is a file, not a folder")
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = "there" if value is None else f"in {folder}"
        raise OutputError(f"{flag} {folder if value is None else value}: cannot write {where} "
                          f"({exc.strerror or exc}); choose a writable folder") from exc
    return folder


def remove_stale_temp_files(run_dir: Path) -> list[Path]:
    """Remove the temp files a killed run left in RUN/ and return them."""
    run_dir = Path(run_dir)
    stale = [*run_dir.glob(f".tmp-*-{MODEL_FILE}"), *run_dir.glob(".*.tmp"),
             *run_dir.glob(f"{REPORT_MD}.tmp"), *(run_dir / PLOTS_DIR).glob("*.tmp")]
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale
