"""engine/arena.py and `shogi-dnn bench games`, `shogi-dnn usi` as a real process: Elo arithmetic, openings,
CSA records, a scripted session over pipes, and (slow) a short real match through ShogiArena."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shogi_dnn import cli, kifu
from shogi_dnn.engine import arena
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, Winner
from shogi_dnn.rules import new_position
from tests.support.evaldata import material_dataset
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def material_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory whose run.json names a small dataset: enough for the material player."""
    root = tmp_path_factory.mktemp("material")
    material_dataset(root / "data", {"train": (400, 0.8, False), "validation": (100, 0.5, False)})
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"data_dir": str(root / "data")}))
    return run_dir


def test_elo_interval() -> None:
    assert arena.elo_interval(10, 10, 10)[0] == pytest.approx(0.0)
    elo, low, high = arena.elo_interval(75, 0, 25)        # 75%: by hand, s +- 1.96 * sqrt(0.1875 / 100)
    assert (elo, low, high) == pytest.approx((190.85, 119.21, 281.52), abs=0.01)
    elo, low, high = arena.elo_interval(10, 0, 0)         # all won: Wilson's lower bound 0.7225
    assert elo == math.inf and high == math.inf and low == pytest.approx(166.20, abs=0.01)
    assert arena.elo_interval(0, 0, 4)[0] == -math.inf
    assert all(math.isnan(x) for x in arena.elo_interval(0, 0, 0))


def test_random_openings_are_legal_distinct_and_seeded() -> None:
    lines = arena.random_openings(20, 4, seed=3)
    assert lines == arena.random_openings(20, 4, seed=3) != arena.random_openings(20, 4, seed=4)
    finals = set()
    for line in lines:
        moves = line.split()[2:]
        assert line.startswith("startpos moves ") and len(moves) == 4
        position = new_position(STANDARD_START_SFEN)
        for move in moves:
            position.push_usi(move)                       # IllegalMoveError if not legal
        finals.add(position.sfen())
    assert len(finals) == 20


def test_tally_and_csa_records(tmp_path: Path) -> None:
    mate = ("7g7f", "3c3d", "2g2f", "4c4d")                 # no mate: a resignation or an adjudication
    games = [arena.ArenaGame("g1", "net", "mat", STANDARD_START_SFEN, mate[:4], "BLACK_WIN",
                             (150, 2040, 199, None)),
             arena.ArenaGame("g2", "mat", "net", STANDARD_START_SFEN, mate[:3], "BLACK_WIN"),
             arena.ArenaGame("g3", "net", "mat", STANDARD_START_SFEN, mate[:2], "DRAW_BY_MAX_PLIES"),
             arena.ArenaGame("g4", "mat", "net", STANDARD_START_SFEN, (), "ERROR"),
             arena.ArenaGame("g5", "net", "other", STANDARD_START_SFEN, (), "WHITE_WIN")]
    result = arena.tally(games, "net", "mat")
    assert (result.wins, result.draws, result.losses, result.not_played) == (1, 1, 1, 1)
    paths = arena.write_csa(games, tmp_path / "games")
    assert [p.name for p in paths] == [f"{i:04d}.csa" for i in range(1, 6)]
    first = next(iter(kifu.read_record_file(paths[0])))
    # g1: Black won with Black to move -> CSA cannot say it: %CHUDAN, the arena's word in a comment
    assert first.moves == mate[:4] and first.ending is Ending.INTERRUPTED
    assert paths[0].read_text().endswith("'arena result: BLACK_WIN\n")
    second = next(iter(kifu.read_record_file(paths[1])))  # White to move resigns
    assert (second.winner, second.ending, second.black, second.white) == \
        (Winner.BLACK, Ending.RESIGN, "mat", "net")
    third = next(iter(kifu.read_record_file(paths[2])))
    assert (third.winner, third.ending) == (Winner.DRAW, Ending.MAX_MOVES)
    # the times: T lines after the moves, read back per player
    assert "+7776FU\nT0.150\n-3334FU\nT2.040\n" in paths[0].read_text()
    assert arena.move_times(paths[0]) == [("net", 0.15), ("mat", 2.04), ("net", 0.199)]
    assert arena.over_deadline(paths, "net", 199) == (0, 2)
    assert arena.over_deadline(paths, "mat", 2000) == (1, 1)
    assert arena.over_deadline(paths, "net", 150) == (1, 2)


