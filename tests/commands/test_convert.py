"""`shogi-dnn convert` on the console: the first skipped games as file:line: reason, plural-correct
summary lines, --quiet, and exit status 1 when nothing was converted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from shogi_dnn.cli import main
from shogi_dnn.convert.writer import ConvertReport
from tests.support.paths import REPO

GOOD = REPO / "datasets" / "sample" / "gnushogi" / "gnushogi-0000.csa"
BROKEN = "V2.2\nPI\n+\n+7776FU\n-3334FU\n+9999OU\n%TORYO\n"


def run(caplog: pytest.LogCaptureFixture, argv: list[str]) -> tuple[int, str]:
    caplog.clear()
    with caplog.at_level(logging.INFO):
        code = main(["convert", "--no-progress", "--workers", "1", *argv])
    return code, "\n".join(r.getMessage() for r in caplog.records)


def test_a_non_record_exits_1_with_the_reason_on_the_console(caplog, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n")
    code, out = run(caplog, [str(notes), "--out", str(tmp_path / "d")])
    assert code == 1
    assert f"skipped {notes}:0: not a game record" in out
    assert "1 file read" in out and "1 error (listed in convert-report.json)" in out
    assert "nothing converted: no game found in 1 file" in out


def test_an_empty_folder_exits_1(caplog, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out = run(caplog, [str(tmp_path / "empty"), "--out", str(tmp_path / "d")])
    assert code == 1 and "nothing converted: no record files found" in out and "0 errors;" in out


def test_every_game_failing_exits_1_and_names_the_move(caplog, tmp_path: Path) -> None:
    broken = tmp_path / "broken.csa"
    broken.write_text(BROKEN)
    code, out = run(caplog, [str(broken), "--out", str(tmp_path / "d")])
    assert code == 1
    assert f"skipped {broken}:6: +9999OU" in out and "(ply 3)" in out
    assert "1 game found, 0 converted" in out and "the one game found was skipped" in out


def test_good_and_bad_games_exit_0_and_quiet_hides_the_reasons(caplog, tmp_path: Path) -> None:
    broken = tmp_path / "broken.csa"
    broken.write_text(BROKEN)
    code, out = run(caplog, [str(GOOD), str(broken), "--out", str(tmp_path / "d")])
    assert code == 0 and f"skipped {broken}:6" in out and "nothing converted" not in out
    code, out = run(caplog, [str(GOOD), str(broken), "--out", str(tmp_path / "q"), "--quiet"])
    assert code == 0 and "skipped " + str(broken) not in out and "1 error" in out


def test_a_file_name_with_a_line_break_cannot_forge_a_console_line(caplog, tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    (records / "x\n0 errors; 9 games.csa").write_text(BROKEN)
    (records / "good.csa").write_bytes(GOOD.read_bytes())
    code, out = run(caplog, [str(records), "--out", str(tmp_path / "d")])
    lines = out.splitlines()
    assert code == 0 and f"skipped {records}/x\\n0 errors; 9 games.csa:6: +9999OU" in lines[0], lines
    assert not any(line.startswith("0 errors; 9 games") for line in lines), lines


def test_only_the_first_errors_are_printed_then_a_count() -> None:
    report = ConvertReport(errors=[f"f.csa:{i}: bad" for i in range(8)], errors_not_listed=3)
    lines = report.first_errors(5)
    assert lines[:5] == [f"skipped f.csa:{i}: bad" for i in range(5)]
    assert lines[5] == "... and 6 more errors in convert-report.json"
    assert ConvertReport(errors=["a:1: x", "b:2: y"]).first_errors(5) == ["skipped a:1: x", "skipped b:2: y"]


def test_summary_plurals() -> None:
    one = ConvertReport(files_read=1, games_found=1, converted=1, positions={"train": 1}, games={"train": 1},
                        shards={"train": 1}, workers=1)
    text = one.summary()
    assert "1 file read" in text and "1 game found" in text and "train 1 game / 1 position / 1 shard" in text
    assert "0 errors" in text and "1 worker" in text and "1 games" not in text and "1 errors" not in text
    many = ConvertReport(files_read=2, games_found=1886, converted=1886, positions={"train": 242655},
                         games={"train": 1886}, shards={"train": 3}, workers=2, errors=["x:1: y"] * 2)
    text = many.summary()
    assert "2 files read" in text and "1,886 games found" in text and "242,655 positions / 3 shards" in text
    assert "2 errors" in text and "2 workers" in text



def test_test_fraction_1_converts_a_test_only_set(caplog, tmp_path: Path) -> None:
    from shogi_dnn.dataset import shards

    code, _ = run(caplog, [str(GOOD), "--out", str(tmp_path / "held"), "--test-fraction", "1"])
    manifest = shards.read_manifest(tmp_path / "held")
    assert code == 0 and {s.split for s in manifest.shards} == {"test"} and manifest.split("test")
    code, _ = run(caplog, [str(GOOD), "--out", str(tmp_path / "x"), "--val-fraction", "0.6",
                           "--test-fraction", "0.5"])
    assert code == 2 and not (tmp_path / "x").exists()
