"""`shogi-dnn train` flags of issue 5: --workers/--worker-index and TF_CONFIG errors are one line before
TensorFlow starts; --scaling-fit is checked up front and gives the start-up batch advice with the lr."""

from __future__ import annotations

import logging

import pytest

from shogi_dnn.config import load_config
from shogi_dnn.training import throughput
from tests.support.cli import one_error_line
from tests.support.paths import REPO

SMOKE = str(REPO / "train" / "cpu-smoke.toml")


@pytest.mark.parametrize("extra, env, message", [
    (["--workers", "127.0.0.1:5000,127.0.0.1:5000", "--worker-index", "0"], None, "listed twice"),
    (["--workers", "127.0.0.1:5000,127.0.0.1:5001"], None, "--workers needs --worker-index"),
    (["--worker-index", "1"], None, "--worker-index needs --workers"),
    (["--workers", "127.0.0.1:5000,127.0.0.1:5001", "--worker-index", "0", "--cluster-timeout", "0"], None,
     "--cluster-timeout 0.0: must be a number of seconds > 0"),
    (["--workers", "127.0.0.1:5000", "--worker-index", "1"], None, "--worker-index 1: must be 0..0"),
    ([], "{not json", "TF_CONFIG: invalid JSON"),
    (["--scaling-fit", "missing-fit.json"], None, "missing-fit.json: no such scaling fit file"),
    (["--scaling-fit", "v0=258,speed=2"], None, "expected v0=POSITIONS_PER_S"),
])
def test_cluster_and_fit_errors_are_one_line(tmp_path, capsys, monkeypatch, extra, env, message) -> None:
    monkeypatch.chdir(tmp_path)
    if env is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", env)
    line = one_error_line(capsys, ["train", "--config", SMOKE, "--data", str(tmp_path), "--run-dir",
                                   str(tmp_path / "run"), *extra])
    assert message in line


def test_start_up_advice_names_the_batch_saturation_and_the_lr(caplog) -> None:
    from shogi_dnn.commands.train import log_batch_advice

    config = load_config(SMOKE, ["train.global_batch=0", "train.per_replica_batch=16",
                                 "optim.lr_scaling=linear"])
    with caplog.at_level(logging.INFO, logger="shogi_dnn.commands.train"):
        log_batch_advice(config, 4, throughput.load_fits("v0=1000,t=0.05,devices=4"))
        log_batch_advice(config, 4, throughput.load_fits("v0=1000,t=0.0001,devices=4"))
    low, high = caplog.records[-2:]
    assert low.levelno == logging.WARNING and high.levelno == logging.INFO
    assert "per-GPU batch 16 reaches 56% of the fitted v0 (1000 positions/s on 4 device(s)" in low.message
    assert "~113 per GPU needed for 90%" in low.message
    lr = 0.05 * 64 / 64          # cpu-smoke: lr 0.05 at base_global_batch 64; 4 towers x 16 = 64
    assert f"lr {lr:.4g} for 64 positions per update (optim.lr_scaling = linear" in low.message
    assert "kept busy" in high.message
