"""Assembly (assembly.py): a step is built from a Config and runs on an in-memory batch, with no dataset
on disk (flax-style one-step test). Uses conftest's logical CPU devices."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from shogi_dnn.config import from_dict
from shogi_dnn.dataset.evalfit import EvalTarget
from shogi_dnn.training.assembly import StepParts, build_step_parts
from shogi_dnn.training.devices import local_values, make_strategy
from shogi_dnn.training.losses import METRIC_KEYS, LossSpec
from tests.training.test_steps import random_batch

CONFIG = from_dict({"model": {"blocks": 1, "filters": 8, "value_hidden": 8},
                    "optim": {"optimizer": "adam", "lr": 0.01, "warmup_samples": 0, "lr_decay": "none"},
                    "train": {"per_replica_batch": 8, "seed": 3, "eval_weight": 0.0}})


def _one_update(parts: StepParts, batch: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """One update through parts.update (the loop's own step) on `batch`; the per-tower sums."""
    data = tf.data.Dataset.from_tensors(batch)
    iterator = iter(parts.strategy.experimental_distribute_dataset(data))
    out = parts.update(iterator)
    return {key: local_values(parts.strategy, value) for key, value in out.items()}


@pytest.mark.parametrize("devices", [1, 2])
def test_a_step_built_from_a_config_trains_on_an_in_memory_batch(devices: int) -> None:
    parts = build_step_parts(CONFIG, make_strategy(simulate_devices=devices))
    assert parts.global_batch == 8 * devices and parts.update_batch == parts.global_batch
    before = [v.numpy().copy() for v in parts.model.trainable_variables]
    sums = _one_update(parts, random_batch(parts.global_batch, seed=1))
    assert set(METRIC_KEYS) <= set(sums) and sums["count"] == [8.0] * devices
    assert all(math.isfinite(v) and v > 0 for v in sums["loss_sum"])
    after = [v.numpy() for v in parts.model.trainable_variables]
    assert max(float(np.abs(a - b).max()) for a, b in zip(before, after)) > 1e-5
    assert int(parts.optimizer.iterations.numpy()) == 1


def test_an_evaluation_target_changes_the_update_but_not_the_logged_loss() -> None:
    batch = random_batch(16, seed=2)
    batch["eval"] = np.where(np.arange(16) % 2 == 0, -32768, 600).astype(np.int16)
    plain = build_step_parts(CONFIG, make_strategy(simulate_devices=1))
    target = EvalTarget(0.5, 300.0, None, "constant", None, 0.5)
    blended = build_step_parts(CONFIG, make_strategy(simulate_devices=1), eval_target=target)
    plain_sums, blended_sums = _one_update(plain, batch), _one_update(blended, batch)
    assert plain_sums["loss_sum"] == blended_sums["loss_sum"]      # the logged loss is about results
    differ = [float(np.abs(a.numpy() - b.numpy()).max())
              for a, b in zip(plain.model.trainable_variables, blended.model.trainable_variables)]
    assert max(differ) > 1e-7


def test_micro_batches_and_the_eval_step() -> None:
    config = dataclasses.replace(CONFIG, train=dataclasses.replace(CONFIG.train, micro_batches=2))
    parts = build_step_parts(config, make_strategy(simulate_devices=2))
    assert parts.update_batch == 2 * parts.global_batch == 32
    data = tf.data.Dataset.from_tensor_slices({k: np.stack([v[:16], v[16:]])
                                               for k, v in random_batch(32, seed=4).items()})
    out = parts.update(iter(parts.strategy.experimental_distribute_dataset(data)))
    assert sum(local_values(parts.strategy, out["count"])) == 32
    evaluated = parts.eval_step(next(iter(parts.strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors(random_batch(16, seed=5))))))
    assert local_values(parts.strategy, evaluated["count"]) == [8.0, 8.0]


def test_the_loss_spec_is_built_once_from_the_config_and_the_target() -> None:
    config = dataclasses.replace(CONFIG, train=dataclasses.replace(CONFIG.train, policy_weight=0.25,
                                                                   no_result_weight=0.5))
    target = EvalTarget(0.5, 300.0, (1.0, 0.5), "trust", None, 0.5)
    parts = build_step_parts(config, make_strategy(simulate_devices=1), eval_target=target, no_result=True)
    assert parts.spec.loss == LossSpec(0.5, 300.0, (1.0, 0.5), 0.25, 0.5)
    assert parts.spec.loss.masks_results
    plain = build_step_parts(config, make_strategy(simulate_devices=1))   # no positions without a result
    assert plain.spec.loss == LossSpec(0.0, 756.0, None, 0.25, None)
