"""`shogi-dnn selfplay`: seeded games, the same files for any worker count and after a kill, verify, endings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shogi_dnn import cli, kifu
from shogi_dnn.errors import ConfigError
from shogi_dnn.kifu.record import GameRecord, Winner
from shogi_dnn.rules import new_position
from shogi_dnn.selfplay import job
from shogi_dnn.selfplay.game import (
    Opening,
    Settings,
    _Board,
    parse_opening,
    plan_game,
    play_game,
    resign_verdict,
)
from tests.annotate import fake_usi

STANDARD = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1"


@pytest.fixture
def engine(tmp_path: Path) -> str:
    """The fake engine playing legal moves chosen by the position's digest, scores -1000..1000."""
    return fake_usi.write_engine(tmp_path / "engine", moves=True)


def _settings(engine: str, **changes: object) -> Settings:
    values = {"engines": (engine,), "nodes": (10, 20), "random_plies": (0, 4), "max_plies": 30, **changes}
    return Settings(**values)  # type: ignore[arg-type]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.name.endswith(".csa") or p.name in (job.SUMMARY_TSV, job.SETTINGS_JSON, job.ABORTED_TSV)}


def test_a_seed_decides_the_game_and_the_record_reads_back(engine: str) -> None:
    settings = _settings(engine)
    assert plan_game(7, settings) == plan_game(7, settings)
    one, two = play_game(7, settings), play_game(7, settings)
    assert one.record == two.record and one.plan.nodes in (10, 20)
    text = job.game_text(one, True)
    (back,) = [r for r in kifu.read_record_bytes(text.encode(), "x.csa") if isinstance(r, GameRecord)]
    assert back.moves == one.record.moves and back.winner is one.record.winner is Winner.DRAW
    assert back.evals == one.record.evals                   # the scores survive as floodgate comments
    engine_plies = len(one.record.moves) - one.plan.random_plies
    assert sum(e is not None for e in back.evals) == engine_plies == one.engine_plies
    # the score of the search that chose a move is the next position's evaluation, turned to its mover
    position = new_position(STANDARD)
    for ply, move in enumerate(one.record.moves):
        position.push_usi(move)
        expected = fake_usi.score_of(_sfen_before(one.record.moves[:ply]))
        if ply >= one.plan.random_plies:
            assert back.evals[ply + 1] == -expected


def _sfen_before(moves: tuple[str, ...]) -> str:
    position = new_position(STANDARD)
    for move in moves:
        position.push_usi(move)
    return position.sfen()


def test_workers_and_a_torn_folder_give_the_same_files(engine: str, tmp_path: Path) -> None:
    settings = _settings(engine)
    job.run_selfplay(tmp_path / "one", settings, 6, 6_000_000, workers=1)
    job.run_selfplay(tmp_path / "three", settings, 6, 6_000_000, workers=3)
    assert _files(tmp_path / "one") == _files(tmp_path / "three")
    # a kill between a game's text and its summary row, and one inside the summary's last line
    torn = tmp_path / "torn"
    job.run_selfplay(torn, settings, 4, 6_000_000)
    with (torn / "selfplay-00000.csa").open("a") as f:
        f.write("/\nN+half a game\n+7776FU\n")
    with (torn / job.SUMMARY_TSV).open("a") as f:
        f.write("4\t6000004\tselfplay-00000.csa\t1")
    report = job.run_selfplay(torn, settings, 6, 6_000_000)
    assert _files(torn) == _files(tmp_path / "one")
    assert report["slots"] == 6 and report["this_run"]["slots"] == 2


