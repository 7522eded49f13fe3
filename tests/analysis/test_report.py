"""report: plots and report.md from metrics.jsonl and eval files; unbalanced towers are flagged."""

from __future__ import annotations

import json

import pytest

from shogi_dnn import cli
from shogi_dnn.dataset import shards
from shogi_dnn.analysis import report
from shogi_dnn.errors import RunError
from tests.support.metricsgen import write_metrics

EVAL = {"split": "validation", "positions": 100, "decisive": 96, "draws": {"positions": 4},
        "loss": 0.61, "accuracy": 0.66, "brier": 0.21, "ece": 0.03,
        "reliability": [{"lo": 0.2, "hi": 0.3, "positions": 50, "mean_prob": 0.25, "mean_label": 0.3},
                        {"lo": 0.7, "hi": 0.8, "positions": 50, "mean_prob": 0.75, "mean_label": 0.7}],
        "per_gpu": [{"device": "GPU:0", "positions": 50, "loss": 0.6, "accuracy": 0.65},
                    {"device": "GPU:1", "positions": 50, "loss": 0.62, "accuracy": 0.67}],
        "per_gpu_spread": {"loss": 0.02, "accuracy": 0.02}, "by_ply": [],
        "baselines": {"side_to_move": {"loss": 0.69, "accuracy": 0.51, "brier": 0.25, "ece": 0.01},
                      "material": {"loss": 0.66, "accuracy": 0.6, "brier": 0.23, "ece": 0.02}}}


def test_report_files_are_created(tmp_path) -> None:
    write_metrics(tmp_path, gpus=2, truncated_tail=True)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["GPU:0", "GPU:1"],
                                                   "num_replicas": 2}))
    (tmp_path / "eval-validation.json").write_text(json.dumps(EVAL))
    path = report.write_report(tmp_path)
    for name in ("loss", "accuracy", "validation", "throughput", "lr", "calibration"):
        png = tmp_path / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    text = path.read_text()
    assert "![loss](plots/loss.png)" in text and "![calibration](plots/calibration.png)" in text
    assert "| model | 0.6100 | 0.6600 | 0.2100 | 0.0300 |" in text
    assert "| material baseline | 0.6600 | 0.6000 |" in text
    assert "towers balanced" in text and "UNBALANCED" not in text
    assert "Best validation loss 0.5800 at 1,280 samples." in text
    assert "--set train.time_towers=true" in text             # no busy_s logged: the report says how
    write_metrics(tmp_path, gpus=2, busy=True)
    assert "time_towers" not in report.write_report(tmp_path).read_text()


def test_slow_and_diverging_towers_are_flagged(tmp_path) -> None:
    write_metrics(tmp_path, gpus=4, slow_gpu=2, diverging_gpu=1)
    records = report.run_files.read_metrics(tmp_path)
    flags = report.find_unbalanced_towers(records)
    assert {(f.kind, f.gpu) for f in flags} == {("slow", 2), ("loss", 1)}
    assert "40% of the fastest" in next(f for f in flags if f.kind == "slow").message
    text = report.write_report(tmp_path).read_text()
    assert text.count("**UNBALANCED TOWER**") == 2
    balanced = report.run_files.read_metrics(write_metrics(tmp_path, gpus=4).parent)
    assert report.find_unbalanced_towers(balanced) == []


def test_a_tower_computing_3x_slower_is_flagged(tmp_path) -> None:
    write_metrics(tmp_path, gpus=4, compute_slow_gpu=1)    # interval positions/s equal, as under all-reduce
    flags = report.find_unbalanced_towers(report.run_files.read_metrics(tmp_path))
    assert [(f.kind, f.gpu) for f in flags] == [("slow", 1)]
    assert "1,067 positions per busy second, 33% of the other towers' median (3,200)" in flags[0].message
    assert "**UNBALANCED TOWER**: GPU 1" in report.write_report(tmp_path).read_text()
    assert report.find_unbalanced_towers(report.run_files.read_metrics(write_metrics(tmp_path, gpus=4, busy=True)
                                                                     .parent)) == []
    # the compute rates win over the interval rates when present; one tower has nothing to compare with
    records = report.run_files.read_metrics(write_metrics(tmp_path, gpus=2, slow_gpu=0, busy=True).parent)
    assert report.find_unbalanced_towers(records) == []
    assert report.find_unbalanced_towers(report.run_files.read_metrics(
        write_metrics(tmp_path, gpus=1, busy=True).parent)) == []


