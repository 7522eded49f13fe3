"""prose_density: docstring characters over the rest of the source, by package; the baseline check."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "prose_density.py"
_spec = importlib.util.spec_from_file_location("prose_density", _PATH)
assert _spec is not None and _spec.loader is not None
prose_density = importlib.util.module_from_spec(_spec)
sys.modules["prose_density"] = prose_density
_spec.loader.exec_module(prose_density)

_SRC = '"""Mod."""\n\ndef f():\n    """Fn."""\n    return 1  # one\n'


def test_counts_docstrings_and_the_rest_by_package(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(_SRC)
    (tmp_path / "top.py").write_text("x = 1\n")
    got = prose_density.measure(tmp_path)
    doc = len("Mod.") + len("Fn.")
    assert got["pkg"] == prose_density.Density(doc, len(_SRC) - doc)
    assert got[prose_density.TOP] == prose_density.Density(0, len("x = 1\n"))
    assert prose_density.main([str(tmp_path)]) == 0


def test_the_baseline_only_goes_down(tmp_path: Path, capsys) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(_SRC)
    baseline = tmp_path / "baseline.json"
    assert prose_density.main([str(tmp_path), "--write-baseline", str(baseline)]) == 0
    assert prose_density.main([str(tmp_path), "--check", str(baseline)]) == 0
    (tmp_path / "pkg" / "m.py").write_text(_SRC.replace('"""Fn."""', '"""A much longer function docstring."""'))
    assert prose_density.main([str(tmp_path), "--check", str(baseline)]) == 1
    assert "pkg: prose density" in capsys.readouterr().err
    assert json.loads(baseline.read_text())["pkg"] > 0


def test_missing_folder_is_one_line_error(tmp_path: Path, capsys) -> None:
    assert prose_density.main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
