"""report: report.md (and its plots) from metrics.jsonl and eval files, with the tables naming the run's
device kind; the --summary table."""

from __future__ import annotations

import copy
import json

import pytest

from shogi_dnn import cli
from shogi_dnn.analysis import report, summary
from shogi_dnn.dataset import shards
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
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["CPU:0"],
                                                   "num_replicas": 1}))
    evaluation = {**EVAL, "per_gpu": [{"device": full, "positions": 100, "loss": 0.6, "accuracy": 0.65}]}
    (tmp_path / "eval-validation.json").write_text(json.dumps(evaluation))
    text = report.write_report(tmp_path).read_text()
    assert "/job:" not in text and "device:" not in text
    assert "| `CPU:0` | 100 |" in text and "(CPU:0)" in text


def cpu_metrics(path) -> None:
    """Rewrite the metrics.jsonl at `path` as a run on CPU towers (metricsgen writes GPU ones)."""
    path.write_text(path.read_text().replace("device:GPU", "device:CPU"))


def test_tables_name_the_device_kind_the_run_used(tmp_path) -> None:
    """A CPU run's tables, balance line and flags say CPU, as its plots do; a GPU run's say GPU; an
    evaluation's table names the devices evaluate used; mixed towers are just towers."""
    def run(gpus: int, devices: list[str], **metrics) -> str:
        path = write_metrics(tmp_path, gpus=gpus, **metrics)
        if devices[0].startswith("CPU"):
            cpu_metrics(path)
        (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": devices,
                                                       "num_replicas": gpus}))
        evaluation = {**EVAL, "per_gpu": [{**g, "device": d} for g, d in zip(EVAL["per_gpu"], devices)]}
        (tmp_path / "eval-validation.json").write_text(json.dumps(evaluation))
        return report.write_report(tmp_path).read_text()

    cpu = run(2, ["CPU:0", "CPU:1"])
    assert "| CPU | device | median positions/s |" in cpu and "| CPU | positions | loss | accuracy |" in cpu
    assert "no slow CPU and no diverging loss" in cpu and "Spread between CPUs:" in cpu
    assert "a slow CPU shows only in the total throughput" in cpu and "for the per-CPU check" in cpu
    assert "GPU" not in cpu
    assert "**UNBALANCED TOWER**: CPU 1 (" in run(2, ["CPU:0", "CPU:1"], diverging_gpu=1)
    gpu = run(2, ["GPU:0", "GPU:1"])
    assert "| GPU | device |" in gpu and "| GPU | positions |" in gpu and "no slow GPU" in gpu
    assert "Spread between GPUs:" in gpu and "CPU" not in gpu
    mixed = run(2, ["GPU:0", "CPU:0"])              # the towers' table follows metrics.jsonl: GPU
    assert "| tower | positions |" in mixed and "Spread between towers:" in mixed