def test_uneven_share_is_flagged(tmp_path) -> None:
    write_metrics(tmp_path, gpus=3, short_gpu=0)
    flags = report.find_unbalanced_towers(report.run_files.read_metrics(tmp_path))
    assert [(f.kind, f.gpu) for f in flags] == [("share", 0)]
    assert "320 positions, 50% of the busiest tower's 640" in flags[0].message


def test_nan_loss_is_flagged(tmp_path) -> None:
    write_metrics(tmp_path, gpus=2)
    records = report.run_files.read_metrics(tmp_path)
    records[-2]["per_gpu"][0]["loss"] = None
    records[-2]["per_gpu"][1]["loss"] = float("nan")
    assert [f.kind for f in report.find_unbalanced_towers(records)] == ["loss"]


def test_bad_runs(tmp_path, capsys) -> None:
    with pytest.raises(RunError, match="no such run directory"):
        report.write_report(tmp_path / "missing")
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(RunError, match="metrics.jsonl: missing"):
        report.write_report(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train"}\n{oops\n{"kind": "train"}\n')
    assert cli.main(["report", "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metrics.jsonl:2: corrupt JSON line" in err[0]


@pytest.mark.slow
def test_report_of_a_trained_run(tmp_path_factory) -> None:
    from tests.support.trainedrun import trained_run

    run_dir, _ = trained_run(tmp_path_factory)
    text = report.write_report(run_dir).read_text()
    assert "## Towers" in text and "## Validation per stage" in text
    assert text.count("| 0 | ") >= 1 and "`CPU:1`" in text
    for name in ("loss", "accuracy", "throughput", "lr", "validation"):
        assert (run_dir / "plots" / f"{name}.png").stat().st_size > 5000


def test_one_device_name_in_every_table(tmp_path) -> None:
    full = "/job:localhost/replica:0/task:0/device:CPU:0"
    write_metrics(tmp_path, gpus=1)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["CPU:0"], "num_replicas": 1}))
    evaluation = {**EVAL, "per_gpu": [{"device": full, "positions": 100, "loss": 0.6, "accuracy": 0.65}]}
    (tmp_path / "eval-validation.json").write_text(json.dumps(evaluation))
    text = report.write_report(tmp_path).read_text()
    assert "/job:" not in text and "device:" not in text
    assert "| `CPU:0` | 100 |" in text and "(CPU:0)" in text
    assert report.device_label(full) == "CPU:0" and report.device_label("worker1@10.0.0.2:2222/GPU:0") == \
        "worker1@10.0.0.2:2222/GPU:0"


def test_calibration_plot_shows_counts_and_marks_small_bins() -> None:
    result = {**EVAL, "reliability": [
        {"lo": 0.0, "hi": 0.1, "positions": 1, "mean_prob": 0.05, "mean_label": 0.0},
        {"lo": 0.4, "hi": 0.5, "positions": 5000, "mean_prob": 0.45, "mean_label": 0.44},
        {"lo": 0.5, "hi": 0.6, "positions": 0, "mean_prob": None, "mean_label": None}]}
    assert report.calibration_points(result) == [(0.05, 0.0, 1, True), (0.45, 0.44, 5000, False)]
    ax = report.calibration_figure({"validation": result}).axes[0]
    labels = {t.get_text() for t in ax.texts}
    assert {"1", "5,000"} <= labels
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(f"< {report.SMALL_BIN} positions" in t for t in legend)


