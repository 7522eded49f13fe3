"""`shogi-dnn bench scaling`: report, JSON, plot and table from points; argument errors; a tiny real sweep."""

from __future__ import annotations

import json

import pytest

from shogi_dnn.bench import scaling as bench
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import throughput

MODEL = {1: (258.0, 0.054), 2: (514.0, 0.15), 4: (900.0, 0.3)}


def model_points(batches=(8, 16, 32, 64, 128), steps: int = 10) -> list[bench.Point]:
    """Points timed exactly as the published-style model predicts (10 steps each)."""
    points = []
    for n, (v0, t) in MODEL.items():
        for b in batches:
            points.append(bench.Point(devices=n, per_replica_batch=b, steps=steps,
                                      seconds=steps * (n * b / v0 + t)))
    return points


def test_report_fits_every_device_count_and_scaling() -> None:
    report = bench.build_report(model_points(), {"config": "x.toml"})
    assert report["schema"] == bench.SCHEMA and report["config"] == "x.toml"
    fits = {f["devices"]: f for f in report["fits"]}
    for n, (v0, t) in MODEL.items():
        assert fits[n]["v0"] == pytest.approx(v0) and fits[n]["t"] == pytest.approx(t, abs=1e-9)
        assert fits[n]["b90"] == pytest.approx(9 * v0 * t) and len(fits[n]["points"]) == 5
        assert fits[n]["r2"] == pytest.approx(1.0)
    gains = {g["devices"]: g for g in report["scaling"]}
    assert sorted(gains) == [2, 4]
    expected = throughput.scaling(throughput.ThroughputFit(1, 258.0, 0.054), throughput.ThroughputFit(2, 514.0, 0.15))
    assert gains[2]["efficiency"] == pytest.approx(expected.efficiency)
    measured = {m["per_replica_batch"]: m for m in gains[4]["measured"]}
    v1, v4 = 64 / (64 / 258 + 0.054), 256 / (256 / 900 + 0.3)
    assert measured[64]["speedup"] == pytest.approx(v4 / v1)
    assert measured[64]["efficiency"] == pytest.approx(v4 / v1 / 4)


def test_json_plot_and_table(tmp_path) -> None:
    report = bench.build_report(model_points(), {})
    out = tmp_path / "sub" / "scaling.json"
    bench.write_json(report, out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert throughput.load_fits(out)[2].v0 == pytest.approx(514.0)          # the trainer can read it back
    png = out.with_suffix(".png")
    bench.write_plot(report, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert sorted(p.name for p in out.parent.iterdir()) == ["scaling.json", "scaling.png"]   # no temp left
    table = bench.format_table(report)
    assert "2 devices over 1 at per-GPU batch 347 (their b90)" in table
    row64 = next(line for line in table.splitlines() if line.split()[:1] == ["64"])
    assert row64.split()[1] == f"{64 / (64 / 258 + 0.054):.0f}"


def test_a_device_count_that_cannot_be_fitted_keeps_its_points() -> None:
    report = bench.build_report([p for p in model_points() if p.devices != 2 or p.per_replica_batch == 8], {})
    assert [f["devices"] for f in report["fits"]] == [1, 4]
    (lost,) = report["unfitted"]
    assert lost["devices"] == 2 and len(lost["points"]) == 1
    assert "need at least 2 distinct batch sizes" in lost["fit_error"]
    assert any("the 2-device fit failed" in p and "--repeats" in p for p in report["problems"])
    assert "2 not fitted" in bench.format_table(report)
    assert set(throughput.fits_from_dict(report, "x")) == {1, 4}     # plan --scaling-fit reads the rest


def test_a_fit_without_fixed_cost_is_compared_at_a_measured_batch(tmp_path) -> None:
    """Noisy points can fit t = 0 (no b90): the speed-up is taken at a measured batch, not a crash."""
    points = [p for p in model_points() if p.devices == 1]
    points += [bench.Point(devices=2, per_replica_batch=b, steps=10, seconds=10 * 2 * b / 514.0)
               for b in (8, 16, 32, 64, 128)]
    report = bench.build_report(points, {})
    (gain,) = report["scaling"]
    assert gain["per_replica_batch"] == 128 and gain["speedup"] > 1
    assert any("no fixed cost" in p for p in report["problems"])
    bench.write_json(report, tmp_path / "s.json")
    bench.write_plot(report, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 0


def test_an_interrupted_sweep_keeps_the_complete_device_counts(caplog) -> None:
    points = model_points()
    partial = [p for p in points if p.devices < 4] + [p for p in points if p.devices == 4][:1]
    with caplog.at_level("WARNING"):
        kept = bench.complete_counts(partial)
    assert {p.devices for p in kept} == {1, 2} and "dropping device count(s) [4]" in caplog.text
    assert [f["devices"] for f in bench.build_report(kept, {})["fits"]] == [1, 2]
    with pytest.raises(ConfigError, match="nothing to fit"):
        bench.complete_counts(points[:1])


@pytest.mark.parametrize("argv, message", [
    (["--config", "c.toml", "--batch-sizes", "8,x"], "expected comma-separated integers"),
    (["--config", "c.toml", "--batch-sizes", "8"], "need at least 2 batch sizes"),
    (["--config", "c.toml", "--devices", "0,2"], "expected positive integers"),
    (["--config", "c.toml", "--steps", "0"], "--steps and --repeats must be >= 1"),
    (["--config", "c.toml", "--repeats", "0"], "--steps and --repeats must be >= 1"),
])
def test_bad_arguments(argv, message) -> None:
    with pytest.raises(ConfigError, match=message):
        bench.parse_args(argv)


def test_arguments_sorted_and_deduplicated() -> None:
    args = bench.parse_args(["--config", "c.toml", "--batch-sizes", "32,8,8,16", "--devices", "2,1"])
    assert args.batch_sizes == (8, 16, 32) and args.devices == (1, 2)


@pytest.mark.slow
def test_tiny_sweep_on_simulated_devices(tmp_path, capsys) -> None:
    """The real tower step on 1 and 2 logical CPUs: a fit per device count, JSON, plot and table."""
    preset = tmp_path / "tiny.toml"
    preset.write_text("[model]\nblocks = 1\nfilters = 8\nvalue_hidden = 8\n")
    out = tmp_path / "fit.json"
    # Batches far apart so that the time per step surely grows with the batch, even on a busy machine.
    assert bench.main(["--config", str(preset), "--batch-sizes", "2,512", "--devices", "1,2",
                       "--steps", "3", "--warmup", "1", "--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [f["devices"] for f in report["fits"]] == [1, 2] and report["simulated"] is True
    for entry in report["fits"]:
        assert [p["per_replica_batch"] for p in entry["points"]] == [2, 512]
        assert entry["v0"] > 0 and entry["t"] >= 0 and entry["num_points"] == 2
        assert all(p["steps"] == 3 and p["seconds_per_step"] > 0 for p in entry["points"])
        for p in entry["points"]:
            assert len(p["repeats_seconds"]) == 2
            assert p["seconds_per_step"] * 3 == pytest.approx(min(p["repeats_seconds"]))
    assert report["scaling"][0]["devices"] == 2 and report["scaling"][0]["efficiency"] > 0
    assert out.with_suffix(".png").stat().st_size > 5000
    assert "devices over 1 at per-GPU batch" in capsys.readouterr().out