def test_material_same_takes_our_search_and_limit(material_run: Path) -> None:
    from shogi_dnn.bench import games

    args = games.parse_args(["--run-dir", str(material_run), "--opponent", "material:same",
                             "--movetime", "200", "--c-puct", "1.5", "--temperature", "0.5", "--out", "x"])
    ours = arena.Player("network", ("x",), games.engine_options(args), games.engine_limit(args))
    assert ours.options == {"ResignValue": 3000, "CPuct": 150, "Temperature": 50, "TemperatureMoves": 16}
    same = games.opponent_player("material:same", material_run, ours)
    assert (same.name, same.options, same.time_control) == ("material-same", ours.options,
                                                            {"fixed_time_ms": 200})
    assert same.argv[-2:] == ("--player", "material")
    floor = games.opponent_player("material", material_run, ours)
    assert floor.time_control == {"depth_limit": 1}
    result = arena.MatchResult("network", "material-same", 1, 0, 1, 0,
                               over_deadline=(("network", 200, 0, 40), ("material-same", 200, 2, 41)))
    text = games.format_result(result)
    assert "network: 0 of 40 moves over the deadline (200 ms" in text and "material-same: 2 of 41" in text
    assert result.to_dict()["over_deadline"]["material-same"] == {"limit_ms": 200, "over": 2, "moves": 41}


def test_the_packaged_network_plays_without_a_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from shogi_dnn.bench import games

    argv = arena.usi_command(None)
    assert argv[3:] == ("usi", "--player", "network")        # no --run-dir, no --model: the packaged network
    args = games.parse_args(["--opponent", "fairy:16", "--out", "x"])
    assert args.run_dir is None and args.model is None
    for opponent in ("material", "material:same"):
        assert cli.main(["bench", "games", "--opponent", opponent, "--out", str(tmp_path / "m")]) == 2
        assert "needs --run-dir" in capsys.readouterr().err and not (tmp_path / "m").exists()
    assert cli.main(["bench", "games", "--player", "material", "--opponent", "fairy:16",
                     "--out", str(tmp_path / "m")]) == 2
    assert "give --run-dir" in capsys.readouterr().err


def test_elo_is_never_minus_zero_and_an_open_interval_is_said() -> None:
    from shogi_dnn.bench import games

    level = games.format_result(arena.MatchResult("a", "b", 1, 0, 1, 0))     # +1 -1: level, 2 games
    assert "Elo +0 (interval unbounded: too few games)" in level and "-0" not in level
    assert "no game finished: no score" in games.format_result(arena.MatchResult("a", "b", 0, 0, 0, 0))
    assert "Elo +35 (95% -113 .. +197)" in games.format_result(arena.MatchResult("a", "b", 10, 2, 8, 0))


