"""prose_density counts docstring, comment and code characters of a tiny module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "prose_density.py"
_spec = importlib.util.spec_from_file_location("prose_density", _PATH)
assert _spec is not None and _spec.loader is not None
prose_density = importlib.util.module_from_spec(_spec)
sys.modules["prose_density"] = prose_density
_spec.loader.exec_module(prose_density)

_SRC = '"""Mod."""\n\ndef f():\n    """Fn."""\n    return 1  # one\n'


def test_counts_tiny_fixture(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(_SRC)
    d = prose_density.measure(tmp_path)
    assert (d.doc, d.comments, d.code) == (len("Mod.") + len("Fn."), len("# one"),
                                          len("def f():") + len("return 1"))
    assert prose_density.main([str(tmp_path)]) == 0


def test_missing_folder_is_one_line_error(tmp_path: Path, capsys) -> None:
    assert prose_density.main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
