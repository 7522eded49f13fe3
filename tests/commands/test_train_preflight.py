"""`train` refuses a batch or sample-group problem before TensorFlow loads, in one line naming every
change needed (each way out it names passes alone), and leaves no run folder behind."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.cli import main
from shogi_dnn.commands import train as train_command
from shogi_dnn.training import stages
from tests.support.cli import one_error_line
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset

SMOKE = str(REPO / "train" / "cpu-smoke.toml")


def _ways_out(message: str) -> list[tuple[int | None, int | None]]:
    """(num_groups, global_batch) of each change the message names (None: unchanged)."""
    ways: list[tuple[int | None, int | None]] = []
    for part in message.split(": ", 1)[1].split(", or "):
        groups = re.search(r"data\.num_groups (?:to at most|=) (\d+)", part)
        batch = re.search(r"train\.global_batch = (\d+)", part)
        if groups or batch:
            ways.append((int(groups.group(1)) if groups else None, int(batch.group(1)) if batch else None))
    return ways


def test_the_first_advice_no_longer_leads_to_a_second_refusal() -> None:
    # 1,653 positions in 4 groups at a global batch of 2,048: lowering the batch to 1,653 alone was refused
    # again ("set data.num_groups to at most 1"); the one message now names complete ways out.
    message = stages.group_size_problem(1653, 4, 2048)
    assert message is not None and "\n" not in message
    assert "set train.global_batch = 413" in message                         # 1,653 // 4, keeping 4 groups
    assert "set data.num_groups = 1 and train.global_batch = 1653" in message
    assert stages.group_size_problem(1653, 4, 413) is None
    assert stages.group_size_problem(1653, 1, 1653) is None


def test_every_way_out_named_passes_alone() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(3000):
        positions, groups = int(rng.integers(1, 5000)), int(rng.integers(1, 40))
        towers, micro = int(rng.integers(1, 9)), int(rng.integers(1, 4))
        batch = int(rng.integers(1, 600)) * towers
        message = stages.group_size_problem(positions, groups, batch * micro, towers, micro)
        if message is None:
            continue
        for new_groups, new_batch in _ways_out(message):
            b = batch if new_batch is None else new_batch
            assert b % towers == 0 and b > 0, message
            again = stages.group_size_problem(positions, new_groups or groups, b * micro, towers, micro)
            assert again is None, message
            checked += 1
    assert checked > 500


def test_every_problem_in_one_line_before_tensorflow_and_no_folder(capsys: pytest.CaptureFixture,
                                                                   tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "data"
    make_dataset(data, train=[300, 260, 280], validation=[120], chunk_rows=64)

    def no_tensorflow(*args: object) -> int:
        raise AssertionError("reached the TensorFlow side")

    monkeypatch.setattr(train_command, "_train", no_tensorflow)
    run = tmp_path / "new" / "run"
    line = one_error_line(capsys, ["train", "--config", SMOKE, "--data", str(data), "--run-dir", str(run),
                                   "--simulate-devices", "4", "--set", "train.global_batch=30",
                                   "--set", "data.num_groups=200"])
    assert "train.global_batch = 30 is not divisible by 4 towers" in line
    assert "data.num_groups = 200 sample groups" in line and "set data.num_groups to at most" in line
    assert not run.exists() and not run.parent.exists()


def test_a_refusal_after_the_lock_removes_the_folder_it_created(capsys: pytest.CaptureFixture,
                                                                 tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "data"
    make_dataset(data, train=[300], validation=[60], chunk_rows=64)

    def refused(*args: object) -> int:
        from shogi_dnn.errors import ConfigError
        raise ConfigError("the model does not fit")

    monkeypatch.setattr(train_command, "_train", refused)
    run = tmp_path / "run"
    assert main(["train", "--config", SMOKE, "--data", str(data), "--run-dir", str(run)]) == 2
    assert "the model does not fit" in capsys.readouterr().err
    assert not run.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main(["train", "--config", SMOKE, "--data", str(data), "--run-dir", str(kept)]) == 2
    assert kept.is_dir()                                  # a folder the user made stays
