"""Devices and strategies (devices.py): one device is a OneDeviceStrategy, several a MirroredStrategy;
bad requests are one-line errors. Uses conftest's logical CPU devices."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from shogi_dnn.errors import RunError
from shogi_dnn.training.devices import make_strategy


def test_make_strategy_errors() -> None:
    assert make_strategy(simulate_devices=4).num_replicas_in_sync == 4
    with pytest.raises(RunError, match="simulate-devices 64"):
        make_strategy(simulate_devices=64)
    with pytest.raises(RunError, match="unknown device"):
        make_strategy(devices=["/gpu:7"])
    one = make_strategy(devices=["/cpu:1"])
    # one device: tf.distribute's one-device strategy, pinned to the listed device (same step code)
    assert isinstance(one, tf.distribute.OneDeviceStrategy) and one.num_replicas_in_sync == 1
    assert [d.upper() for d in one.extended.worker_devices] == [
        "/JOB:LOCALHOST/REPLICA:0/TASK:0/DEVICE:CPU:1"]
    assert isinstance(make_strategy(simulate_devices=1), tf.distribute.OneDeviceStrategy)
    assert isinstance(make_strategy(simulate_devices=2), tf.distribute.MirroredStrategy)
