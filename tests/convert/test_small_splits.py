"""convert warns when a held-out split gets fewer than MIN_SPLIT_GAMES games, with the --val-fraction (or
--test-fraction) that would give enough, computed from the number of games converted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.convert.filters import MIN_SPLIT_GAMES, ConvertSettings, small_split_warnings
from shogi_dnn.wording import plural
from tests.support.kifugen import write_corpus


def test_warning_and_suggestion_from_the_games_count() -> None:
    # The motivating folder: 88 games, the default 5% gave validation 3 games. No fraction up to 0.3 gives 100.
    assert small_split_warnings({"train": 85, "validation": 3}, {"train": 9000, "validation": 313},
                                ConvertSettings()) == [
        "validation: 3 games (313 positions): too few to compare models (want >= 100); only 88 games in all: "
        "--val-fraction 0.3 would give ~26 (more games are needed for ~100: about 334)"]
    # 1,500 games at 5%: 71 in validation; 8% would give ~120 (20% above the minimum: the share is drawn).
    assert small_split_warnings({"train": 1429, "validation": 71}, {"validation": 7100},
                                ConvertSettings(val_fraction=0.05)) == [
        "validation: 71 games (7,100 positions): too few to compare models (want >= 100); --val-fraction 0.08 "
        "would give ~120 of the 1,500 games"]
    test = small_split_warnings({"train": 900, "validation": 150, "test": 40}, {"test": 4000},
                                ConvertSettings(val_fraction=0.15, test_fraction=0.04))
    assert test == ["test: 40 games (4,000 positions): too few to compare models (want >= 100); --test-fraction "
                    "0.12 would give ~131 of the 1,090 games"]
    # Enough games, or no split asked for (fraction 0), or nothing converted: no warning.
    assert small_split_warnings({"train": 1900, "validation": MIN_SPLIT_GAMES}, {}, ConvertSettings()) == []
    assert small_split_warnings({"train": 88}, {}, ConvertSettings(val_fraction=0.0)) == []
    assert small_split_warnings({}, {}, ConvertSettings()) == []


def test_no_suggestion_of_the_fraction_already_given() -> None:
    # The user's case: --val-fraction 0.3 given, 30 games, 9 in validation. It said "--val-fraction 0.3
    # would give ~9": now only more games can help, and how many.
    assert small_split_warnings({"train": 21, "validation": 9}, {"validation": 900},
                                ConvertSettings(val_fraction=0.3)) == [
        "validation: 9 games (900 positions): too few to compare models (want >= 100); --val-fraction 0.3 is "
        "already given: only more games help (about 334 in all for ~100; 30 now)"]
    # Above the cap (0.5): no smaller fraction suggested either.
    assert small_split_warnings({"train": 40, "validation": 40}, {}, ConvertSettings(val_fraction=0.5)) == [
        "validation: 40 games (0 positions): too few to compare models (want >= 100); --val-fraction 0.5 is "
        "already given: only more games help (about 200 in all for ~100; 80 now)"]
    # Enough games for the fraction given, but the per-game draw fell short: no smaller fraction suggested.
    assert small_split_warnings({"train": 1405, "validation": 95}, {}, ConvertSettings(val_fraction=0.1)) == [
        "validation: 95 games (0 positions): too few to compare models (want >= 100); --val-fraction 0.1 is "
        "already given and should hold ~150 of the 1,500 games (the split is drawn per game): only more "
        "games help"]


def test_convert_prints_and_records_the_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_corpus(tmp_path / "records", seed=2, files=2, per_file=6)          # 12 games
    out = tmp_path / "data"
    with caplog.at_level("WARNING"):
        assert cli.main(["convert", str(tmp_path / "records"), "--out", str(out), "--val-fraction", "0.2",
                         "--quiet", "--workers", "1"]) == 0
    report = json.loads((out / "convert-report.json").read_text())
    games = report["games"]
    total = sum(games.values())
    assert report["warnings"] == [
        f"validation: {plural(games.get('validation', 0), 'game')} "
        f"({plural(report['positions'].get('validation', 0), 'position')}): "
        f"too few to compare models (want >= 100); only {total} games in all: --val-fraction 0.3 would give "
        f"~{round(0.3 * total)} (more games are needed for ~100: about 334)"]
    assert f"warning: {report['warnings'][0]}" in caplog.text
