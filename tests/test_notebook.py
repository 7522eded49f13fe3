"""notebooks/walkthrough.ipynb runs top to bottom on a tiny run (nbclient, a real kernel)."""

from __future__ import annotations

import os

import pytest

from tests.support.paths import DATA, REPO
from tests.support.trainedrun import trained_run

NOTEBOOK = REPO / "notebooks" / "walkthrough.ipynb"


@pytest.mark.slow
def test_walkthrough_notebook_executes(tmp_path, tmp_path_factory, monkeypatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    run_dir, _ = trained_run(tmp_path_factory)         # train/cpu-smoke.toml, 2 simulated towers
    monkeypatch.setenv("SHOGI_DNN_RUN", str(run_dir))
    monkeypatch.setenv("SHOGI_DNN_GAME", str(DATA / "predict" / "floodgate_81.csa"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any("def " in cell.source for cell in notebook.cells if cell.cell_type == "code")
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    assert "records;" in outputs and "side to move" in outputs and "<- swing" in outputs
    balance = next(c for c in notebook.cells if "find_unbalanced_towers" in c.source)
    verdict = "".join(out.get("text", "") for out in balance.outputs)
    assert verdict.startswith(("towers balanced", "GPU "))       # the tower-balance cell printed its verdict
    assert (run_dir / "eval-validation.json").is_file() and (run_dir / "walkthrough-game.png").stat().st_size > 0
    assert (run_dir / "plots" / "calibration.png").is_file()
