"""datasets/: the README's schema table matches shards.py; the bundled sample converts completely."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn import cli
from shogi_dnn.convert.run import REPORT_NAME
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import EVAL_NONE
from tests.support.paths import REPO

SAMPLE = REPO / "datasets" / "sample"
ARCHIVE = REPO / "datasets" / "gnushogi.tar.xz"      # the demo's corpus (make demo, bench convert)
ENGINE_ARCHIVE = REPO / "datasets" / "fairy.tar.xz"  # make demo-engine: games with engine evaluations


def _module_table() -> list[list[str]]:
    doc = shards.__doc__ or ""
    body = doc[doc.index("  dataset"):doc.index("  attrs:")].strip().splitlines()[1:]
    return [re.split(r"\s{2,}", line.strip()) for line in body]


def _readme_table() -> list[list[str]]:
    text = (REPO / "datasets" / "README.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    table = [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows]
    return [row for row in table if row[0] in {r[0] for r in _module_table()}]


def test_readme_schema_table_matches_the_module() -> None:
    assert _readme_table() == _module_table()
    assert {r[0] for r in _module_table()} >= set(shards.STORED_SCHEMA)


@pytest.mark.slow
def test_sample_converts_every_game(tmp_path: Path) -> None:
    out = tmp_path / "sample"
    assert cli.main(["convert", str(SAMPLE), "--out", str(out), "--workers", "2", "--no-progress"]) == 0
    report = json.loads((out / REPORT_NAME).read_text())
    # --dedup (default): GNU Shogi's self-play repeats itself, so 2 of its games are dropped as copies of
    # an earlier one: gnushogi-0012.csa:1057 (114 moves) repeats gnushogi-0000.csa:402 and
    # gnushogi-0012.csa:2805 (150 moves) repeats gnushogi-0012.csa:373.
    assert report["files_read"] == 8 and report["errors"] == [] and report["skipped"] == {"duplicate": 2}
    assert report["games_found"] == 136 and report["converted"] == 134   # 100 + 30 gnushogi, 6 real; - 2
    # 17,289 from ../shared/kifu-gnushogi/SUMMARY.tsv (plies + 1) + 883 from ../shared/kifu/DETAILS.tsv
    # = 18,172 read, less the 115 + 151 positions of the 2 duplicates
    assert report["positions_total"] == 18172 - 115 - 151 == 17906
    sources = {s for info in shards.read_manifest(out).shards
               for s in shards.read_games(out / info.path)["source"]}
    assert sum(".kif" in s for s in sources) == 3 and sum("gnushogi" in s for s in sources) == 2


def test_demo_archive_is_small_and_holds_the_csa_files_and_readme() -> None:
    import tarfile

    assert ARCHIVE.stat().st_size < 600_000
    with tarfile.open(ARCHIVE) as archive:
        names = archive.getnames()
    assert names[0] == "gnushogi/README.md" and len(names) == 20
    assert all(re.fullmatch(r"gnushogi/gnushogi-\d{4}\.csa", n) for n in names[1:])


@pytest.mark.slow
def test_demo_archive_converts_every_game(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    assert cli.main(["convert", str(ARCHIVE), "--out", str(out), "--val-fraction", "0.1", "--no-progress"]) == 0
    report = json.loads((out / REPORT_NAME).read_text())
    # every game read; the 138 games GNU Shogi repeated move for move are dropped (convert --dedup, the default)
    assert report["games_found"] == 1886 and report["converted"] == 1748 and report["errors"] == []
    assert report["skipped"] == {"duplicate": 138}
    assert report["games"]["validation"] == 174 and report["positions_total"] == 234558


def _make_variable(name: str) -> str:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return re.search(rf"^{name} \??= (\S+)", text, re.MULTILINE).group(1)


@pytest.mark.slow
def test_the_demo_predicts_a_validation_game(tmp_path: Path) -> None:
    """make demo's predict example is a game the model did not train on: its start line in the archive
    is listed in the validation split of the demo's conversion, and in no training shard."""
    out = tmp_path / "demo"
    assert cli.main(["convert", str(ARCHIVE), "--out", str(out), "--val-fraction", "0.1", "--no-progress"]) == 0
    member, game = _make_variable("DEMO_GAME_FILE"), int(_make_variable("DEMO_GAME"))
    import tarfile

    with tarfile.open(ARCHIVE) as archive:
        text = archive.extractfile(member).read().decode()
    starts = [1] + [i + 2 for i, line in enumerate(text.splitlines()) if line == "/"]
    line = starts[game - 1]
    manifest = shards.read_manifest(out)
    where = set()
    for info in manifest.shards:
        games = shards.read_games(out / info.path)
        where |= {info.split for source, start in zip(games["source"], games["line"])
                  if str(source).endswith(":" + member) and int(start) == line}
    assert line == 2125 and where == {"validation"}