def test_summary_is_one_table_with_positions_and_games(tmp_path, capsys) -> None:
    from tests.support.shardgen import make_dataset

    data = tmp_path / "data"
    make_dataset(data, train=[100], validation=[60, 40])
    run = tmp_path / "run"
    run.mkdir()
    write_metrics(run, gpus=1)
    (run / "run.json").write_text(json.dumps({"data_dir": str(data), "devices": ["CPU:0"],
                                              "num_replicas": 1}))
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
    (run / "eval-test@heldout-1a2b3c4d.json").write_text(json.dumps({**EVAL, "split": "test"}))
    assert cli.main(["report", "--run-dir", str(run), "--summary", "test"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "first (--summary shows the run's own dataset; other datasets' test evaluations are in "
        "eval-test@heldout-1a2b3c4d.json)")


def interval_eval() -> dict:
    """EVAL as evaluate writes it now: every baseline, intervals over games and paired comparisons (a
    copy: EVAL itself stays a file from before the intervals)."""
    def diff(estimate: float, lo: float, hi: float) -> dict:
        return {"estimate": estimate, "lo": lo, "hi": hi, "resolved": lo > 0 or hi < 0}

    evaluated = {"positions": 90, "games": 7,
                 "engine": {"loss": 0.57, "accuracy": 0.71, "positions": 90, "games": 7,
                            "intervals": {"accuracy": [0.6, 0.8], "loss": [0.5, 0.64]}},
                 "model": {"loss": 0.6, "accuracy": 0.67, "positions": 90, "games": 7,
                           "intervals": {"accuracy": [0.6, 0.74], "loss": [0.55, 0.65]}}}
    baselines = {**copy.deepcopy(EVAL["baselines"]),
                 "piece_square": {"loss": 0.64, "accuracy": 0.63, "brier": 0.22, "ece": 0.02,
                                  "positions": 100},
                 "engine": {"loss": 0.58, "accuracy": 0.7, "brier": 0.2, "ece": 0.03, "positions": 100,
                            "scale": 811.4, "coverage": 0.9, "train_coverage": 0.94, "evaluated": evaluated}}
    for row in baselines.values():
        row["intervals"] = {"accuracy": [row["accuracy"] - 0.05, row["accuracy"] + 0.05],
                            "loss": [row["loss"] - 0.04, row["loss"] + 0.04]}
    return {**EVAL, "baselines": baselines,
            "intervals": {"accuracy": [0.62, 0.7], "loss": [0.57, 0.65]},
            "bootstrap": {"unit": "game", "games": 8, "resamples": 1000, "seed": 0, "level": 0.95},
            "comparisons": {"material": {"accuracy": diff(0.06, 0.02, 0.1),
                                         "loss": diff(-0.05, -0.08, -0.02)},
                            "piece_square": {"accuracy": diff(0.03, -0.01, 0.07),
                                             "loss": diff(-0.03, -0.06, 0.01)},
                            "side_to_move": {"accuracy": diff(0.15, 0.1, 0.2),
                                             "loss": diff(-0.08, -0.1, -0.06)},
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
    assert table[9] == ("model vs piece-square: accuracy +0.0300 (95% -0.0100..+0.0700 over games: not "
                        "resolved), log loss -0.0300 (95% -0.0600..+0.0100 over games: not resolved)")
    assert table[10].startswith("model ahead of side to move:")
    assert table[11].startswith("model behind engine: accuracy -0.0400 (95% -0.0700..-0.0100 over games)")
    assert table[12].startswith("model vs engine on evaluated positions: accuracy -0.0400 (95% "
                                "-0.0800..+0.0001 over games: not resolved)")
    assert table[13] == ("(95% intervals: bootstrap over 8 games, 1000 resamples; not resolved: the interval "
                         "contains 0)")
    text = (tmp_path / "report.md").read_text()
    assert "| model | 0.6100 (0.5700..0.6500) | 0.6600 (0.6200..0.7000) | 0.2100 | 0.0300 |" in text
    assert "| piece-square baseline | 0.6400 (0.6000..0.6800) | 0.6300 (0.5800..0.6800) |" in text
    assert ("| engine baseline, evaluated positions | 0.5700 (0.5000..0.6400) | 0.7100 (0.6000..0.8000) |"
            in text)
    assert "- model vs piece-square: accuracy +0.0300" in text
    assert "evaluations on 90.0% of these positions" in text


def test_an_eval_file_from_before_the_intervals_still_reports(tmp_path) -> None:
    write_metrics(tmp_path, gpus=1)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["CPU:0"],
                                                   "num_replicas": 1}))
    (tmp_path / "eval-validation.json").write_text(json.dumps(EVAL))
    text = report.write_report(tmp_path).read_text()
    assert "| model | 0.6100 | 0.6600 | 0.2100 | 0.0300 |" in text and "over games" not in text
    assert "| material baseline | 0.6600 | 0.6000 | 0.2300 | 0.0200 |" in text     # no intervals either
    assert "piece-square" not in text and "engine" not in text
    lines = summary.summary_table(tmp_path).splitlines()
    assert lines[-1] == "model ahead of material: accuracy +0.0600, log loss -0.0500"


POLICY = {"positions": 90, "games": 3, "top1": 0.41, "top5": 0.77,
          "intervals": {"top1": [0.35, 0.47], "top5": [0.7, 0.83]},
          "bootstrap": {"unit": "game", "games": 3, "resamples": 1000, "seed": 0, "level": 0.95}}


