"""ETA and cost fields of the training log (run_log.eta_fields, the trainer's remaining updates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shogi_dnn.training import run_log
from shogi_dnn.wording import format_duration


def test_eta_fields_from_the_measured_rate() -> None:
    fields = run_log.eta_fields((10, 30, 100), update_batch=128, positions_per_s=640.0, elapsed_s=1800.0,
                                price_per_hour=7.2)
    assert fields["eta_stage_s"] == pytest.approx(10 * 128 / 640)
    assert fields["eta_epoch_s"] == pytest.approx(6.0)
    assert fields["eta_run_s"] == pytest.approx(20.0)
    assert fields["cost_so_far"] == pytest.approx(3.6)
    assert fields["cost_at_end"] == pytest.approx(7.2 * 1820 / 3600)
    assert "cost_so_far" not in run_log.eta_fields((1, 1, 1), 128, 640.0, 10.0)      # no price, no cost
    assert run_log.eta_fields((1, 1, 1), 128, None, 10.0) == {}                      # no rate, no ETA


@pytest.mark.parametrize("seconds, text",
                         [(42.4, "42.4s"), (425, "7m05s"), (11520, "3h12m"), (187200, "2d04h")])
def test_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text          # one format for train's ETA and plan's table


def test_console_line_carries_eta_and_cost() -> None:
    record = {"kind": "train", "step": 10, "samples": 1280, "epoch": 0, "stage": 1, "group": 0, "loss": 0.6,
              "accuracy": 0.5, "positions_per_s": 640.0, "per_gpu": [{}],
              **run_log.eta_fields((10, 30, 100), 128, 640.0, 1800.0, 7.2)}
    line = run_log.console_line(record)
    assert "eta stage 2.0s epoch 6.0s run 20.0s" in line and "cost 3.60 -> 3.64" in line


def test_training_log_has_eta_counting_down_to_zero(tmp_path: Path) -> None:
    from tests.support.shardgen import make_dataset
    from tests.training.test_trainer import tiny_config, train

    data = tmp_path / "data"
    make_dataset(data, train=[200, 160, 180], validation=[100], chunk_rows=32)
    trainer, _ = train(tiny_config(), data, tmp_path / "run", devices=1)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_lines = [r for r in lines if r["kind"] == "train"]
    assert all({"eta_stage_s", "eta_epoch_s", "eta_run_s"} <= set(r) for r in train_lines)
    start = trainer.plan.initial_state()
    plan = trainer.plan
    stages = [[plan.stage(e, i).updates for i in range(plan.num_groups)] for e in range(plan.epochs)]
    assert trainer._remaining_updates(start) == (stages[0][0], sum(stages[0]), sum(map(sum, stages)))
    assert train_lines[-1]["eta_run_s"] == 0.0 and train_lines[-1]["eta_stage_s"] == 0.0
    assert all(r["eta_stage_s"] <= r["eta_epoch_s"] <= r["eta_run_s"] for r in train_lines)
