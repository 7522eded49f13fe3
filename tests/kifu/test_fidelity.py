"""Our readers against the fidelity corpus (scripts/fidelity_corpus.py): runs when the corpus is built
(datasets/raw/fidelity, or $SHOGI_DNN_FIDELITY), skips otherwise. The agreement may only grow: the
disagreements allowed are those of tests/data/fidelity/AGREEMENT-after.txt, each with its cause."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("SHOGI_DNN_FIDELITY", ROOT / "datasets" / "raw" / "fidelity"))


def _script():
    spec = importlib.util.spec_from_file_location("fidelity_corpus", ROOT / "scripts" / "fidelity_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)       # type: ignore[union-attr]
    return module


def test_manifest_lists_real_files_from_many_sources() -> None:
    rows = _script().read_manifest()
    assert len(rows) >= 250 and len({r["repo"] for r in rows}) >= 20
    assert all(len(r["sha256"]) == 64 and len(r["commit"]) == 40 for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.exists(), reason=f"fidelity corpus not built at {CORPUS}")
def test_agreement_with_the_independent_reader_does_not_drop() -> None:
    script = _script()
    result = script.compare(CORPUS)
    allowed = (ROOT / "tests" / "data" / "fidelity" / "AGREEMENT-after.txt").read_text(encoding="utf-8")
    floor = int(allowed.split("agreed ")[1].split()[0])
    assert result["agreed"] >= floor
    for d in result["disagreements"]:
        assert f"{d['local']}#{d['game']}:" in allowed, d