def test_summary_is_one_table_with_positions_and_games(tmp_path, capsys) -> None:
    from tests.support.shardgen import make_dataset

    data = tmp_path / "data"
    make_dataset(data, train=[100], validation=[60, 40])
    run = tmp_path / "run"
    run.mkdir()
    write_metrics(run, gpus=1)
    (run / "run.json").write_text(json.dumps({"data_dir": str(data), "devices": ["CPU:0"], "num_replicas": 1}))
    (run / "eval-validation.json").write_text(json.dumps({**EVAL, "data_dir": str(data)}))
    assert cli.main(["report", "--run-dir", str(run), "--summary"]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out[out.index(next(line for line in out if line.startswith("predictor"))):]
    games = sum(s.games for s in shards.read_manifest(data).split("validation"))
    assert table[0].split() == ["predictor", "accuracy", "log", "loss", "ECE", "positions", "games"]
    assert table[1].split() == ["model", "0.6600", "0.6100", "0.0300", "100", str(games)]
    assert table[2].split()[:4] == ["material", "0.6000", "0.6600", "0.0200"]
    assert table[3].split()[:5] == ["side", "to", "move", "0.5100", "0.6900"]
    assert table[4] == "model ahead of material: accuracy +0.0600, log loss -0.0500"
    assert cli.main(["report", "--run-dir", str(run), "--summary", "test"]) == 2
    assert "eval-test.json: not found: run `shogi-dnn evaluate" in capsys.readouterr().err


def test_plan_vs_measured(tmp_path) -> None:
    import json as json_mod

    from shogi_dnn.analysis import report as report_mod
    from shogi_dnn.training import throughput
    from tests.support.metricsgen import write_metrics

    write_metrics(tmp_path, gpus=2)                       # every train line: 2 x 1000 positions/s
    (tmp_path / "run.json").write_text(json_mod.dumps({"num_replicas": 2, "global_batch": 64}))
    fits = {1: throughput.ThroughputFit(1, 258.0, 0.054), 2: throughput.ThroughputFit(2, 514.0, 0.15)}
    check = report_mod.plan_check(tmp_path, fits)
    predicted = 64 / (64 / 514.0 + 0.15)
    assert check.fit_devices == 2 and check.predicted == pytest.approx(predicted) and check.measured == 2000.0
    assert check.ratio == pytest.approx(2000.0 / predicted)
    path = report_mod.write_report(tmp_path, fits)
    assert "## Plan vs measured" in path.read_text() and f"{predicted:,.0f} positions/s" in path.read_text()
    assert "Plan vs measured" not in report_mod.write_report(tmp_path).read_text()      # no fit, no section


def test_per_device_titles_and_validation_panels_with_labels_and_epochs(tmp_path, monkeypatch) -> None:
    """A CPU run's per-device plots say CPU (a GPU run's GPU); the validation panels have axis labels and
    mark each point with its epoch and stage, and each new epoch with a line."""
    records = report.run_files.read_metrics(write_metrics(tmp_path, gpus=2).parent)
    cpu = [{**r, "per_gpu": [{**g, "device": g["device"].replace("GPU", "CPU")} for g in r["per_gpu"]]}
           for r in records]
    assert report.device_kind(["/job:localhost/replica:0/task:0/device:CPU:0", "CPU:1"]) == "CPU"
    assert report.device_kind(["GPU:0", "worker1@10.0.0.2:2222/GPU:0"]) == "GPU"
    assert report.device_kind(["CPU:0", "GPU:0"]) == "device"
    plots = report.make_plots(tmp_path, cpu, {})
    assert set(plots) == {"loss", "accuracy", "throughput", "lr", "validation"}
    fig = report._figure("x", "y")[0]          # the same builder as the saved plots
    assert fig.axes[0].get_xlabel() == report.SAMPLES_LABEL
    second_epoch = [{**r, "epoch": 1, "stage": 0, "samples": r["samples"] * 2} if r["kind"] == "validation"
                    and r["step"] == 20 else r for r in cpu]
    panels = report.validation_figure(second_epoch).axes
    assert [ax.get_ylabel() for ax in panels] == [label for _, label in report.VALIDATION_PANELS]
    assert all(ax.get_xlabel() == report.SAMPLES_LABEL for ax in panels)
    texts = [t.get_text() for t in panels[0].texts]
    assert texts == ["e0 s0", "e1 s0", "epoch 1"]
    titles, original = {}, report._save

    def capture(fig, path):
        titles[path.stem] = fig.axes[0].get_title()
        return original(fig, path)
    monkeypatch.setattr(report, "_save", capture)
    report.make_plots(tmp_path, cpu, {})
    assert titles["loss"] == "training loss per CPU" and titles["throughput"] == "positions/s per CPU"
    report.make_plots(tmp_path, records, {})
    assert titles["accuracy"] == "training accuracy per GPU"


def interval_eval() -> dict:
    """EVAL as evaluate writes it now: every baseline, intervals over games and paired comparisons."""
    def diff(estimate: float, lo: float, hi: float) -> dict:
        return {"estimate": estimate, "lo": lo, "hi": hi, "resolved": lo > 0 or hi < 0}

    baselines = {**EVAL["baselines"],
                 "piece_square": {"loss": 0.64, "accuracy": 0.63, "brier": 0.22, "ece": 0.02, "positions": 100},
                 "engine": {"loss": 0.58, "accuracy": 0.7, "brier": 0.2, "ece": 0.03, "positions": 100,
                            "scale": 811.4, "coverage": 0.9, "train_coverage": 0.94,
                            "evaluated": {"positions": 90, "games": 7,
                                          "engine": {"loss": 0.57, "accuracy": 0.71, "positions": 90, "games": 7,
                                                     "intervals": {"accuracy": [0.6, 0.8], "loss": [0.5, 0.64]}},
                                          "model": {"loss": 0.6, "accuracy": 0.67, "positions": 90, "games": 7,
                                                    "intervals": {"accuracy": [0.6, 0.74], "loss": [0.55, 0.65]}}}}}
    for row in baselines.values():
        row["intervals"] = {"accuracy": [row["accuracy"] - 0.05, row["accuracy"] + 0.05],
                            "loss": [row["loss"] - 0.04, row["loss"] + 0.04]}
    return {**EVAL, "baselines": baselines,
            "intervals": {"accuracy": [0.62, 0.7], "loss": [0.57, 0.65]},
            "bootstrap": {"unit": "game", "games": 8, "resamples": 1000, "seed": 0, "level": 0.95},
            "comparisons": {"material": {"accuracy": diff(0.06, 0.02, 0.1), "loss": diff(-0.05, -0.08, -0.02)},
                            "piece_square": {"accuracy": diff(0.03, -0.01, 0.07), "loss": diff(-0.03, -0.06, 0.01)},
                            "side_to_move": {"accuracy": diff(0.15, 0.1, 0.2), "loss": diff(-0.08, -0.1, -0.06)},
                            "engine": {"accuracy": diff(-0.04, -0.07, -0.01), "loss": diff(0.03, 0.01, 0.05)},
                            "engine_evaluated": {"accuracy": diff(-0.04, -0.08, 0.0001),
                                                 "loss": diff(0.03, 0.01, 0.05)}}}


def test_summary_and_report_show_intervals_and_comparisons(tmp_path, capsys) -> None:
    write_metrics(tmp_path, gpus=1)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": str(tmp_path / "moved"), "devices": ["CPU:0"],
                                                   "num_replicas": 1}))
    (tmp_path / "eval-validation.json").write_text(json.dumps(interval_eval()))
    assert cli.main(["report", "--run-dir", str(tmp_path), "--summary"]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index(next(line for line in out if line.startswith("predictor")))
    table = out[start:]
    assert "in brackets the 95% interval over games" in out[start - 1]
    assert table[1].split() == ["model", "0.6600", "(0.6200..0.7000)", "0.6100", "(0.5700..0.6500)", "0.0300",
                                "100", "?"]                    # the dataset moved: games unknown
    assert [row.split("  ")[0].strip() for row in table[2:8]] == [
        "material", "piece-square", "side to move", "engine", "model, evaluated", "engine, evaluated"]
    assert table[6].split()[-2:] == ["90", "7"]                # the evaluated rows: their positions and games
    assert table[8] == ("model ahead of material: accuracy +0.0600 (95% +0.0200..+0.1000 over games), "
                        "log loss -0.0500 (95% -0.0800..-0.0200 over games)")
    assert table[9] == ("model vs piece-square: accuracy +0.0300 (95% -0.0100..+0.0700 over games: not resolved), "
                        "log loss -0.0300 (95% -0.0600..+0.0100 over games: not resolved)")
    assert table[10].startswith("model ahead of side to move:")
    assert table[11].startswith("model behind engine: accuracy -0.0400 (95% -0.0700..-0.0100 over games)")
    assert table[12].startswith("model vs engine on evaluated positions: accuracy -0.0400 (95% -0.0800..+0.0001 "
                                "over games: not resolved)")
    assert table[13] == "(95% intervals: bootstrap over 8 games, 1000 resamples; not resolved: the interval contains 0)"
    text = (tmp_path / "report.md").read_text()
    assert "| model | 0.6100 (0.5700..0.6500) | 0.6600 (0.6200..0.7000) | 0.2100 | 0.0300 |" in text
    assert "| piece-square baseline | 0.6400 (0.6000..0.6800) | 0.6300 (0.5800..0.6800) |" in text
    assert "| engine baseline, evaluated positions | 0.5700 (0.5000..0.6400) | 0.7100 (0.6000..0.8000) |" in text
    assert "- model vs piece-square: accuracy +0.0300" in text and "evaluations on 90.0% of these positions" in text


def test_an_eval_file_from_before_the_intervals_still_reports(tmp_path) -> None:
    write_metrics(tmp_path, gpus=1)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["CPU:0"], "num_replicas": 1}))
    (tmp_path / "eval-validation.json").write_text(json.dumps(EVAL))
    text = report.write_report(tmp_path).read_text()
    assert "| model | 0.6100 | 0.6600 | 0.2100 | 0.0300 |" in text and "over games" not in text
    assert "piece-square" not in text and "engine" not in text
    lines = report.summary_table(tmp_path).splitlines()
    assert lines[-1] == "model ahead of material: accuracy +0.0600, log loss -0.0500"
