"""Shared test fixtures. Paths to the bundled fixtures and to ../shared when present.

TensorFlow is not imported here: the data-side tests (rules, kifu, dataset, convert, ...) run without
it (tests/test_architecture.py checks). The CPU is split into logical devices when, and only when,
something first imports TensorFlow (a TF test module at collection, or a test at run time).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

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


# Logical CPU devices for tower tests: TF can split the CPU only before its runtime initialises, so it is
# done right after TensorFlow's own import, before any test (or test module) can touch TensorFlow. Tests
# pick 1, 2 or 4 of these devices through devices.make_strategy(simulate_devices=N).
TEST_DEVICES = 4


def split_cpu(tf: ModuleType) -> None:
    """Split the CPU into TEST_DEVICES logical devices (nothing when TF's runtime already started)."""
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(TEST_DEVICES)])
    except RuntimeError:   # already initialised (by a plugin): tests use what is there
        pass


class SplitCpuOnTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `tensorflow` is first imported, it lets the other finders find it and
    has its loader run split_cpu right after the module's own code (before the importer goes on)."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)             # once; and the search below does not come back here
        spec = importlib.util.find_spec(name)
        if spec is None or not isinstance(spec.loader, importlib.abc.Loader):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_split(module: ModuleType) -> None:
            exec_module(module)
            split_cpu(module)
        spec.loader.exec_module = exec_then_split        # type: ignore[method-assign]
        return spec


def pytest_configure(config: pytest.Config) -> None:
    """Split the CPU when TensorFlow gets imported (at once when a plugin imported it already)."""
    if "tensorflow" in sys.modules:
        split_cpu(sys.modules["tensorflow"])
    elif not any(isinstance(f, SplitCpuOnTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, SplitCpuOnTensorFlowImport())
