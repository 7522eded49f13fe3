"""convert: filters, stable split, byte-identical shards for any worker count, corrupt input, resume, archives."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import re
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn import cli
from shogi_dnn.convert import run as convert
from shogi_dnn.convert import worker as convert_worker
from shogi_dnn.convert.run import ConvertSettings, GameFilter, assign_split, game_key, run_convert
from shogi_dnn.convert.sources import SourceFile
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import encode_game
from shogi_dnn.errors import ConfigError, KifuError
from shogi_dnn.kifu.record import Ending, GameRecord, SourceLine, Winner
from tests.support.kifugen import random_games, write_corpus, write_csa

SMALL = ConvertSettings(val_fraction=0.25, test_fraction=0.15, shard_size=150)


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.h5"))}


def _all_games(out: Path) -> dict[str, list[tuple]]:
    """split -> (start_sfen, move codes, winner, source, line) of each game, from the shards."""
    manifest = shards.read_manifest(out)
    games: dict[str, list[tuple]] = {}
    for info in manifest.shards:
        table = shards.read_games(manifest.shard_path(info))
        data = shards.read_positions(manifest.shard_path(info)).arrays
        for row, game_id in enumerate(table["game_id"]):
            rows = np.flatnonzero(data["game"] == game_id)
            moves = tuple(data["move"][rows[np.argsort(data["ply"][rows])]].tolist())
            games.setdefault(info.split, []).append(
                (table["start_sfen"][row], moves, table["winner"][row], table["source"][row], table["line"][row]))
    return games


def _identity(game: GameRecord) -> tuple:
    return game.start_sfen, tuple(encode_game(game).move.tolist()), game.winner.value


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[GameRecord]]:
    root = tmp_path_factory.mktemp("corpus")
    return root, write_corpus(root, seed=3, files=4, per_file=8)


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus converted with one worker: what every other run must reproduce byte for byte."""
    out = tmp_path_factory.mktemp("ref") / "data"
    run_convert([corpus[0]], out, SMALL, workers=1)
    return out


def test_reference_conversion(corpus, reference: Path) -> None:
    _, games = corpus
    report = json.loads((reference / convert.REPORT_NAME).read_text())
    positions = sum(len(g.moves) + 1 for g in games)
    assert report["files_read"] == 4 and report["games_found"] == len(games) == report["converted"]
    assert report["positions_total"] == positions and report["skipped"] == {} and report["errors"] == []
    manifest = shards.read_manifest(reference)
    assert manifest.totals["positions"] == positions and manifest.totals["games"] == len(games)
    assert sum(s.positions for s in manifest.shards) == positions
    assert {s.split for s in manifest.shards} == {"train", "validation", "test"}
    assert len(manifest.split("train")) >= 2                       # several shards: order matters
    for info in manifest.shards:
        assert shards.file_sha256(manifest.shard_path(info)) == info.sha256
        data = shards.read_positions(manifest.shard_path(info))
        assert len(data) == info.positions
        table = shards.read_games(manifest.shard_path(info))
        assert sorted(set(data.arrays["game"].tolist())) == sorted(table["game_id"].tolist())
        # whole games per shard, each game's positions all present
        counts = np.bincount(data.arrays["game"] - table["game_id"].min())
        assert sorted(counts[counts > 0].tolist()) == sorted((table["num_moves"] + 1).tolist())


def test_positions_are_the_encoded_games(corpus, reference: Path) -> None:
    _, games = corpus
    by_identity = {_identity(g): g for g in games}
    manifest = shards.read_manifest(reference)
    seen = 0
    for info in manifest.shards:
        data = shards.read_positions(manifest.shard_path(info)).arrays
        table = shards.read_games(manifest.shard_path(info))
        for row, game_id in enumerate(table["game_id"]):
            rows = np.flatnonzero(data["game"] == game_id)
            rows = rows[np.argsort(data["ply"][rows])]
            key = (table["start_sfen"][row], tuple(data["move"][rows].tolist()), table["winner"][row])
            expected = encode_game(by_identity[key])
            for name in ("board", "hands", "turn", "ply", "move", "win"):
                np.testing.assert_array_equal(data[name][rows], getattr(expected, name))
            seen += 1
    assert seen == len(games)


