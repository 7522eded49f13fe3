"""`shogi-dnn train`: one-line config errors, the cpu-smoke preset on 1 and 4 simulated towers,
SIGTERM -> checkpoint + exit 0 + resume command (subprocess, bounded time)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.cli import main
from shogi_dnn.folders import run_files
from tests.support.cli import one_error_line, refusal_in_fresh_process
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset

SMOKE = str(REPO / "train" / "cpu-smoke.toml")


def _start_train(command: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@contextlib.contextmanager
def _train_logging(command: list[str], run: Path) -> Iterator[subprocess.Popen]:
    """A `train` process, yielded once it has logged (RUN/metrics.jsonl exists) and still runs; killed on
    the way out if it is still running then."""
    proc = _start_train(command)
    try:
        deadline = time.monotonic() + 240
        while not (run / "metrics.jsonl").is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    make_dataset(root, train=[300, 260, 280], validation=[120], chunk_rows=64)
    return root


@pytest.mark.parametrize("extra, message", [
    (["--set", "train.bogus=1"], "unknown key train.bogus"),
    (["--set", "optim.lr_scaling=cubic"], "must be one of none, linear, sqrt"),
    (["--set", "train.global_batch=30", "--simulate-devices", "4"], "30 is not divisible by 4 towers"),
    (["--set", "data.num_groups=20"], "data.num_groups = 20"),      # 840 rows: at most 13 groups of 64
])
def test_config_errors_are_one_line(capsys: pytest.CaptureFixture, dataset: Path, tmp_path: Path,
                                    extra: list[str], message: str) -> None:
    line = one_error_line(capsys, ["train", "--config", SMOKE, "--data", str(dataset),
                                   "--run-dir", str(tmp_path / "run"), *extra])
    assert message in line


def test_missing_data_and_config_are_one_line(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    line = one_error_line(capsys, ["train", "--config", SMOKE, "--data", str(tmp_path / "nowhere"),
                                   "--run-dir", str(tmp_path / "run")])
    assert "nowhere" in line and "manifest" in line
    line = one_error_line(capsys, ["train", "--config", str(tmp_path / "none.toml"), "--data", str(tmp_path),
                                   "--run-dir", str(tmp_path / "run")])
    assert "none.toml: no such config file" in line


def test_missing_data_is_refused_before_tensorflow_loads(tmp_path: Path) -> None:
    # `train --data nope` took 18.6 s to say "no manifest": the dataset is checked before TensorFlow starts.
    err = refusal_in_fresh_process(["train", "--config", SMOKE, "--data", str(tmp_path / "nope"),
                                    "--run-dir", str(tmp_path / "run")])
    assert "no manifest" in err


def test_finished_run_dir_is_refused_before_tensorflow_loads(dataset: Path, tmp_path: Path) -> None:
    # Training into a finished run took 30 s to refuse: the checkpoints are listed before TensorFlow starts.
    run = tmp_path / "run"
    for step in (4, 12):
        (run / "checkpoints" / f"ckpt-{step:08d}").mkdir(parents=True)
        (run / "checkpoints" / f"ckpt-{step:08d}" / "state.json").write_text("{}")
    (run / "checkpoints" / "ckpt-00000099").mkdir()             # no state.json: not a complete checkpoint
    err = refusal_in_fresh_process(["train", "--config", SMOKE, "--data", str(dataset), "--run-dir", str(run)])
    assert "already has checkpoints (latest ckpt-00000012): add --resume" in err


def test_a_folder_that_is_not_a_run_is_refused_before_tensorflow_loads(dataset: Path, tmp_path: Path) -> None:
    # `train --run-dir` on a copy of a root file system's top level wrote the run among bin/ and etc/.
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "hostname").write_text("box\n")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    err = refusal_in_fresh_process(["train", "--config", SMOKE, "--data", str(dataset),
                                    "--run-dir", str(root)])
    assert f"--run-dir {root}: not empty and not a shogi-dnn run (bin, etc; no run.json)" in err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before      # nothing written there


@pytest.mark.parametrize("names", [[], ["writer.lock"], ["run.json", "notes.txt"], ["worker1"]])
def test_an_empty_folder_or_a_run_is_not_refused(tmp_path: Path, names: list[str]) -> None:
    for name in names:
        (tmp_path / name).write_text("")
    run_files.refuse_foreign_folder(tmp_path)
    run_files.refuse_foreign_folder(tmp_path / "new")


def final_weights(run_dir: Path) -> list[np.ndarray]:
    from shogi_dnn.training.model import load_model

    return [v.numpy() for v in load_model(run_dir / "model.keras").weights]


@pytest.mark.slow
@pytest.mark.parametrize("precision,atol", [("none", 1e-5), ("mixed_bfloat16", 1e-2)])
def test_cpu_smoke_same_weights_on_1_and_4_towers(dataset: Path, tmp_path: Path, precision: str,
                                                  atol: float) -> None:
    """The global batch fixes the data and the loss: 1 and 4 towers reach the same weights, to float32's
    rounding, or to bfloat16's (its 8-bit mantissa rounds each tower's smaller sums otherwise)."""
    runs = {}
    for devices in (1, 4):
        run = tmp_path / f"run{devices}"
        assert main(["train", "--config", SMOKE, "--data", str(dataset), "--run-dir", str(run),
                     "--simulate-devices", str(devices), "--set", "train.max_steps_per_stage=3",
                     "--set", f"model.mixed_precision={precision}"]) == 0
        runs[devices] = final_weights(run)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert len(records[0]["per_gpu"]) == devices
        assert [r["kind"] for r in records].count("validation") == 2       # one per stage (2 groups)
    for a, b in zip(runs[1], runs[4]):
        np.testing.assert_allclose(a, b, rtol=1e-4 if precision == "none" else 0.0, atol=atol)


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_0(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_dataset(data, train=[20000, 20000], validation=[256], chunk_rows=512)
    run = tmp_path / "run"
    command = [sys.executable, "-m", "shogi_dnn", "train", "--config", SMOKE, "--data", str(data),
               "--run-dir", str(run), "--simulate-devices", "2", "--set", "train.max_steps_per_stage=0",
               "--set", "train.log_every_steps=1", "--set", "train.checkpoint_every_steps=0"]
    with _train_logging(command, run) as proc:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    tail = err[-3000:]
    assert proc.returncode == 0, tail
    assert "SIGTERM" in err and "--resume" in err and "Traceback" not in err, tail
    from shogi_dnn.training import checkpoints

    state, _ = checkpoints.read_state(checkpoints.find_checkpoint(run))
    assert 0 < state.step < 312 and state.stage == 0 and state.position == state.step * 64, (state, tail)
    assert not (run / "model.keras").exists()


def test_an_absurd_plan_is_one_line_at_once(capsys: pytest.CaptureFixture, dataset: Path,
                                            tmp_path: Path) -> None:
    """train.epochs = 10**12 (issue 31: no output for 10 minutes at 680 MB, deaf to SIGINT and SIGTERM):
    refused in one line naming the key and the limit, before TensorFlow, by `train` and by `plan`."""
    command = [sys.executable, "-m", "shogi_dnn", "train", "--config", SMOKE, "--data", str(dataset),
               "--run-dir", str(tmp_path / "run"), "--set", "train.epochs=1000000000000",
               "--set", "train.max_steps_per_stage=1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "train.epochs = 1000000000000 must be in (0, 1,000,000]" in out.stderr
    assert main(["plan", "--config", SMOKE, "--data", str(dataset), "--fit", "devices=1,v0=258,t=0.054",
                 "--set", "train.epochs=1000000000000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.epochs = 1000000000000 must be in (0, 1,000,000]" in err, err


def test_sigint_in_the_first_second_ends_train_in_one_line(dataset: Path, tmp_path: Path) -> None:
    """Ctrl-C before TensorFlow is up (nothing to save yet): `interrupted`, exit 130, no traceback."""
    command = [sys.executable, "-m", "shogi_dnn", "train", "--config", SMOKE, "--data", str(dataset),
               "--run-dir", str(tmp_path / "run"), "--set", "train.epochs=1000000"]
    proc = _start_train(command)
    try:
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)     # a hang guard: on a loaded machine it has taken over 60 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 130) and "Traceback" not in err, err[-2000:]


@pytest.mark.slow
def test_the_largest_plan_trains_and_stops_on_sigterm(dataset: Path, tmp_path: Path) -> None:
    """train.epochs = 1,000,000 (config.MAX_EPOCHS) of one-update stages: the plan is arithmetic, so the
    run starts like any other and SIGTERM after its first log line saves a checkpoint and exits 0."""
    run = tmp_path / "run"
    command = [sys.executable, "-m", "shogi_dnn", "train", "--config", SMOKE, "--data", str(dataset),
               "--run-dir", str(run), "--set", "train.epochs=1000000", "--set", "train.max_steps_per_stage=1",
               "--set", "train.log_every_steps=1"]
    with _train_logging(command, run) as proc:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "SIGTERM" in err and "Traceback" not in err, err[-3000:]
    from shogi_dnn.training import checkpoints

    assert checkpoints.read_state(checkpoints.find_checkpoint(run))[0].step >= 1


@pytest.mark.slow
def test_convert_overwrite_of_a_dataset_a_train_reads_is_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """Issue 31 with real processes: a running `train` holds its dataset as a reader, so `convert
    --overwrite` of it is one line naming that train (it used to replace the data under it); once the
    train has stopped, the conversion runs."""
    from tests.support.kifugen import write_corpus

    data = tmp_path / "data"
    make_dataset(data, train=[300, 260, 280], validation=[120], chunk_rows=64)
    write_corpus(tmp_path / "records", files=1, per_file=2)
    run = tmp_path / "run"
    command = [sys.executable, "-m", "shogi_dnn", "train", "--config", SMOKE, "--data", str(data),
               "--run-dir", str(run), "--set", "train.epochs=1000", "--set", "train.log_every_steps=1"]
    with _train_logging(command, run) as proc:
        convert = ["convert", str(tmp_path / "records"), "--out", str(data), "--overwrite", "--quiet"]
        assert main(convert) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{data} is being read by train, pid {proc.pid} on host" in err, err
        proc.send_signal(signal.SIGTERM)
        _, train_err = proc.communicate(timeout=120)
    assert proc.returncode == 0, train_err[-3000:]
    assert main(convert) == 0


def test_resume_into_a_folder_that_is_not_a_run_is_refused_and_writes_nothing(dataset: Path,
                                                                               tmp_path: Path) -> None:
    typo = tmp_path / "rnus" / "mine"
    err = refusal_in_fresh_process(["train", "--config", SMOKE, "--data", str(dataset), "--run-dir", str(typo),
                                    "--resume"])
    assert err.strip() == (f"shogi-dnn train: error: --resume: {typo}: no such run directory: nothing to resume; "
                           "check the path, or leave out --resume to start a new run")
    assert not (tmp_path / "rnus").exists()
    (tmp_path / "empty").mkdir()
    err = refusal_in_fresh_process(["train", "--config", SMOKE, "--data", str(dataset),
                                    "--run-dir", str(tmp_path / "empty"), "--resume"])
    assert "not a run (none of run.json, checkpoints, writer.lock): nothing to resume" in err
    assert not any((tmp_path / "empty").iterdir())


@pytest.mark.slow
def test_cpu_threads_give_the_same_run_whatever_the_machines_default(dataset: Path, tmp_path: Path) -> None:
    """train.cpu_threads fixes the threads of each CPU op: two runs whose TensorFlow default differs (1 and 3
    threads, TF_NUM_INTRAOP_THREADS: as on a 1-core and a 3-core machine) end with the same bits. Without
    the key they differ in the last digits of the first losses."""
    from shogi_dnn.analysis import run_model

    losses, weights = [], []
    for default in (1, 3):
        run = tmp_path / f"run{default}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3",
               "TF_NUM_INTRAOP_THREADS": str(default)}
        done = subprocess.run([sys.executable, "-m", "shogi_dnn", "train", "--config", SMOKE, "--data",
                               str(dataset), "--run-dir", str(run), "--set", "train.cpu_threads=2"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        losses.append([r["loss"] for r in run_files.read_metrics(run)])
        weights.append(run_model.load_run_model(run).get_weights())
    assert losses[0] == losses[1] and len(losses[0]) > 4
    assert all(np.array_equal(a, b) for a, b in zip(*weights))
