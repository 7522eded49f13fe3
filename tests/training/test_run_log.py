"""RUN/tb opens in TensorBoard (its own reader), and the console line and progress bar name the run's
position alike."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shogi_dnn.training import run_log
from tests.support.paths import REPO


def _record(kind: str, step: int, loss: float) -> dict:
    return {"kind": kind, "step": step, "samples": step * 64, "epoch": 0, "stage": 1, "group": 0, "loss": loss,
            "accuracy": 0.6, "positions_per_s": 1000.0, **({"lr": 0.01} if kind == "train" else {}),
            "per_gpu": [{"device": "CPU:0", "loss": loss, "accuracy": 0.6, "positions": 64, "positions_per_s": 500.0},
                        {"device": "CPU:1", "loss": loss, "accuracy": 0.6, "positions": 64, "positions_per_s": 500.0}]}


def test_event_files_load_with_tensorboards_own_reader(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    metrics = run_log.MetricsLog(tmp_path)
    metrics.write(_record("train", 2, 0.69))
    metrics.write(_record("train", 4, 0.65))
    metrics.write(_record("validation", 4, 0.66))
    metrics.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    assert {"loss", "accuracy", "lr", "gpu1/loss", "validation/loss", "validation/gpu0/accuracy"} <= tags
    from tensorboard.util import tensor_util

    loss = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors("loss")]
    assert loss == [(128, pytest.approx(0.69)), (256, pytest.approx(0.65))]     # x axis: samples, as the PNGs
    steps = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(run_log.TB_OPTIMIZER_STEP)]
    assert steps == [(128, 2.0), (256, 4.0)]                                     # and the optimizer steps there
    assert [e.step for e in acc.Tensors("validation/loss")] == [256]
    assert acc.SummaryMetadata("loss").plugin_data.plugin_name == "scalars"


def test_tensorboard_is_a_dependency() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("tensorboard") for dep in project["dependencies"])


def test_console_line_and_progress_bar_name_the_position_alike() -> None:
    line = run_log.console_line(_record("train", 2, 0.69))
    assert run_log.position_label(0, 1, 0) == "ep=0 stage=1 group=0" and "ep=0 stage=1 group=0" in line


def test_console_line_names_the_towers_by_their_device_kind() -> None:
    record = _record("train", 2, 0.69)
    assert " | cpu loss 0.690 0.690 acc 0.600 0.600" in run_log.console_line(record)
    for device, kind in (("/job:worker/replica:0/task:1/device:GPU:0", "gpu"), ("CPU:1", "tower")):
        towers = [{**record["per_gpu"][0], "device": "/job:localhost/replica:0/task:0/device:GPU:0"},
                  {**record["per_gpu"][1], "device": device}]
        assert f" | {kind} loss " in run_log.console_line({**record, "per_gpu": towers})
    towers = [{**record["per_gpu"][0], "device": "GPU:0"}, record["per_gpu"][1]]
    assert " | tower loss " in run_log.console_line({**record, "per_gpu": towers})