@pytest.mark.slow
def test_two_workers_write_identical_shards(corpus, reference: Path, tmp_path: Path) -> None:
    report = run_convert([corpus[0]], tmp_path / "w2", SMALL, workers=2)
    assert report.workers == 2
    assert _shard_bytes(tmp_path / "w2") == _shard_bytes(reference)
    assert shards.read_manifest(tmp_path / "w2").shards == shards.read_manifest(reference).shards


def test_backends_write_identical_shards(corpus, reference: Path, tmp_path: Path) -> None:
    pytest.importorskip("shogi_dnn.rules.cshogi_backend")
    for backend in ("python-shogi", "cshogi"):
        run_convert([corpus[0]], tmp_path / backend, SMALL, workers=1, backend=backend)
        assert _shard_bytes(tmp_path / backend) == _shard_bytes(reference), backend


def test_split_stable_disjoint_and_duplicates_together(corpus, reference: Path, tmp_path: Path) -> None:
    root, games = corpus
    # the same games again in another file: they must land in the same split as the originals
    write_csa(tmp_path / "dup" / "copy.csa", games[:8])
    out = tmp_path / "again"
    run_convert([root, tmp_path / "dup"], out, dataclasses.replace(SMALL, dedup=False), workers=1)   # keep copies
    split_of: dict[tuple, set[str]] = {}
    for split, rows in _all_games(out).items():
        for row in rows:
            split_of.setdefault(row[:3], set()).add(split)
    assert all(len(s) == 1 for s in split_of.values())             # no game in two splits
    first = {row[:3]: split for split, rows in _all_games(reference).items() for row in rows}
    assert {k: next(iter(v)) for k, v in split_of.items()} == first   # same split on a rerun
    assert len(first) == len(games)
    for g in games:
        assert first[_identity(g)] == assign_split(game_key(g), 0.25, 0.15)


def test_assign_split_fractions() -> None:
    rng = random.Random(0)
    keys = [rng.randbytes(20) for _ in range(20000)]
    splits = [assign_split(k, 0.1, 0.05) for k in keys]
    assert abs(splits.count("validation") / len(keys) - 0.1) < 0.01
    assert abs(splits.count("test") / len(keys) - 0.05) < 0.01
    assert assign_split(keys[0], 0.0, 0.0) == "train"


def _record(moves: int = 40, winner: Winner = Winner.BLACK, ending: Ending = Ending.RESIGN,
            ratings: tuple = (None, None)) -> GameRecord:
    return GameRecord("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1", ("7g7f",) * moves,
                      winner, ending, SourceLine("x.csa", 1), "csa", black_rating=ratings[0],
                      white_rating=ratings[1])


def test_filters() -> None:
    keep_all = GameFilter()
    assert keep_all.skip_reason(_record()) is None
    assert keep_all.skip_reason(_record(winner=Winner.DRAW, ending=Ending.SENNICHITE)) is None
    assert keep_all.skip_reason(_record(winner=Winner.UNKNOWN, ending=Ending.INTERRUPTED)) == "no_result"
    assert GameFilter(min_moves=41).skip_reason(_record(40)) == "min_moves"
    assert GameFilter(min_moves=40).skip_reason(_record(40)) is None
    assert GameFilter(draws="drop").skip_reason(_record(winner=Winner.DRAW)) == "draw"
    only_mate = GameFilter(endings=frozenset({"checkmate"}))
    assert only_mate.skip_reason(_record()) == "ending"
    assert only_mate.skip_reason(_record(ending=Ending.CHECKMATE)) is None
    both = GameFilter(min_rating=2000)
    loser = GameFilter(min_rating=2000, rating_of="loser")
    assert both.skip_reason(_record(ratings=(2500, 2000))) is None
    assert both.skip_reason(_record(ratings=(2500, 1999))) == "min_rating"
    assert both.skip_reason(_record(ratings=(2500, None))) == "min_rating"
    assert loser.skip_reason(_record(ratings=(1500, 2100))) is None          # black won, white lost
    assert loser.skip_reason(_record(ratings=(2500, 1900))) == "min_rating"
    assert loser.skip_reason(_record(winner=Winner.WHITE, ratings=(1900, 1000))) == "min_rating"
    assert loser.skip_reason(_record(winner=Winner.DRAW, ratings=(2100, 1900))) == "min_rating"
    with pytest.raises(ConfigError, match="unknown bogus"):
        GameFilter(endings=frozenset({"bogus"}))
    with pytest.raises(ConfigError, match="--val-fraction"):
        ConvertSettings(val_fraction=0.6, test_fraction=0.5)


