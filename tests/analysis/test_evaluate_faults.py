"""evaluate on awkward runs and data: a split without a decisive position (undefined accuracy: "n/a" in
the table, null in the JSON), a read-only run folder (refused before any work)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shogi_dnn import cli
from tests.support.cli import refusal_in_fresh_process
from tests.support.evaldata import material_dataset
from tests.support.evalrun import make_random_run


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random run on a dataset whose validation split is all draws."""
    root = tmp_path_factory.mktemp("drawn")
    material_dataset(root / "data", {"train": (200, 0.9, False), "validation": (60, 0.5, False)},
                     eval_share={"train": 0.8, "validation": 0.7}, draw_splits=("validation",))
    return make_random_run(root / "run", root / "data", devices=1)


def _strict_json(path: Path) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_a_split_without_a_decisive_position_shows_undefined_metrics(drawn: Path, capsys) -> None:
    # All draws: accuracy has no decisive position; it was NaN and the JSON write raised ValueError.
    assert cli.main(["evaluate", "--run-dir", str(drawn), "--simulate-devices", "1"]) == 0
    out = capsys.readouterr().out
    model = next(line for line in out.splitlines() if line.startswith("model  "))
    assert model.split()[2] == "n/a" and "accuracy n/a, log loss" in out
    result = _strict_json(drawn / "eval-validation.json")
    assert result["decisive"] == 0 and result["accuracy"] is None
    assert result["intervals"]["accuracy"] == [None, None] and None not in result["intervals"]["loss"]
    assert result["comparisons"]["material"]["accuracy"] == {"estimate": None, "lo": None, "hi": None,
                                                             "resolved": False}


@pytest.fixture
def read_only_view(drawn: Path, tmp_path: Path) -> Iterator[Path]:
    """The run folder through a read-only bind mount; skipped where mounting is not allowed."""
    view = tmp_path / "ro"
    view.mkdir()
    done = subprocess.run(["mount", "--bind", str(drawn), str(view)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot bind-mount here ({done.stderr.decode(errors='replace').strip()})")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True, capture_output=True)
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=False)


def test_a_read_only_run_folder_is_refused_before_the_model_loads(read_only_view: Path) -> None:
    # It scored the whole split, then failed naming a temp file, with no table printed.
    err = refusal_in_fresh_process(["evaluate", "--run-dir", str(read_only_view), "--simulate-devices", "1"])
    assert err.strip() == (f"shogi-dnn evaluate: error: --run-dir {read_only_view}: cannot write there "
                           "(Read-only file system); choose a writable folder")
