"""`shogi-dnn bench train`: report ratios, table, data selection (no timing assertions: speed targets
live in the benchmark's output, not in tests)."""

from __future__ import annotations

import json

import pytest

from shogi_dnn.bench import train as bench
from shogi_dnn.errors import ConfigError, ShardFormatError


def _results() -> list[bench.Measurement]:
    """Wall windows, and CPU windows for every 1-device point (2 devices: wall only)."""
    return [bench.Measurement(bench.PIPELINE, 0, 1000, (0.002, 0.001)),
            bench.Measurement(bench.TOWERS, 1, 100, (1.0,), (0.5,), (0.05,), (400,), 4),
            bench.Measurement(bench.FIT, 1, 100, (2.0, 3.0), (0.8, 0.4), (0.4, 0.1), (900, 300), 4),
            bench.Measurement(bench.TOWERS, 2, 100, (0.6, 0.5, 0.7)),
            bench.Measurement(bench.FIT, 2, 100, (0.8,))]


def test_report_ratios():
    report = bench.build_report(_results(), {"global_batch": 100, "data": "synthetic"})
    ratios = report["ratios"]
    assert ratios["over_fit"] == {"towers": {"1": pytest.approx(2.0), "2": pytest.approx(1.6)}}
    assert ratios["speedup_over_1"]["towers"] == {"1": pytest.approx(1.0), "2": pytest.approx(2.0)}
    assert ratios["speedup_over_1"]["model.fit"]["2"] == pytest.approx(2.5)
    assert ratios["pipeline_over_fastest_step"] == pytest.approx(1e6 / 200)
    assert [r["positions_per_s"] for r in report["results"]] == pytest.approx([1e6, 100, 50, 200, 125])
    assert report["results"][3]["median_positions_per_s"] == pytest.approx(100 / 0.6)
    # CPU seconds: the best CPU window, the ratio only where both methods have CPU figures.
    assert report["results"][2]["positions_per_cpu_s"] == pytest.approx(100 / 0.4)
    assert report["results"][2]["median_positions_per_cpu_s"] == pytest.approx(100 / 0.6)
    assert "positions_per_cpu_s" not in report["results"][3]
    assert ratios["over_fit_cpu"] == {"towers": {"1": pytest.approx(0.8)}}
    # The kernel's share and the faults per update: those of the best CPU window (fit: the second).
    assert report["results"][2]["sys_share"] == pytest.approx(0.25)
    assert report["results"][2]["faults_per_update"] == pytest.approx(75)
    assert report["results"][1]["faults_per_update"] == pytest.approx(100)
    assert "sys_share" not in report["results"][3] and "faults_per_update" not in report["results"][0]


def test_table_lists_every_measurement_with_ratios():
    table = bench.format_table(bench.build_report(_results(), {"global_batch": 100, "data": "synthetic"}))
    lines = table.splitlines()
    assert "global batch 100" in lines[0]
    assert any(line.split()[:3] == ["pipeline", "host", "1,000,000"] for line in lines)
    assert "pos/CPU-s" in lines[1] and "CPU vs fit" in lines[1] and "faults/update" in lines[1]
    assert any(line.split() == ["towers", "2", "200", "1.60", "2.00"] for line in lines)
    assert any(line.split() == ["model.fit", "2", "125", "2.50"] for line in lines)
    assert any(line.split() == ["towers", "1", "100", "2.00", "1.00", "200", "0.80", "10", "100"]
               for line in lines)
    assert any(line.split() == ["model.fit", "1", "50", "1.00", "250", "25", "75"] for line in lines)


def test_windows_alternate_order_every_round():
    calls = []

    class Runner:
        def __init__(self, method: str) -> None:
            self.method = method

        def run(self, steps: int) -> bench.Window:
            calls.append(self.method)
            return bench.Window(float(len(calls)), float(steps))

    windows = bench.alternate_windows([Runner("a"), Runner("b"), Runner("c")], repeats=3, steps=7)
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [w[:2] for w in windows["a"]] == [(1.0, 7.0), (6.0, 7.0), (7.0, 7.0)]


def test_synthetic_data_when_no_data_is_given(tmp_path):
    paths, source = bench.train_paths(None, tmp_path, 2 * bench.SYNTHETIC_SHARD_ROWS + 10)
    assert [p.name for p in paths] == ["train-00000.h5", "train-00001.h5", "train-00002.h5"]
    assert "synthetic" in source


def test_bad_arguments_and_data(tmp_path):
    with pytest.raises(ShardFormatError, match="no manifest"):
        bench.train_paths(str(tmp_path), tmp_path, 10)
    with pytest.raises(ConfigError, match="--devices"):
        bench.parse_args(["--devices", "0,2"])


@pytest.mark.slow
def test_bench_runs_end_to_end_on_tiny_settings(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--synthetic-positions", "3000", "--pipeline-positions", "256", "--steps", "2", "--warmup", "1",
            "--repeats", "2", "--devices", "1,2", "--set", "model.blocks=1", "--set", "model.filters=4",
            "--set", "model.value_hidden=4", "--set", "train.per_replica_batch=16", "--json", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["global_batch"] == 32 and report["train_positions"] == 3000
    assert [(r["method"], r["devices"]) for r in report["results"]] == [
        ("pipeline", 0), ("towers", 1), ("towers-iter", 1), ("model.fit", 1),
        ("towers", 2), ("towers-iter", 2), ("model.fit", 2)]
    assert all(len(r["windows"]) == 2 and r["positions_per_s"] > 0 for r in report["results"])
    assert all(len(r["cpu_windows"]) == 2 and r["positions_per_cpu_s"] > 0 for r in report["results"])
    assert all(0 <= r["sys_share"] <= 1 for r in report["results"])
    assert all(r["faults_per_update"] >= 0 for r in report["results"] if r["method"] != "pipeline")
    assert set(report["ratios"]["over_fit"]) == {"towers", "towers-iter"}
    assert set(report["ratios"]["over_fit_cpu"]) == {"towers", "towers-iter"}
    assert set(report["ratios"]["over_fit"]["towers-iter"]) == {"1", "2"}
    assert "vs fit" in capsys.readouterr().out


def test_bench_measures_a_policy_model_too(tmp_path):
    """A value + policy model: model.fit trains both outputs (a KeyError traceback before)."""
    out = tmp_path / "bench.json"
    argv = ["--synthetic-positions", "2000", "--pipeline-positions", "128", "--steps", "2", "--warmup", "1",
            "--repeats", "1", "--devices", "1", "--set", "model.blocks=1", "--set", "model.filters=4",
            "--set", "model.value_hidden=4", "--set", "model.policy_head=true",
            "--set", "train.per_replica_batch=16", "--json", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert {r["method"] for r in report["results"]} == {"pipeline", "towers", "towers-iter", "model.fit"}
