"""Fixtures for annotate's tests: a small converted dataset and fake USI engines (fake_usi.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from shogi_dnn.convert.run import ConvertSettings, run_convert
from tests.annotate import fake_usi
from tests.support.kifugen import write_corpus


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 random games converted (train and validation; no evaluations): about 500 positions."""
    root = tmp_path_factory.mktemp("annotate-source")
    write_corpus(root / "records", seed=3, files=2, per_file=6)
    run_convert([root / "records"], root / "data", ConvertSettings(val_fraction=0.25), workers=1)
    return root / "data"


@pytest.fixture
def fake_engine(tmp_path: Path) -> Callable[..., str]:
    """make(**config) -> the path of an executable fake engine with that config (fake_usi.py)."""
    count = [0]

    def make(**config: object) -> str:
        count[0] += 1
        return fake_usi.write_engine(tmp_path / f"engine{count[0]}", **config)

    return make
