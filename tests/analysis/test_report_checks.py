"""report_checks: the plan's throughput against the run's measured one (the data check of evaluations is
tests/analysis/test_data_check.py)."""

from __future__ import annotations

import json

import pytest

from shogi_dnn.analysis import report, report_checks
from shogi_dnn.training import throughput
from tests.support.metricsgen import write_metrics


def test_plan_vs_measured(tmp_path) -> None:
    write_metrics(tmp_path, gpus=2)                       # every train line: 2 x 1000 positions/s
    (tmp_path / "run.json").write_text(json.dumps({"num_replicas": 2, "global_batch": 64}))
    fits = {1: throughput.ThroughputFit(1, 258.0, 0.054), 2: throughput.ThroughputFit(2, 514.0, 0.15)}
    check = report_checks.plan_check(tmp_path, fits)
    predicted = 64 / (64 / 514.0 + 0.15)
    assert check.fit_devices == 2 and check.predicted == pytest.approx(predicted) and check.measured == 2000.0
    assert check.ratio == pytest.approx(2000.0 / predicted)
    path = report.write_report(tmp_path, fits)
    assert "## Plan vs measured" in path.read_text() and f"{predicted:,.0f} positions/s" in path.read_text()
    assert "Plan vs measured" not in report.write_report(tmp_path).read_text()      # no fit, no section


def test_no_plan_check_without_a_training_rate_or_batch(tmp_path) -> None:
    fits = {1: throughput.ThroughputFit(1, 258.0, 0.054)}
    write_metrics(tmp_path, gpus=1)
    (tmp_path / "run.json").write_text(json.dumps({"num_replicas": 1}))              # no global batch
    assert report_checks.plan_check(tmp_path, fits) is None
    (tmp_path / "run.json").write_text(json.dumps({"num_replicas": 1, "global_batch": 64}))
    (tmp_path / "metrics.jsonl").write_text('{"kind": "validation", "loss": 0.6}\n')
    assert report_checks.plan_check(tmp_path, fits) is None
