"""hcpe and PackedSfenValue in (dataset/packed.py, convert/packed_source.py): every position and move against
cshogi's own writer, games rebuilt from consecutive rows, bad and truncated records, convert end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.convert.filters import ConvertSettings
from shogi_dnn.convert.run import run_convert
from shogi_dnn.dataset import packed, shards
from shogi_dnn.kifu.record import GameRecord, Winner
from shogi_dnn.rules import format_sfen
from tests.support.kifugen import random_games

cshogi = pytest.importorskip("cshogi")

RESULT_HCPE = {Winner.BLACK: 1, Winner.WHITE: 2, Winner.DRAW: 0}


def _rows(games: list[GameRecord], kind: str) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Every position before a move of `games` as cshogi writes it, and (sfen without move number, usi)."""
    records = np.zeros(sum(len(g.moves) for g in games), packed.DTYPES[kind])
    want = []
    i = 0
    for game in games:
        board = cshogi.Board(game.start_sfen)
        for ply, usi in enumerate(game.moves):
            move = board.move_from_usi(usi)
            buf = records[i:i + 1]
            if kind == packed.HCPE:
                board.to_hcp(buf["pos"])
                buf["move"] = cshogi.move16(move)
                buf["result"] = RESULT_HCPE[game.winner]
            else:
                board.to_psfen(buf["pos"])
                buf["move"] = cshogi.move16_to_psv(cshogi.move16(move))
                buf["ply"] = ply
                to_move_won = (game.winner is Winner.BLACK) == (board.turn == cshogi.BLACK)
                buf["result"] = 0 if game.winner is Winner.DRAW else (1 if to_move_won else -1)
            buf["eval"] = (ply * 37) % 2000 - 1000
            want.append((" ".join(board.sfen().split()[:3]), usi))
            board.push(move)
            i += 1
    return records, want


def _usi(d: packed.Decoded, row: int) -> str:
    to = d.move_to[row]
    square = lambda index: f"{9 - index % 9}{'abcdefghi'[index // 9]}"       # noqa: E731
    if d.move_from[row] < 0:
        return f"{'PLNSGBR'[-1 - d.move_from[row]]}*{square(to)}"
    return f"{square(d.move_from[row])}{square(to)}{'+' if d.promote[row] else ''}"


@pytest.mark.parametrize("kind", [packed.HCPE, packed.PSV])
def test_every_position_and_move_round_trips_against_cshogi(kind: str) -> None:
    games = random_games(11, 40)
    records, want = _rows(games, kind)
    d = packed.decode(records, kind)
    assert d.ok.all()
    for row, (sfen, usi) in enumerate(want):
        got = format_sfen(d.board[row].tolist(), d.hands[row, 0].tolist(), d.hands[row, 1].tolist(),
                          int(d.turn[row]))
        assert " ".join(got.split()[:3]) == sfen, row
        assert _usi(d, row) == usi, row
    assert d.eval.tolist() == records["eval"].tolist()


def _shard_rows(out: Path) -> tuple[set[bytes], int]:
    manifest = shards.read_manifest(out)
    rows, games = set(), 0
    for info in manifest.shards:
        data = shards.read_positions(manifest.shard_path(info)).arrays
        games += info.games
        for board, hands, move, win in zip(data["board"], data["hands"], data["move"], data["win"]):
            rows.add(board.tobytes() + hands.tobytes() + int(move).to_bytes(2, "little") + win.tobytes())
    return rows, games


@pytest.mark.parametrize("kind,suffix", [(packed.HCPE, ".hcpe"), (packed.PSV, ".bin")])
def test_convert_rebuilds_the_games_and_equals_the_records(tmp_path: Path, kind: str, suffix: str) -> None:
    games = [g for g in random_games(5, 30) if g.winner is not Winner.DRAW]
    records, _ = _rows(games, kind)
    (tmp_path / f"games{suffix}").write_bytes(records.tobytes())
    settings = ConvertSettings(val_fraction=0.0, dedup=False)
    report = run_convert([tmp_path / f"games{suffix}"], tmp_path / "packed", settings, workers=1)
    assert report.converted == len(games) and not report.errors
    from tests.support.kifugen import write_csa
    write_csa(tmp_path / "games.csa", games)
    run_convert([tmp_path / "games.csa"], tmp_path / "records", settings, workers=1)
    from_packed, packed_games = _shard_rows(tmp_path / "packed")
    from_records, _ = _shard_rows(tmp_path / "records")
    assert packed_games == len(games)
    # the same positions (the final one, which the file leaves out, made from the last row's move)
    assert from_packed == from_records
    # and the same games: the same keys, so the same split and --dedup as the records
    from shogi_dnn.dataset import game_keys
    keys = [game_keys.shard_keys(p).keys for p in sorted((tmp_path / "packed").glob("*.h5"))]
    record_keys = [game_keys.shard_keys(p).keys for p in sorted((tmp_path / "records").glob("*.h5"))]
    assert sorted(np.concatenate(keys).tolist()) == sorted(np.concatenate(record_keys).tolist())


def report_games(report) -> int:
    return sum(report.games.values())


def test_a_shuffled_file_is_split_by_position_and_bad_records_are_lines(tmp_path: Path) -> None:
    records, _ = _rows(random_games(7, 6), packed.HCPE)
    shuffled = records[np.random.default_rng(1).permutation(len(records))]
    shuffled[3]["pos"][:] = 0xFF                                  # not a position
    path = tmp_path / "shuffled.hcpe"
    path.write_bytes(shuffled.tobytes() + b"\x00" * 10)           # and a torn last record
    report = run_convert([path], tmp_path / "out", ConvertSettings(val_fraction=0.2, dedup=False), workers=1)
    good = len(records) - 1
    assert good - 10 <= report.converted <= good               # a position a game, but for chance links
    linked = good - report.converted                           # rows joined to the row before them
    assert sum(report.positions.values()) == good + linked     # each game of 2+ rows gets its final position
    assert any("record 4: not a position" in e for e in report.errors)
    assert any(f"record {len(records) + 1}: truncated (10 of 38 bytes)" in e for e in report.errors)
    # --dedup (the default) drops a repeated row (position and move) as it drops a repeated game
    twice = tmp_path / "twice.hcpe"
    twice.write_bytes(shuffled[:10].tobytes() + shuffled[5:6].tobytes())
    deduped = run_convert([twice], tmp_path / "dedup", ConvertSettings(val_fraction=0.2), workers=1)
    assert deduped.skipped["duplicate"] == 1 and deduped.converted == report_games(deduped)

