"""A full disk while training or reporting: checkpoint save, final model save, metrics.jsonl, RUN JSON
files and report.md are each one line naming the path and the space, leave no partial file, and
--resume (with space again) finishes identically to an uninterrupted run. Fault injection at the lowest
write seam each uses (TensorFlow's checkpoint writer, Keras' save, the file's write)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from shogi_dnn.errors import DiskFullError
from shogi_dnn.folders import run_files
from shogi_dnn.training import checkpoints
from tests.support.shardgen import make_dataset
from tests.training.test_trainer import deterministic, make_trainer, tiny_config  # noqa: F401 - fixture

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    make_dataset(root, train=[200, 160, 180], validation=[100], chunk_rows=32)
    return root


def _run(data: Path, run_dir: Path, resume: bool = False) -> list[np.ndarray]:
    trainer = make_trainer(tiny_config(), data, run_dir, 1, resume=resume)
    trainer.run()
    return [v.numpy() for v in trainer.steps.model.weights]


def test_checkpoint_and_model_save_on_a_full_disk_then_resume_is_identical(
        data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        deterministic: None) -> None:  # noqa: F811
    reference = _run(data, tmp_path / "reference")
    run = tmp_path / "run"
    real_write, writes = tf.train.Checkpoint.write, []

    def write(self, prefix, *args, **kwargs):            # the 3rd checkpoint hits a full disk mid-write
        writes.append(prefix)
        path = real_write(self, prefix, *args, **kwargs)
        if len(writes) == 3:
            raise tf.errors.ResourceExhaustedError(None, None,
                                                   f"{prefix}.data-00000-of-00001; No space left on device")
        return path
    monkeypatch.setattr(tf.train.Checkpoint, "write", write)
    with pytest.raises(DiskFullError, match=r"checkpoints/ckpt-0000000\d: disk full \(needs about "
                                            r"[\d.,]+ KiB, [\d.,]+ [KMG]iB free on") as info:
        _run(data, run)
    assert "\n" not in str(info.value)
    assert not list((run / "checkpoints").glob(".tmp-*")) and len(checkpoints.list_checkpoints(run)) == 2
    monkeypatch.setattr(tf.train.Checkpoint, "write", real_write)

    import keras

    def save(self, path, *args, **kwargs):               # the final model: a partial file, then ENOSPC
        Path(path).write_bytes(b"PK\x03\x04partial")
        raise ENOSPC
    monkeypatch.setattr(keras.Model, "save", save)
    with pytest.raises(DiskFullError, match=r"model.keras: disk full \(needs about [\d.,]+ KiB"):
        _run(data, run, resume=True)
    assert not (run / "model.keras").exists() and not list(run.glob(".tmp-*"))
    monkeypatch.undo()
    (run / f".tmp-99999-{run_files.MODEL_FILE}").write_bytes(b"")      # a killed run's 0-byte model save
    resumed = _run(data, run, resume=True)
    assert not list(run.glob(".tmp-*")) and (run / "model.keras").is_file()
    for a, b in zip(reference, resumed, strict=True):
        np.testing.assert_array_equal(a, b)
    steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if r["kind"] == "train"]
    ref_steps = [r["step"] for r in map(json.loads, (tmp_path / "reference" / "metrics.jsonl").read_text()
                                        .splitlines()) if r["kind"] == "train"]
    assert steps == ref_steps


def test_metrics_line_on_a_full_disk_leaves_no_torn_line(data: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real_open, calls = Path.open, []

    class HalfWrite:                  # the file object: half the line reaches the disk, then ENOSPC
        def __init__(self, f):
            self.f = f

        def write(self, text):
            self.f.write(text[: len(text) // 2])
            self.f.flush()
            raise ENOSPC

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def open_(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if path.name == "metrics.jsonl" and mode == "a":
            calls.append(path)
            if len(calls) == 2:
                return HalfWrite(f)
        return f
    monkeypatch.setattr(Path, "open", open_)
    with pytest.raises(DiskFullError, match=r"metrics.jsonl: disk full \(needs about [\d.]+ KiB"):
        _run(data, tmp_path / "run")
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["step"] == 2       # the torn second line is gone


def test_json_and_report_writes_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "eval-test.json"
    target.write_text('{"old": true}\n')
    real = Path.write_text

    def full(self, *args, **kwargs):
        real(self, "{\"partial", encoding="utf-8")
        raise ENOSPC
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(DiskFullError,
                       match=r"eval-test.json: disk full \(needs about [\d.]+ KiB, .* free on"):
        run_files.write_json_atomic(target, {"x": 1})
    with pytest.raises(DiskFullError, match=r"report.md: disk full"):
        with run_files.atomic_path(tmp_path / "report.md", needed=10) as tmp:
            tmp.write_text("partial")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval-test.json"]
    assert json.loads(target.read_text()) == {"old": True}


def test_tensorboard_write_on_a_full_disk_is_one_line(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorflow as tf

    from shogi_dnn.training.run_log import MetricsLog
    from tests.support.metricsgen import write_metrics

    (tmp_path / "src").mkdir()
    record = json.loads(write_metrics(tmp_path / "src", gpus=1, steps=2).read_text().splitlines()[0])
    log = MetricsLog(tmp_path / "run", write_files=True)

    def full():
        raise tf.errors.ResourceExhaustedError(None, None, "tb/events.out: No space left on device")
    monkeypatch.setattr(log.writer, "flush", full)
    with pytest.raises(DiskFullError, match=r"tb: disk full") as info:
        log.write(record)
    assert "\n" not in str(info.value)
