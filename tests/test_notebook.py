"""notebooks/walkthrough.ipynb runs top to bottom as Jupyter runs it (nbclient, a real kernel started in
notebooks/), on a tiny run named relative to the repository, leaves the run's files as they are and
prints the numbers of the `evaluate` command."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from shogi_dnn import cli
from tests.support.paths import DATA, REPO
from tests.support.trainedrun import trained_run

NOTEBOOK = REPO / "notebooks" / "walkthrough.ipynb"
TIMING_KEYS = ("seconds", "positions_per_s")      # the only keys two evaluations of one run may differ in


@pytest.mark.slow
def test_walkthrough_notebook_executes(tmp_path, tmp_path_factory, monkeypatch, capsys) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    trained, _ = trained_run(tmp_path_factory)         # train/cpu-smoke.toml, 2 simulated towers
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    assert cli.main(["evaluate", "--run-dir", str(run_dir), "--split", "validation"]) == 0
    table = capsys.readouterr().out.split("\n\nwrote ")[0]
    before = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    monkeypatch.setenv("SHOGI_DNN_RUN", os.path.relpath(run_dir, REPO))     # as from the repository's folder
    monkeypatch.setenv("SHOGI_DNN_GAME", os.path.relpath(DATA / "predict" / "floodgate_81.csa", REPO))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any("def " in cell.source for cell in notebook.cells if cell.cell_type == "code")
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    assert "records;" in outputs and "side to move" in outputs and "<- swing" in outputs
    balance = next(c for c in notebook.cells if "find_unbalanced_towers" in c.source)
    verdict = "".join(out.get("text", "") for out in balance.outputs)
    assert verdict.startswith(("towers balanced", "GPU ", "CPU "))   # the tower-balance cell's verdict
    after = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert {p: b for p, b in after.items() if p.parts[0] != "walkthrough"} == before   # the run's own files
    out = run_dir / "walkthrough"
    assert (out / "game.png").stat().st_size > 0 and (out / "plots" / "calibration.png").is_file()
    # The notebook's evaluation is the command's: the same JSON but for the timing, the same table.
    own, command = (json.loads(p.read_text()) for p in (out / "eval-validation.json",
                                                        run_dir / "eval-validation.json"))
    assert own["mirror_average"] is True
    assert {k: v for k, v in own.items() if k not in TIMING_KEYS} == \
        {k: v for k, v in command.items() if k not in TIMING_KEYS}
    assert table in outputs
