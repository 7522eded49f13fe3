"""convert --dedup: a game whose start position and moves equal an earlier one's is dropped, across files
and formats, the same for any worker count; --no-dedup keeps every copy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.convert.filters import Deduplicator, game_key
from shogi_dnn.convert.run import REPORT_NAME, ConvertSettings, run_convert
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.kifu import GameRecord, Winner
from shogi_dnn.kifu.kif import format_kif
from tests.support.kifugen import random_games, write_csa

SETTINGS = ConvertSettings(val_fraction=0.25, shard_size=120)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[GameRecord]]:
    """8 games with a result in a.csa; a.csa copied again (copy/a.csa); games 0 and 1 as KIF too
    (one file each); 3 more games in b.csa. 11 distinct games, 10 duplicate copies."""
    root = tmp_path_factory.mktemp("dedup")
    games = [g for g in random_games(21, 40) if g.winner in (Winner.BLACK, Winner.WHITE, Winner.DRAW)][:11]
    assert len(games) == 11 and len({game_key(g) for g in games}) == 11
    write_csa(root / "a.csa", games[:8])
    write_csa(root / "b.csa", games[8:])
    (root / "copy").mkdir()
    (root / "copy" / "a.csa").write_bytes((root / "a.csa").read_bytes())
    for i in (0, 1):
        (root / f"game{i}.kif").write_text(format_kif(games[i]), encoding="utf-8")
    return root, games


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.h5"))}


def _sources(out: Path) -> list[str]:
    manifest = shards.read_manifest(out)
    return sorted(Path(s).name if "copy" not in s else "copy/" + Path(s).name
                  for info in manifest.shards for s in shards.read_games(manifest.shard_path(info))["source"])


def test_duplicates_dropped_identically_for_one_and_two_workers(records, tmp_path: Path) -> None:
    root, games = records
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        report = run_convert([root], out, SETTINGS, workers=workers)
        assert report.games_found == 8 + 8 + 3 + 2            # every copy is read ...
        assert report.converted == 11                         # ... each game kept once
        assert report.skipped == {"duplicate": 10}            # copy/a.csa (8) and the 2 KIF copies
        saved = json.loads((out / REPORT_NAME).read_text())
        assert saved["skipped"] == {"duplicate": 10} and saved["converted"] == 11
        assert "duplicate 10" in report.summary()             # the console summary
        manifest = shards.read_manifest(out)
        assert manifest.totals["games"] == 11 and manifest.totals["skipped"] == {"duplicate": 10}
        assert manifest.settings["dedup"] is True
        outs[workers] = out
    assert _shard_bytes(outs[1]) == _shard_bytes(outs[2]) and _shard_bytes(outs[1])
    # Input order decides which copy stays: a.csa comes before copy/a.csa and game0.kif, game1.kif.
    assert _sources(outs[1]) == ["a.csa"] * 8 + ["b.csa"] * 3


def test_no_dedup_keeps_every_copy(records, tmp_path: Path) -> None:
    root, _ = records
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        report = run_convert([root], out, dataclasses.replace(SETTINGS, dedup=False), workers=workers)
        assert report.converted == report.games_found == 21 and "duplicate" not in report.skipped
        assert shards.read_manifest(out).settings["dedup"] is False
        outs[workers] = out
    assert _shard_bytes(outs[1]) == _shard_bytes(outs[2])
    assert _sources(outs[1]) == sorted(["a.csa"] * 8 + ["b.csa"] * 3 + ["copy/a.csa"] * 8
                                       + ["game0.kif", "game1.kif"])


def test_a_rerun_with_the_other_setting_is_noticed(records, tmp_path: Path) -> None:
    root, _ = records
    out = tmp_path / "data"
    run_convert([root], out, SETTINGS, workers=1)
    with pytest.raises(ConfigError, match="other inputs or settings"):
        run_convert([root], out, dataclasses.replace(SETTINGS, dedup=False), workers=1)
    again = run_convert([root], out, SETTINGS, workers=1)      # the same setting: nothing to redo
    assert again.converted == 11 and again.skipped == {"duplicate": 10}


def test_cli_dedup_flags(records, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root, _ = records
    common = ["--workers", "1", "--no-progress", "--val-fraction", "0"]
    assert cli.main(["convert", str(root), "--out", str(tmp_path / "on"), *common]) == 0
    assert cli.main(["convert", str(root), "--out", str(tmp_path / "off"), "--no-dedup", *common]) == 0
    assert shards.read_manifest(tmp_path / "on").totals["games"] == 11
    assert shards.read_manifest(tmp_path / "off").totals["games"] == 21
    with pytest.raises(SystemExit):
        cli.main(["convert", "--help"])
    assert "--dedup, --no-dedup" in capsys.readouterr().out


def test_deduplicator() -> None:
    keys = [bytes([i]) * 20 for i in range(3)]
    on, off = Deduplicator(True), Deduplicator(False)
    assert [on.is_duplicate(k) for k in keys + keys[:2]] == [False, False, False, True, True]
    assert not any(off.is_duplicate(k) for k in keys + keys)