def test_policy_metrics_in_report_and_summary(tmp_path) -> None:
    """A run with a policy head: the last training line, the validation table's columns, the policy plots,
    the evaluation's top-1/top-5 in report.md and the summary; none of it for a run without one."""
    write_metrics(tmp_path, gpus=2, policy=True)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["GPU:0", "GPU:1"],
                                                   "num_replicas": 2}))
    (tmp_path / "eval-validation.json").write_text(json.dumps({**EVAL, "policy": POLICY}))
    text = report.write_report(tmp_path).read_text()
    assert "- last training policy loss 5.6000, policy top-1 0.2000 (argmax over all 2187 labels" in text
    assert "| epoch | stage | samples | loss | accuracy | policy loss | policy top-1 |" in text
    assert "| 0 | 1 | 1,280 | 0.5800 | 0.5500 | 5.0000 | 0.2400 |" in text
    line = ("policy: top-1 0.4100 (95% 0.3500..0.4700 over games), "
            "top-5 0.7700 (95% 0.7000..0.8300 over games)")
    assert f"- {line} on 90 positions of 3 games (over the legal moves)" in text
    for name in ("policy_loss", "policy_accuracy"):
        assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 5000 and f"![{name}]" in text
    assert line in summary.summary_table(tmp_path)

    write_metrics(tmp_path, gpus=2)
    (tmp_path / "eval-validation.json").write_text(json.dumps(EVAL))
    for name in ("policy_loss", "policy_accuracy"):
        (tmp_path / "plots" / f"{name}.png").unlink()
    text = report.write_report(tmp_path).read_text().replace(tmp_path.name, "")
    assert "policy" not in text
    assert "policy" not in summary.summary_table(tmp_path).replace(str(tmp_path), "")
    assert not (tmp_path / "plots" / "policy_loss.png").exists()


def test_report_counts_have_thousands_separators(tmp_path) -> None:
    """report.md writes 22,027 wherever it prints a count (it said '22,027 positions (21513 decisive, ...)'
    and '| `CPU:0` | 22027 |' on one page)."""
    write_metrics(tmp_path, gpus=1)
    run = {"data_dir": "/data", "devices": ["CPU:0"], "num_replicas": 1}
    (tmp_path / "run.json").write_text(json.dumps(run))
    big = {**interval_eval(), "positions": 22027, "decisive": 21513, "draws": {"positions": 514},
           "per_gpu": [{"device": "CPU:0", "positions": 22027, "loss": 0.6, "accuracy": 0.65}],
           "per_gpu_spread": {"loss": 0.0, "accuracy": 0.0}}
    big["bootstrap"] = {**big["bootstrap"], "games": 1668}
    (tmp_path / "eval-validation.json").write_text(json.dumps(big))
    text = report.write_report(tmp_path).read_text()
    assert "22,027 positions (21,513 decisive, 514 draws)" in text
    assert "| `CPU:0` | 22,027 | 0.6000 | 0.6500 |" in text
    assert "bootstrap over 1,668 games" in text


def test_report_and_summary_label_an_in_sample_evaluation(tmp_path) -> None:
    write_metrics(tmp_path, gpus=1)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["CPU:0"],
                                                   "num_replicas": 1}))
    dataset = {"data_dir": "/data", "manifest": "ab" * 32,
               "splits": {"train": {"games": 16, "positions": 80, "digest": "0"},
                          "validation": {"games": 3, "positions": 20, "digest": "1"}}}
    scored = {**EVAL, "games": 19, "dataset": dataset, "data_check": {"status": "same", "detail": ""}}
    (tmp_path / "eval-all.json").write_text(json.dumps({**scored, "split": "all"}))
    (tmp_path / "eval-validation.json").write_text(json.dumps({**scored, "games": 3}))
    label = ("IN-SAMPLE: 16 of these 19 games are the run's training games (split all): not a held-out "
             "figure; score --split validation or test, or a held-out set with --data")
    text = report.write_report(tmp_path).read_text()
    assert text.count("IN-SAMPLE") == 1
    assert text.index(label) > text.index("## Evaluation: all") and "## Evaluation: validation" in text
    assert summary.summary_table(tmp_path, "all").splitlines()[0] == f"WARNING: {label}"
    assert "IN-SAMPLE" not in summary.summary_table(tmp_path, "validation")
