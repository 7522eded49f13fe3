"""Optimizer and lr schedule (optimizer.py): lr scaling, warm-up and its cap, cosine decay, the lr the
optimizer reads. Uses conftest's logical CPU devices."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from shogi_dnn.config import OptimConfig
from shogi_dnn.errors import ConfigError
from shogi_dnn.training.devices import make_strategy
from shogi_dnn.training.optimizer import (
    WarmupSchedule,
    build_optimizer,
    current_lr,
    make_lr_schedule,
    scaled_lr,
)
from shogi_dnn.training.steps import UpdateSpec, make_train_step
from tests.training.test_steps import random_batch, tiny_model


def test_lr_scaling_and_warmup() -> None:
    base = OptimConfig(lr=0.1, base_global_batch=256)
    assert scaled_lr(base, 1024) == pytest.approx(0.4)
    for scaling, lr in (("sqrt", 0.2), ("none", 0.1)):
        cfg = OptimConfig(lr=0.1, base_global_batch=256, lr_scaling=scaling)
        assert scaled_lr(cfg, 1024) == pytest.approx(lr)
    schedule = make_lr_schedule(OptimConfig(lr=0.1, base_global_batch=256, warmup_samples=4096), 1024)
    assert schedule.warmup_steps == 4
    values = [float(schedule(tf.constant(s))) for s in range(6)]
    assert values == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])


def test_cosine_lr_decay() -> None:
    cfg = OptimConfig(lr=0.1, base_global_batch=256, lr_scaling="none", warmup_samples=2048,
                      lr_decay="cosine")
    # 2 warm-up updates, 4 of decay (the schedule itself: make_lr_schedule would cap 2 of 6 at 10%)
    schedule = WarmupSchedule(scaled_lr(cfg, 1024), 2, cfg.lr_decay, 6)
    values = [float(schedule(tf.constant(s))) for s in range(8)]
    assert values == pytest.approx([0.05, 0.1, 0.1, 0.1 * 0.5 * (1 + np.cos(np.pi / 4)), 0.05,
                                    0.1 * 0.5 * (1 + np.cos(3 * np.pi / 4)), 0.0, 0.0], abs=1e-7)
    restored = WarmupSchedule.from_config(schedule.get_config())
    assert [float(restored(tf.constant(s))) for s in range(8)] == pytest.approx(values)
    constant = make_lr_schedule(OptimConfig(lr=0.1, base_global_batch=256, lr_scaling="none"), 1024, 6)
    assert [float(constant(tf.constant(s))) for s in (0, 5, 100)] == pytest.approx([0.1] * 3)
    with pytest.raises(ConfigError, match="lr_decay"):
        make_lr_schedule(cfg, 1024)                               # no run length to decay over


def test_warmup_is_capped_at_a_tenth_of_the_run(caplog: pytest.LogCaptureFixture) -> None:
    """cpu-small's 20,000 warm-up samples on a folder of 88 games (~195 updates of 128 over 3 epochs) were
    157 updates, 80% of the run: capped at 19 (10%), with one line; a warm-up within 10% is left alone."""
    cfg = OptimConfig(lr=3e-4, base_global_batch=128, lr_scaling="none", warmup_samples=20_000,
                      lr_decay="cosine")
    with caplog.at_level("WARNING", logger="shogi_dnn.training.optimizer"):
        schedule = make_lr_schedule(cfg, 128, total_steps=195)
    assert schedule.warmup_steps == 19 and schedule.total_steps == 195
    assert caplog.messages == ["optim.warmup_samples = 20,000 is 157 updates of this run's 195 planned "
                               "updates (81%): warming up over 19 updates (10% of the run, 2,432 samples) "
                               "instead"]
    assert float(schedule(tf.constant(18))) == pytest.approx(3e-4)          # the peak from update 19 on
    caplog.clear()
    with caplog.at_level("WARNING", logger="shogi_dnn.training.optimizer"):
        long_run = make_lr_schedule(cfg, 128, total_steps=5000)    # 157 of 5000: kept
        no_length = make_lr_schedule(dataclasses.replace(cfg, lr_decay="none"), 128)   # bench: no cap
    assert long_run.warmup_steps == 157 and no_length.warmup_steps == 157 and not caplog.messages


def test_optimizer_lr_follows_schedule() -> None:
    strategy = make_strategy(simulate_devices=2)
    with strategy.scope():
        model = tiny_model()
    cfg = OptimConfig(lr=0.1, base_global_batch=32, lr_scaling="sqrt", warmup_samples=256)
    optimizer = build_optimizer(cfg, 64, strategy=strategy, model=model, micro_batches=2)
    # update batch 128 = 4x the base: sqrt -> 0.2 peak, warm-up over 2 updates
    assert current_lr(optimizer) == pytest.approx(0.1)
    step = make_train_step(strategy, model, optimizer, UpdateSpec(64, micro_batches=2))
    data = iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors(random_batch(64)).repeat()))
    step(next(data), next(data))
    assert current_lr(optimizer) == pytest.approx(0.2)
