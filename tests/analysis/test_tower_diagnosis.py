"""tower_diagnosis: per-tower series, device names and kinds, and the unbalanced-tower flags."""

from __future__ import annotations

import numpy as np

from shogi_dnn.analysis import report, tower_diagnosis
from shogi_dnn.folders import run_files
from tests.support.metricsgen import write_metrics


def read(path) -> list[dict]:
    """The records of the metrics.jsonl at `path`."""
    return run_files.read_metrics(path.parent)


def test_slow_and_diverging_towers_are_flagged(tmp_path) -> None:
    records = read(write_metrics(tmp_path, gpus=4, slow_gpu=2, diverging_gpu=1))
    flags = tower_diagnosis.find_unbalanced_towers(records)
    assert {(f.kind, f.gpu) for f in flags} == {("slow", 2), ("loss", 1)}
    assert "40% of the fastest" in next(f for f in flags if f.kind == "slow").message
    text = report.write_report(tmp_path).read_text()
    assert text.count("**UNBALANCED TOWER**") == 2
    assert tower_diagnosis.find_unbalanced_towers(read(write_metrics(tmp_path, gpus=4))) == []


def test_a_tower_computing_3x_slower_is_flagged(tmp_path) -> None:
    write_metrics(tmp_path, gpus=4, compute_slow_gpu=1)    # interval positions/s equal, as under all-reduce
    flags = tower_diagnosis.find_unbalanced_towers(run_files.read_metrics(tmp_path))
    assert [(f.kind, f.gpu) for f in flags] == [("slow", 1)]
    assert "1,067 positions per busy second, 33% of the other towers' median (3,200)" in flags[0].message
    assert "**UNBALANCED TOWER**: GPU 1" in report.write_report(tmp_path).read_text()
    assert tower_diagnosis.find_unbalanced_towers(read(write_metrics(tmp_path, gpus=4, busy=True))) == []
    # the compute rates win over the interval rates when present; one tower has nothing to compare with
    records = read(write_metrics(tmp_path, gpus=2, slow_gpu=0, busy=True))
    assert tower_diagnosis.find_unbalanced_towers(records) == []
    assert tower_diagnosis.find_unbalanced_towers(read(write_metrics(tmp_path, gpus=1, busy=True))) == []


def test_uneven_share_is_flagged(tmp_path) -> None:
    flags = tower_diagnosis.find_unbalanced_towers(read(write_metrics(tmp_path, gpus=3, short_gpu=0)))
    assert [(f.kind, f.gpu) for f in flags] == [("share", 0)]
    assert "320 positions, 50% of the busiest tower's 640" in flags[0].message


def test_nan_loss_is_flagged(tmp_path) -> None:
    records = read(write_metrics(tmp_path, gpus=2))
    records[-2]["per_gpu"][0]["loss"] = None
    records[-2]["per_gpu"][1]["loss"] = float("nan")
    assert [f.kind for f in tower_diagnosis.find_unbalanced_towers(records)] == ["loss"]


def test_flags_name_the_towers_by_their_device_kind(tmp_path) -> None:
    records = read(write_metrics(tmp_path, gpus=4, slow_gpu=2, diverging_gpu=1, short_gpu=3))
    gpu = [f.message for f in tower_diagnosis.find_unbalanced_towers(records)]
    assert [m.split(" (")[0] for m in gpu] == ["GPU 2", "GPU 3", "GPU 1"]
    cpu = [{**r, "per_gpu": [{**g, "device": g["device"].replace("GPU", "CPU")} for g in r["per_gpu"]]}
           for r in records]
    assert [f.message for f in tower_diagnosis.find_unbalanced_towers(cpu)] == [
        m.replace("GPU", "CPU") for m in gpu]


def test_device_names_and_kinds() -> None:
    full = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert tower_diagnosis.device_label(full) == "CPU:0"
    assert tower_diagnosis.device_label("worker1@10.0.0.2:2222/GPU:0") == "worker1@10.0.0.2:2222/GPU:0"
    assert tower_diagnosis.device_kind([full, "CPU:1"]) == "CPU"
    assert tower_diagnosis.device_kind(["GPU:0", "worker1@10.0.0.2:2222/GPU:0"]) == "GPU"
    assert tower_diagnosis.device_kind(["CPU:0", "GPU:0"]) == "device"
    assert tower_diagnosis.device_kind([0, 1]) == "device"          # no names recorded


def test_per_gpu_series_fills_gaps_with_nan() -> None:
    records = [{"kind": "train", "samples": 64, "per_gpu": [{"device": "GPU:0", "loss": 0.5}]},
               {"kind": "train", "samples": 128, "per_gpu": [{"device": "GPU:0", "loss": None},
                                                             {"device": "GPU:1", "loss": 0.6}]},
               {"kind": "train", "samples": 192}]
    samples, values, devices = tower_diagnosis.per_gpu_series(records, "loss")
    assert samples.tolist() == [64.0, 128.0] and devices == ["GPU:0", "GPU:1"]
    assert values.shape == (2, 2) and values[0, 0] == 0.5 and values[1, 1] == 0.6
    assert int(np.isnan(values).sum()) == 2                      # the missing and the None value: NaN