def test_engine_demo_archive_is_small_and_holds_the_csa_files_and_readme() -> None:
    import tarfile

    assert ENGINE_ARCHIVE.stat().st_size < 600_000
    with tarfile.open(ENGINE_ARCHIVE) as archive:
        names = archive.getnames()
    assert names[:2] == ["fairy/README.md", "fairy/SUMMARY.tsv"] and len(names) == 16
    assert all(re.fullmatch(r"fairy/fairy-\d{4}\.csa", n) for n in names[2:])


@pytest.mark.slow
def test_engine_demo_converts_every_game_with_evaluations_and_predicts_a_validation_game(tmp_path: Path) -> None:
    """make demo-engine: every game read (the 210 games Fairy-Stockfish repeated move for move dropped), 94%
    of positions evaluated, and its predict example (ENGINE_GAME of ENGINE_GAME_FILE) in the validation split."""
    import tarfile

    out = tmp_path / "engine"
    assert cli.main(["convert", str(ENGINE_ARCHIVE), "--out", str(out), "--val-fraction", "0.1",
                     "--no-progress"]) == 0
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["games_found"] == 1400 and report["converted"] == 1190 and report["errors"] == []
    assert report["skipped"] == {"duplicate": 210} and report["games"]["validation"] == 118
    manifest = shards.read_manifest(out)
    evals = np.concatenate([shards.read_positions(out / i.path, keys=[shards.KEY_EVAL]).arrays[shards.KEY_EVAL]
                            for i in manifest.shards])
    assert len(evals) == 139924 and int((evals != EVAL_NONE).sum()) == 132121
    member, game = _make_variable("ENGINE_GAME_FILE"), int(_make_variable("ENGINE_GAME"))
    with tarfile.open(ENGINE_ARCHIVE) as archive:
        text = archive.extractfile(member).read().decode()
    starts = [1] + [i + 2 for i, line in enumerate(text.splitlines()) if line == "/"]
    line = starts[game - 1]
    where = {info.split for info in manifest.shards
             for source, start in zip(*(lambda g: (g["source"], g["line"]))(shards.read_games(out / info.path)))
             if str(source).endswith(":" + member) and int(start) == line}
    assert line == 14560 and where == {"validation"}


SELFPLAY_ARCHIVE = REPO / "datasets" / "fairy-selfplay.tar.xz"   # `shogi-dnn selfplay` games (datasets/README.md)


def _selfplay_members() -> dict[str, bytes]:
    import tarfile

    with tarfile.open(SELFPLAY_ARCHIVE) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def test_the_selfplay_corpus_holds_what_its_summary_says() -> None:
    from shogi_dnn.kifu import read_record_bytes
    from shogi_dnn.kifu.record import GameRecord

    members = _selfplay_members()
    assert {"fairy-selfplay/README.md", "fairy-selfplay/selfplay.json", "fairy-selfplay/SUMMARY.tsv"} <= set(members)
    settings = json.loads(members["fairy-selfplay/selfplay.json"])
    assert settings["first_seed"] >= 6_000_000 and settings["nodes"] == [1000, 2000, 4000]
    rows = members["fairy-selfplay/SUMMARY.tsv"].decode().splitlines()[1:]
    played = [r.split("\t") for r in rows if not r.endswith("\taborted")]
    files = sorted(n for n in members if n.endswith(".csa"))
    games = [g for n in files for g in read_record_bytes(members[n], n) if isinstance(g, GameRecord)]
    assert len(games) == len(played) >= 5000
    assert [len(g.moves) for g in games] == [int(r[5]) for r in played]
    assert [g.winner.value for g in games] == [r[6] for r in played]
    assert all(g.evals and any(e is not None for e in g.evals) for g in games[:200])


@pytest.mark.slow
def test_the_selfplay_corpus_replays(tmp_path: Path) -> None:
    import shutil
    import tarfile

    if not (shutil.which("fairy-stockfish") or Path("/usr/games/fairy-stockfish").exists()):
        pytest.skip("fairy-stockfish not installed")
    with tarfile.open(SELFPLAY_ARCHIVE) as archive:
        archive.extractall(tmp_path, filter="data")
    from shogi_dnn.selfplay import job

    assert job.verify(tmp_path / "fairy-selfplay", 3) == []
