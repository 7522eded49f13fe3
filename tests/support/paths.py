"""Paths of the test tree: bundled fixtures, the repository, ../shared beside it."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
DATA = TESTS / "data"
REPO = TESTS.parent
SHARED = REPO.parent / "shared"