def test_verify_replays_and_finds_a_changed_game(engine: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "games"
    job.run_selfplay(out, _settings(engine), 5, 6_000_100)
    assert job.verify(out, 5) == []
    path = out / "selfplay-00000.csa"
    text = path.read_text()
    first_score = text.index("'** ")
    path.write_text(text[:first_score] + "'** 12345\n" + text[text.index("\n", first_score) + 1:])
    problems = job.verify(out, 5)
    assert len(problems) == 1 and "replayed to another game" in problems[0]
    assert cli.main(["selfplay", "--verify", "5", "--out", str(out)]) == 1
    assert "1 differ" in capsys.readouterr().out


def test_other_settings_and_bad_openings_are_one_line(engine: str, tmp_path: Path) -> None:
    out = tmp_path / "games"
    job.run_selfplay(out, _settings(engine), 2, 6_000_000)
    with pytest.raises(ConfigError, match="nodes differ"):
        job.run_selfplay(out, _settings(engine, nodes=(30,)), 2, 6_000_000)
    with pytest.raises(ConfigError, match="first_seed differ"):
        job.run_selfplay(out, _settings(engine), 2, 6_000_001)
    with pytest.raises(ConfigError, match=r"book.txt:3: illegal move '7g7e'"):
        parse_opening("startpos moves 7g7e", "book.txt:3")
    with pytest.raises(ConfigError, match="expected 'startpos"):
        parse_opening("hello", "book.txt:1")
    assert parse_opening("position startpos moves 7g7f 3c3d", "x").moves == ("7g7f", "3c3d")
    book = tmp_path / "book.txt"
    book.write_text("# two openings\nstartpos moves 2g2f\n\nsfen " + STANDARD + " moves 7g7f\n")
    assert cli.main(["selfplay", "--engine", engine, "--openings", str(book), "--games", "3", "--nodes", "5",
                     "--random-plies", "0-2", "--max-plies", "20", "--out", str(tmp_path / "book"),
                     "--no-progress"]) == 0
    rows = job.repair(tmp_path / "book").rows
    assert len(rows) == 3
    games = job._games_in(tmp_path / "book" / "selfplay-00000.csa")
    assert all("+2726FU" in g.split("\n")[6] or "+7776FU" in g.split("\n")[6] for g in games)
    assert cli.main(["selfplay", "--engine", engine, "--random-plies", "5-1", "--out",
                     str(tmp_path / "bad")]) == 2


def test_a_crashing_engine_aborts_its_game_only(tmp_path: Path) -> None:
    crash_at = " ".join(_sfen_before(()).split()[:3])         # the start: every game with 0 random plies
    engine = fake_usi.write_engine(tmp_path / "crash", moves=True, crash=[crash_at])
    settings = _settings(engine)
    plies = {s: plan_game(s, settings).random_plies for s in range(6_000_000, 6_000_200)}
    first = next(s for s in plies if plies[s] == 0 and plies[s + 1] > 0 and plies[s + 2] > 0)
    report = job.run_selfplay(tmp_path / "games", settings, 3, first)
    assert report["aborted"] == 1 and report["games"] == 2
    aborted = (tmp_path / "games" / job.ABORTED_TSV).read_text().splitlines()
    assert aborted[1].startswith(f"0\t{first}\tcrash at ply 1")


def test_endings_by_the_rules() -> None:
    board = _Board(Opening("4k4/9/9/9/9/9/9/9/4K4 b - 1"))
    for _ in range(3):
        for move in ("5i5h", "5a5b", "5h5i", "5b5a"):
            assert board.ending(256) is None
            board.push(move, None)
    assert board.ending(256)[:2] == (Winner.DRAW, kifu.Ending.SENNICHITE)
    mate = _Board(Opening("4k4/9/4P4/9/9/9/9/9/4K4 b G 1", ("G*5b",)))
    assert mate.ending(256)[:2] == (Winner.BLACK, kifu.Ending.CHECKMATE)
    assert _Board(Opening(STANDARD, ("7g7f",))).ending(1)[:2] == (Winner.DRAW, kifu.Ending.MAX_MOVES)


def test_resignation_by_adjudication() -> None:
    assert resign_verdict([100, None]) is None
    assert resign_verdict([32000])[0] == 1                    # a mate for Black: White has lost
    assert resign_verdict([-3500] * 6)[0] == 0
    assert resign_verdict([-3500] * 5 + [3500]) is None
    assert resign_verdict([3000] * 5) is None


@pytest.mark.slow
def test_sigkill_then_rerun_gives_the_same_files(tmp_path: Path) -> None:
    engine = fake_usi.write_engine(tmp_path / "slow", moves=True, delay=0.01)
    argv = ["--engine", engine, "--games", "8", "--nodes", "10,20", "--random-plies", "0-4", "--max-plies", "30",
            "--no-progress"]
    straight = tmp_path / "straight"
    assert cli.main(["selfplay", *argv, "--out", str(straight)]) == 0
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "shogi_dnn", "selfplay", *argv, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(job._read_tsv(killed / job.SUMMARY_TSV)) < 3:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(job._read_tsv(killed / job.SUMMARY_TSV)) < 8
    assert cli.main(["selfplay", *argv, "--out", str(killed)]) == 0
    assert _files(killed) == _files(straight)


@pytest.mark.slow
def test_sigterm_stops_and_the_rerun_continues(tmp_path: Path) -> None:
    engine = fake_usi.write_engine(tmp_path / "slow", moves=True, delay=0.02)
    argv = ["--engine", engine, "--games", "6", "--nodes", "10", "--max-plies", "30", "--no-progress"]
    out = tmp_path / "games"
    proc = subprocess.Popen([sys.executable, "-m", "shogi_dnn", "selfplay", *argv, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(job._read_tsv(out / job.SUMMARY_TSV)) < 1:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "rerun the same command to continue" in err and "Traceback" not in err
    assert cli.main(["selfplay", *argv, "--out", str(out)]) == 0
    assert len(job.repair(out).rows) == 6


FAIRY = "/usr/games/fairy-stockfish"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(FAIRY) and not __import__("shutil").which("fairy-stockfish"),
                    reason="fairy-stockfish not installed")
def test_fairy_stockfish_games_replay(tmp_path: Path) -> None:
    out = tmp_path / "fairy"
    assert cli.main(["selfplay", "--games", "2", "--nodes", "300", "--out", str(out), "--no-progress"]) == 0
    assert job.verify(out, 2) == []
    records = [r for r in kifu.read_record_file(out / "selfplay-00000.csa") if isinstance(r, GameRecord)]
    assert len(records) == 2 and all(r.has_result and r.evals for r in records)
