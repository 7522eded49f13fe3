"""Shared test fixtures. Paths to the bundled fixtures and to ../shared when present."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
REPO = TESTS.parent
SHARED = REPO.parent / "shared"


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