def test_filters_end_to_end(corpus, tmp_path: Path) -> None:
    root, games = corpus
    settings = dataclasses.replace(SMALL, filters=GameFilter(min_moves=30, draws="drop", min_rating=1500))
    report = run_convert([root], tmp_path / "f", settings, workers=1)
    kept = [g for g in games if settings.filters.skip_reason(g) is None]
    assert 0 < len(kept) < len(games)
    assert report.converted == len(kept)
    assert sum(report.skipped.values()) == len(games) - len(kept)
    assert report.skipped["draw"] == sum(g.winner is Winner.DRAW for g in games)
    assert sum(report.positions.values()) == sum(len(g.moves) + 1 for g in kept)


def test_corrupt_input_reports_file_line_and_converts_the_rest(tmp_path: Path) -> None:
    games = random_games(11, 9)
    root = tmp_path / "in"
    starts = write_csa(root / "multi.csa", games[:5])
    # an illegal move in the middle game of the multi-game file: a pawn moving two squares
    lines = (root / "multi.csa").read_text().split("\n")
    first_move = next(i for i in range(starts[2] - 1, len(lines)) if lines[i][:1] in "+-" and len(lines[i]) == 7)
    lines[first_move] = "+9795FU" if lines[first_move][0] == "+" else "-1315FU"
    (root / "multi.csa").write_text("\n".join(lines))
    write_csa(root / "truncated.csa", games[5:7])
    raw = (root / "truncated.csa").read_bytes()
    (root / "truncated.csa").write_bytes(raw[: len(raw) - 60])        # the 2nd game loses its end
    write_csa(root / "fine.csa", games[7:9])
    (root / "garbage.csa").write_bytes(bytes(random.Random(1).randrange(256) for _ in range(3000)))
    (root / "garbage.kif").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    report = run_convert([root], tmp_path / "out", SMALL, workers=1)
    valid = games[:2] + games[3:5] + games[5:6] + games[7:9]
    assert report.converted == len(valid)
    assert sum(report.positions.values()) == sum(len(g.moves) + 1 for g in valid)
    assert any(e.startswith(f"{root / 'multi.csa'}:{first_move + 1}: ") for e in report.errors), report.errors
    assert any(e.startswith(f"{root / 'garbage.csa'}:") for e in report.errors)
    assert any(e.startswith(f"{root / 'garbage.kif'}:") for e in report.errors)
    # the cut game is either an error naming truncated.csa or a game without a result
    cut = [e for e in report.errors if e.startswith(f"{root / 'truncated.csa'}:")]
    assert len(cut) + report.skipped.get("no_result", 0) == 1
    assert report.files_read == 5
    assert report.games_found >= report.converted + sum(report.skipped.values()) - report.skipped["error"]
    saved = json.loads((tmp_path / "out" / convert.REPORT_NAME).read_text())
    assert saved["errors"] == report.errors and saved["converted"] == len(valid)


