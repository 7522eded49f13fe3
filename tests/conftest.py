"""Shared test fixtures. Paths to the bundled fixtures and to ../shared when present."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest

from tests.support.paths import DATA, SHARED


@pytest.fixture
def data_dir() -> Path:
    """tests/data: small record fixtures (some copied from ../shared/kifu)."""
    return DATA


@pytest.fixture
def shared_dir() -> Path:
    """../shared beside the repo; tests that need it skip when it is absent."""
    if not SHARED.is_dir():
        pytest.skip("../shared is absent")
    return SHARED


# Logical CPU devices for tower tests: TF can split the CPU only before it initialises, so do it once
# here, at collection time, before any test touches TensorFlow. Tests pick 1, 2 or 4 of these devices
# through devices.make_strategy(simulate_devices=N).
TEST_DEVICES = 4


def pytest_configure(config: pytest.Config) -> None:
    """Split the CPU into TEST_DEVICES logical devices (no-op when TensorFlow is not installed)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(TEST_DEVICES)])
    except RuntimeError:   # already initialised by a plugin: tests use what is there
        pass
