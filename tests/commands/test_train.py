"""`shogi-dnn train`: one-line config errors, the cpu-smoke preset on 1 and 4 simulated towers,
SIGTERM -> checkpoint + exit 0 + resume command (subprocess, bounded time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.cli import main
from tests.support.cli import one_error_line
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset

SMOKE = str(REPO / "train" / "cpu-smoke.toml")


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
    code = ("import sys\nfrom shogi_dnn.cli import main\n"
            f"rc = main(['train', '--config', {SMOKE!r}, '--data', {str(tmp_path / 'nope')!r}, "
            f"'--run-dir', {str(tmp_path / 'run')!r}])\n"
            "print(rc, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.stdout.split()[-2:] == ["2", "False"], out.stdout + out.stderr
    assert "no manifest" in out.stderr


def test_finished_run_dir_is_refused_before_tensorflow_loads(dataset: Path, tmp_path: Path) -> None:
    # Training into a finished run took 30 s to refuse: the checkpoints are listed before TensorFlow starts.
    run = tmp_path / "run"
    for step in (4, 12):
        (run / "checkpoints" / f"ckpt-{step:08d}").mkdir(parents=True)
        (run / "checkpoints" / f"ckpt-{step:08d}" / "state.json").write_text("{}")
    (run / "checkpoints" / "ckpt-00000099").mkdir()             # no state.json: not a complete checkpoint
    code = ("import sys\nfrom shogi_dnn.cli import main\n"
            f"rc = main(['train', '--config', {SMOKE!r}, '--data', {str(dataset)!r}, "
            f"'--run-dir', {str(run)!r}])\n"
            "print(rc, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.stdout.split()[-2:] == ["2", "False"], out.stdout + out.stderr
    assert "already has checkpoints (latest ckpt-00000012): add --resume" in out.stderr


def final_weights(run_dir: Path) -> list[np.ndarray]:
    from shogi_dnn.training.model import load_model

    return [v.numpy() for v in load_model(run_dir / "model.keras").weights]


@pytest.mark.slow
def test_cpu_smoke_same_weights_on_1_and_4_towers(dataset: Path, tmp_path: Path) -> None:
    runs = {}
    for devices in (1, 4):
        run = tmp_path / f"run{devices}"
        assert main(["train", "--config", SMOKE, "--data", str(dataset), "--run-dir", str(run),
                     "--simulate-devices", str(devices), "--set", "train.max_steps_per_stage=3"]) == 0
        runs[devices] = final_weights(run)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert len(records[0]["per_gpu"]) == devices
        assert [r["kind"] for r in records].count("validation") == 2       # one per stage (2 groups)
    for a, b in zip(runs[1], runs[4]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_0(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_dataset(data, train=[20000, 20000], validation=[256], chunk_rows=512)
    run = tmp_path / "run"
    command = [sys.executable, "-m", "shogi_dnn", "train", "--config", SMOKE, "--data", str(data),
               "--run-dir", str(run), "--simulate-devices", "2", "--set", "train.max_steps_per_stage=0",
               "--set", "train.log_every_steps=1", "--set", "train.checkpoint_every_steps=0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while not (run / "metrics.jsonl").is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    tail = err[-3000:]
    assert proc.returncode == 0, tail
    assert "SIGTERM" in err and "--resume" in err and "Traceback" not in err, tail
    from shogi_dnn.training import checkpoints

    state, _ = checkpoints.read_state(checkpoints.find_checkpoint(run))
    assert 0 < state.step < 312 and state.stage == 0 and state.position == state.step * 64, (state, tail)
    assert not (run / "model.keras").exists()
