"""notebooks/walkthrough.ipynb runs top to bottom on a tiny run (nbclient, a real kernel)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import DATA, REPO
from tests.evaldata import material_dataset
from tests.evalrun import make_random_run
from tests.metricsgen import write_metrics

NOTEBOOK = REPO / "notebooks" / "walkthrough.ipynb"


@pytest.mark.slow
def test_walkthrough_notebook_executes(tmp_path, monkeypatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    material_dataset(tmp_path / "data", {"train": (200, 0.9, False), "validation": (100, 0.5, True)})
    run_dir = make_random_run(tmp_path / "run", tmp_path / "data", devices=2)
    write_metrics(run_dir, gpus=2)
    monkeypatch.setenv("SHOGI_DNN_RUN", str(run_dir))
    monkeypatch.setenv("SHOGI_DNN_GAME", str(DATA / "predict" / "floodgate_81.csa"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any("def " in cell.source for cell in notebook.cells if cell.cell_type == "code")
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    assert "towers balanced" in outputs and "side to move" in outputs and "<- swing" in outputs
    assert (run_dir / "eval-validation.json").is_file() and (run_dir / "walkthrough-game.png").stat().st_size > 0
    assert (run_dir / "plots" / "calibration.png").is_file()