def _usi_process(run_dir: Path) -> subprocess.Popen:
    # stdin read strictly, as under a UTF-8 locale (the C locale would escape bad bytes)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8:strict"}
    return subprocess.Popen([sys.executable, "-m", "shogi_dnn", "usi", "--run-dir", str(run_dir), "--player",
                             "material"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def _read_until(process: subprocess.Popen, prefix: str) -> list[str]:
    lines = []
    while True:
        line = process.stdout.readline()
        assert line, f"engine closed its output before {prefix!r}: {lines} {process.stderr.read()}"
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines


def test_usi_process_session(material_run: Path) -> None:
    process = _usi_process(material_run)
    try:
        def send(text: str) -> None:
            process.stdin.write(text + "\n")
            process.stdin.flush()

        send("usi")
        assert _read_until(process, "usiok")[0].startswith("id name shogi-dnn material")
        send("isready")
        _read_until(process, "readyok")
        send("bogus command")
        process.stdin.flush()
        process.stdin.buffer.write(b"\xff\xfe\x80 not utf-8\n")     # a GUI's stray bytes: ignored
        process.stdin.buffer.flush()
        send("position startpos moves 7g7f 9z9z")
        assert _read_until(process, "info string")[-1].startswith("info string illegal position")
        send("position startpos moves 7g7f")
        send("go infinite")
        time.sleep(0.5)
        send("stop")
        assert _read_until(process, "bestmove")[-1].split()[1] in {"3c3d", "8c8d", "1c1d", "9c9d", "2c2d",
                                                                   "4c4d", "5c5d", "6c6d", "7c7d"} | set(
            _legal_after("7g7f"))
        send("go infinite")
        time.sleep(0.3)
        send("quit")                                      # mid-search
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()


def _legal_after(*moves: str) -> list[str]:
    position = new_position(STANDARD_START_SFEN)
    for move in moves:
        position.push_usi(move)
    return position.legal_usi()


def test_command_line_errors(material_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["usi", "--model", str(tmp_path / "none.onnx")]) == 2
    assert "no such run directory or model file" in capsys.readouterr().err
    assert cli.main(["usi", "--model", str(tmp_path), "--player", "material"]) == 2
    assert "needs --run-dir" in capsys.readouterr().err
    assert cli.main(["bench", "games", "--run-dir", str(material_run), "--opponent", "material",
                     "--games", "3", "--out", str(tmp_path / "m")]) == 2
    assert "must be even" in capsys.readouterr().err
    assert cli.main(["bench", "games", "--run-dir", str(material_run), "--opponent", "gnushogi",
                     "--out", str(tmp_path / "m")]) == 2
    assert "expected 'material', 'material:same', 'fairy:N' or 'fairy:N:SKILL'" in capsys.readouterr().err
    assert cli.main(["bench", "games", "--run-dir", str(material_run), "--opponent", "fairy:10:-21",
                     "--out", str(tmp_path / "m")]) == 2
    assert "SKILL -20..20" in capsys.readouterr().err


@pytest.mark.slow
def test_a_fair_match_at_movetime_through_shogiarena(material_run: Path, tmp_path: Path) -> None:
    """The material player against itself with the same PUCT search at 200 ms a move: every move is timed
    in the CSA records and none is over the deadline."""
    try:
        arena.shogiarena_command()
    except Exception as exc:  # noqa: BLE001 - not installed: nothing to run
        pytest.skip(str(exc))
    out = tmp_path / "m"
    code = cli.main(["bench", "games", "--run-dir", str(material_run), "--player", "material", "--opponent",
                     "material:same", "--movetime", "200", "--games", "2", "--opening-plies", "2",
                     "--timeout", "400", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["games"] >= 1
    counts = summary["over_deadline"]
    assert set(counts) == {"material", "material-same"}
    for name, count in counts.items():
        paths = sorted((out / "games").glob("*.csa"))
        assert (count["over"], count["moves"]) == arena.over_deadline(paths, name, 200)
        # at 200 ms the search has 80 ms (NetworkDelay 120); on the shared 2-core machine a process can
        # wait for a core longer than that: one move in twenty is allowed there, never more
        assert count["moves"] > 0 and count["over"] <= count["moves"] // 20, counts


@pytest.mark.slow
def test_short_match_through_shogiarena(material_run: Path, tmp_path: Path) -> None:
    try:
        arena.shogiarena_command()
        fairy = arena.fairy_stockfish()
    except Exception as exc:  # noqa: BLE001 - either tool missing: nothing to run
        pytest.skip(str(exc))
    ours = arena.Player("ours", arena.usi_command(material_run, "material"), {"ResignValue": 3000},
                        {"depth_limit": 1})
    fsf = arena.Player("fsf", (fairy,), {"Threads": 1, "Hash": 16}, {"node_limit": 50})
    result = arena.run_match(tmp_path / "m", ours, fsf, games=2, opening_plies=2, seed=5, timeout=240)
    assert result.games + result.not_played == 2 and result.games >= 1
    records = sorted((tmp_path / "m" / "games").glob("*.csa"))
    assert len(records) == 2
    names = {(r.black, r.white) for p in records for r in kifu.read_record_file(p)}
    assert names == {("ours", "fsf"), ("fsf", "ours")}        # colours alternate
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["games"] == result.games and summary["player"] == "ours"
    openings = (tmp_path / "m" / "openings.sfen").read_text().split("\n")
    assert openings[0].startswith("startpos moves ") and shutil.which("true")
