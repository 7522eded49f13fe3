"""Our readers against the fidelity corpus (scripts/fidelity_corpus.py).

Every game the independent reader (cshogi, else python-shogi) reads must agree with ours exactly, or be
one of tests/data/fidelity/OVERRIDES.tsv: a documented bug of that reader, with the record's own reading
by hand, which ours must then give. The full comparison runs when the corpus is built (datasets/raw/
fidelity, or $SHOGI_DNN_FIDELITY) and skips otherwise; the tables themselves are checked always."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("SHOGI_DNN_FIDELITY", ROOT / "datasets" / "raw" / "fidelity"))


def _script():
    spec = importlib.util.spec_from_file_location("fidelity_corpus", ROOT / "scripts" / "fidelity_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)       # type: ignore[union-attr]
    return module


def _expected() -> list[dict[str, str]]:
    with open(_script().EXPECTED, encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_manifest_lists_real_files_from_many_sources() -> None:
    rows = _script().read_manifest()
    assert len(rows) >= 300 and len({r["repo"] for r in rows}) >= 20
    assert all(len(r["sha256"]) == 64 and len(r["commit"]) == 40 for r in rows)
    assert len({r["local"] for r in rows}) == len(rows) == len({r["sha256"] for r in rows})
    assert {r["local"] for r in rows} == {r["local"] for r in _expected()}


def test_every_override_names_a_peer_reading_of_the_expected_table() -> None:
    script = _script()
    peer = {(r["local"], int(r["game"])): (r["basis"], f"{r['moves']} {r['winner']} {r['ending']}")
            for r in _expected() if r["basis"] != "unreadable"}
    overrides = script.read_overrides()
    assert overrides
    for key, row in overrides.items():
        assert peer.get(key) == (row["reader"].split()[0], row["peer"]), key    # that peer, that reading
        assert len(row["reason"]) > 40, key
        assert row["truth"].startswith("refused: ") or re.fullmatch(r"\d+ (black|white|draw|unknown) \w+",
                                                                    row["truth"]), key
        fields = row["field"].split(",")
        assert set(fields) <= {"moves", "winner", "ending", "game"}, key
        if fields != ["game"]:          # the fields named are those where peer and truth differ
            named = [n for n, a, b in zip(("moves", "winner", "ending"), row["peer"].split(),
                                          row["truth"].split()) if a != b]
            assert named == fields, key


def test_the_readme_and_records_doc_state_the_agreement_of_the_tables() -> None:
    overrides = _script().read_overrides()
    games = sum(r["basis"] != "unreadable" for r in _expected())
    files = len({r["local"] for r in _expected()})
    figure = f"{games - len(overrides)} of {games} games"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    records = (ROOT / "docs" / "records.md").read_text(encoding="utf-8")
    assert figure in readme and figure in records
    assert f"{len(overrides)} " in records and f"{files} real record files" in records


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.exists(), reason=f"fidelity corpus not built at {CORPUS}")
def test_every_game_agrees_with_the_independent_reader_or_its_documented_override() -> None:
    result = _script().compare(CORPUS)
    assert result["disagreements"] == []
    assert result["stale_overrides"] == []
    assert result["agreed"] + result["overridden"] == result["games"]