def test_reader_crash_is_reported_not_raised(corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, games = corpus
    real = convert_worker.read_record_bytes

    def flaky(data: bytes, name: str):
        if name.endswith("games-01.csa"):
            yield from real(data, name)
            raise IndexError("list index out of range")
        yield from real(data, name)

    monkeypatch.setattr(convert_worker, "read_record_bytes", flaky)
    report = run_convert([root], tmp_path / "out", SMALL, workers=1)
    assert report.converted == len(games)
    assert [e for e in report.errors if "reader failed: IndexError" in e and "games-01.csa:0:" in e]


def test_interrupted_run_resumes_to_identical_shards(corpus, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    written: list[str] = []

    def stop_after_two(info: shards.ShardInfo) -> None:
        written.append(info.path)
        if len(written) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_convert([corpus[0]], out, SMALL, workers=1, on_shard=stop_after_two)
    assert not (out / shards.MANIFEST_NAME).exists()
    state = json.loads((out / convert.STATE_NAME).read_text())
    assert sorted(state["shards"]) == sorted(written) and not state["complete"]
    # what a kill mid-write leaves: a partial temp file; and a damaged finished shard
    names = sorted(_shard_bytes(reference))
    later = next(n for n in names if n not in written)
    (out / (later + ".tmp")).write_bytes(b"partial")
    (out / later).write_bytes(b"not a finished shard")
    damaged = out / written[0]
    damaged.write_bytes(damaged.read_bytes()[:100])
    report = run_convert([corpus[0]], out, SMALL, workers=1)
    assert report.shards_reused == 1                                  # the intact one; the damaged one rewritten
    assert _shard_bytes(out) == _shard_bytes(reference)
    assert not list(out.glob("*.tmp"))
    assert shards.read_manifest(out).shards == shards.read_manifest(reference).shards
    # a finished dataset rerun: nothing to do, nothing changed
    again = run_convert([corpus[0]], out, SMALL, workers=1)
    assert again.converted == report.converted and _shard_bytes(out) == _shard_bytes(reference)
    # ... and its summary gives the earlier run's speed as that run's, never as this one's (issue 32)
    lines = again.summary().splitlines()
    assert lines[0] == "nothing done now; the earlier run that converted it:"
    assert "; earlier run's time " in lines[-1] and " positions/s" in lines[-1]
    assert "earlier" not in report.summary() and "earlier_run" not in again.to_dict()
    # ... the same speed that run printed (it was computed from the time rounded to 3 decimals: 523,567
    # positions/s said again for 523,272)
    speed = re.compile(r"[\d.]+ s, [\d,]+ positions/s")
    assert speed.search(lines[-1]).group() == speed.search(report.summary().splitlines()[-1]).group()


def test_run_killed_in_its_first_shard_write_resumes(corpus, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "early"
    real_write = shards.write_shard

    def killed_mid_write(path, *args, **kwargs):
        Path(str(path) + ".tmp").write_bytes(b"half a shard")           # what a kill mid-write leaves
        raise KeyboardInterrupt

    monkeypatch.setattr(shards, "write_shard", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        run_convert([corpus[0]], out, SMALL, workers=1)
    assert list(out.glob("*.tmp")) and not list(out.glob("*.h5"))
    monkeypatch.setattr(shards, "write_shard", real_write)
    run_convert([corpus[0]], out, SMALL, workers=1)                       # the same command, no --overwrite
    assert shards.read_manifest(out).totals["games"] == len(corpus[1]) and not list(out.glob("*.tmp"))


def test_output_folder_protection(corpus, tmp_path: Path) -> None:
    root = tmp_path / "records"
    shutil.copytree(corpus[0], root)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        run_convert([root], busy, SMALL, workers=1)
    out = tmp_path / "out"
    run_convert([root], out, SMALL, workers=1)
    other = dataclasses.replace(SMALL, shard_size=10_000)
    with pytest.raises(ConfigError, match="--overwrite"):
        run_convert([root], out, other, workers=1)
    run_convert([root], out, other, workers=1, overwrite=True)
    write_csa(root / "new.csa", random_games(99, 2))          # a file added to the input folder
    with pytest.raises(ConfigError, match="--overwrite"):        # is not "already converted"
        run_convert([root], out, other, workers=1)
    manifest = shards.read_manifest(out)
    assert {p.name for p in out.glob("*.h5")} == {s.path for s in manifest.shards}   # old shards gone
    assert all(s.positions < 10_000 for s in manifest.shards) and len(manifest.shards) == 3


@pytest.mark.parametrize("manifest", [
    '{"name": "my photos", "files": ["train-00000.h5"]}',            # another program's manifest
    '{"schema_version": 3, "shards": "all of them"}',
    "not json at all",
    None,                                                             # no manifest: a shard name alone
])
def test_overwrite_never_removes_files_no_shogi_dnn_manifest_lists(corpus, tmp_path: Path,
                                                                   manifest: str | None) -> None:
    out = tmp_path / "theirs"
    out.mkdir()
    if manifest is not None:
        (out / shards.MANIFEST_NAME).write_text(manifest)
    (out / "train-00000.h5").write_bytes(b"someone's file")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refusal = "is not a shogi-dnn dataset's" if manifest is not None else "not empty and not a shogi-dnn dataset"
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match=f"^{re.escape(str(out))}: .*{refusal}.*choose an empty or new --out$"):
            run_convert([corpus[0]], out, SMALL, workers=1, overwrite=overwrite)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name in before} == before


def _archive_corpus(root: Path, tmp: Path, kind: str) -> Path:
    files = sorted(root.rglob("*.csa"))
    if kind == "zip":
        path = tmp / "corpus.zip"
        with zipfile.ZipFile(path, "w") as z:
            for f in files:
                z.write(f, f.relative_to(root).as_posix())
    elif kind == "tar.gz":
        path = tmp / "corpus.tar.gz"
        with tarfile.open(path, "w:gz") as t:
            for f in files:
                t.add(f, f.relative_to(root).as_posix())
    else:
        py7zr = pytest.importorskip("py7zr")
        path = tmp / "corpus.7z"
        with py7zr.SevenZipFile(path, "w") as z:
            for f in files:
                z.write(f, f.relative_to(root).as_posix())
    return path


@pytest.mark.parametrize("kind", ["zip", "tar.gz", "7z"])
def test_archives_convert_like_the_folder(corpus, reference: Path, tmp_path: Path, kind: str) -> None:
    archive = _archive_corpus(corpus[0], tmp_path, kind)
    out = tmp_path / "out"
    report = run_convert([archive], out, SMALL, workers=1)
    assert report.converted == len(corpus[1]) and report.errors == []
    got = {k: sorted(r[:3] for r in v) for k, v in _all_games(out).items()}
    want = {k: sorted(r[:3] for r in v) for k, v in _all_games(reference).items()}
    assert got == want
    sources = {r[3] for rows in _all_games(out).values() for r in rows}
    assert all(s.startswith(f"{archive}:") and s.endswith(".csa") for s in sources)


def test_cli_convert(corpus, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cli"
    code = cli.main(["convert", str(corpus[0]), "--out", str(out), "--workers", "1", "--shard-size", "150",
                     "--val-fraction", "0.25", "--test-fraction", "0.15", "--no-progress"])
    assert code == 0
    assert shards.read_manifest(out).totals["games"] == len(corpus[1])
    code = cli.main(["convert", str(corpus[0]), "--out", str(tmp_path / "x"), "--endings", "resign,nope"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown nope" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    code = cli.main(["convert", str(corpus[0]), str(tmp_path / "missing"), "--out", str(tmp_path / "y")])
    err = capsys.readouterr().err
    assert code == 2 and f"{tmp_path / 'missing'}: no such file or folder" in err   # a typo fails fast
    assert not (tmp_path / "y").exists() and "Traceback" not in err


class _FakeTty(io.StringIO):
    """stderr as a terminal: convert shows its bar only there (--no-progress or no TTY: none)."""

    def isatty(self) -> bool:
        return True


def test_cli_progress_bar_reports_files_games_and_positions(corpus, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root, games = corpus
    stream = _FakeTty()
    monkeypatch.setattr(sys, "stderr", stream)
    out = tmp_path / "bar"
    assert cli.main(["convert", str(root), "--out", str(out), "--workers", "1", "--shard-size", "150"]) == 0
    totals = shards.read_manifest(out).totals
    files = len(list(root.rglob("*.csa")))
    assert totals["games"] == len(games) > 0 and files == 4
    final = stream.getvalue().split("\r")[-1].splitlines()[0]       # the bar's last redraw
    assert f"{files}/{files}" in final and "100%" in final, final
    assert f"games={totals['games']}" in final and f"positions={totals['positions']}" in final, final
    assert "errors=0" in final, final
    # --no-progress on the same terminal: no bar
    quiet = _FakeTty()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert cli.main(["convert", str(root), "--out", str(tmp_path / "quiet"), "--workers", "1",
                     "--shard-size", "150", "--no-progress"]) == 0
    assert f"{files}/{files}" not in quiet.getvalue()


def test_unreadable_input_is_reported_and_the_rest_converted(corpus, tmp_path: Path) -> None:
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK\x03\x04 this is not a zip archive")
    report = run_convert([broken, corpus[0]], tmp_path / "out", SMALL, workers=2)
    assert report.files_unreadable == 1 and report.converted == len(corpus[1])
    assert report.errors[0].startswith(f"{broken}:0: not a readable zip archive")


def test_kifu_error_items_are_counted_as_files(tmp_path: Path) -> None:
    result = convert.process_file(KifuError("a.zip", 0, "not a readable zip"), SMALL, "python-shogi")
    assert not result.readable and result.found == 0 and result.errors == ["a.zip:0: not a readable zip"]


def test_big_multi_game_files_are_cut_at_game_boundaries(tmp_path: Path) -> None:
    games = random_games(21, 12)
    path = tmp_path / "bulk.csa"
    write_csa(path, games)
    data = path.read_bytes()
    pieces = list(convert.split_source(SourceFile(str(path), data), piece_bytes=800))
    assert len(pieces) > 3 and b"".join(p.data for p in pieces) == data
    assert [p.last for p in pieces] == [False] * (len(pieces) - 1) + [True]
    from shogi_dnn.kifu import read_record_bytes
    whole = list(read_record_bytes(data, str(path)))
    result = [convert_worker._shift_lines(r, p.first_line - 1) for p in pieces for r in read_record_bytes(p.data, p.name)]
    assert result == whole                          # same records, same start lines
    small = SourceFile("x.kif", data)
    assert len(list(convert.split_source(small, piece_bytes=800))) == 1   # only CSA is cut


def test_pieces_give_the_same_dataset_and_error_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    games = random_games(23, 14)
    root = tmp_path / "in"
    starts = write_csa(root / "bulk.csa", games)
    lines = (root / "bulk.csa").read_text().split("\n")
    bad = next(i for i in range(starts[9] - 1, len(lines)) if lines[i][:1] in "+-" and len(lines[i]) == 7)
    lines[bad] = lines[bad][0] + "5555OU"                           # no king there
    (root / "bulk.csa").write_text("\n".join(lines))
    whole = run_convert([root], tmp_path / "whole", SMALL, workers=1)
    monkeypatch.setattr(convert_worker, "PIECE_BYTES", 700)
    cut = run_convert([root], tmp_path / "cut", SMALL, workers=2)
    assert whole.converted == cut.converted == 13 and cut.files_read == whole.files_read == 1
    assert cut.errors == whole.errors and cut.errors[0].startswith(f"{root / 'bulk.csa'}:{bad + 1}: ")
    assert _shard_bytes(tmp_path / "cut") == _shard_bytes(tmp_path / "whole")


def test_workers_read_ahead_a_bounded_window() -> None:
    pulled = []
    csa = b"PI\n+\n+7776FU\n-3334FU\n%TORYO\n"

    def items():
        for i in range(60):
            pulled.append(i)
            yield convert.SourcePiece(f"f{i}.csa", csa) if i % 3 else KifuError(f"f{i}.csa", 0, "unreadable")

    results = convert.iter_results(items(), SMALL, "python-shogi", workers=2)
    first = next(results)
    assert first.name == "f0.csa" and len(pulled) <= 4 * 2 + 1     # not the whole corpus in memory
    rest = list(results)
    assert [r.name for r in rest] == [f"f{i}.csa" for i in range(1, 60)]   # input order kept
    assert [len(r.games) for r in rest] == [0 if i % 3 == 0 else 1 for i in range(1, 60)]


def test_sigterm_during_a_shard_write_is_raised_after_it() -> None:
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    with convert._Interrupts() as interrupts:
        with pytest.raises(KeyboardInterrupt, match="signal 15"), interrupts.critical():
            os.kill(os.getpid(), signal.SIGTERM)       # handled at once: deferred, not raised here
            finished = True
        assert finished
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)           # outside a write: raised at once
            for _ in range(1000):
                pass
    assert signal.getsignal(signal.SIGTERM) is before                # handlers restored


def test_an_interrupt_dropped_in_a_finalizer_is_raised_at_the_next_critical_section() -> None:
    """Python prints and drops an exception raised in a finalizer (multiprocessing runs some while a
    pool works): the signal is remembered and raised when the next critical section ends."""
    import os
    import signal

    class SignalledWhileFinalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):        # the handler runs here, inside the finalizer
                pass

    with convert._Interrupts() as interrupts:
        SignalledWhileFinalized()        # collected at once: its KeyboardInterrupt is dropped
        with pytest.raises(KeyboardInterrupt, match="signal 15"), interrupts.critical():
            pass
