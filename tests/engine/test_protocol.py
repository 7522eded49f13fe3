"""engine/protocol.py against a scripted GUI: the handshake (loading from `usi` on), searches, stop and quit
during a search, ponder, MultiPV, mates, declarations, illegal input and unknown commands, malformed `go`
lines, the clock under an artificial CPU load, the tree kept between moves, temperature."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from shogi_dnn.engine import limits as limits_lib
from shogi_dnn.engine import protocol
from shogi_dnn.engine import search as search_lib
from shogi_dnn.rules import new_position
from tests.engine.support import DECLARE, MATE_IN_ONE, Lines, SlowEvaluator, material


def engine(evaluator=None) -> tuple[protocol.UsiEngine, Lines]:
    out = Lines()
    return protocol.UsiEngine(evaluator or material(), out, name="test"), out


def spy_searches(usi: protocol.UsiEngine) -> list:
    """The searches `usi` starts, in order (their limits: the deadline each go or ponderhit set)."""
    started: list = []
    new_search = usi._new_search

    def recording(limits: limits_lib.Limits):
        started.append(new_search(limits))
        return started[-1]
    usi._new_search = recording  # type: ignore[method-assign]  # the spy shadows the method on this instance
    return started


def planned_seconds(usi: protocol.UsiEngine, go_args: list[str]) -> tuple[float, float]:
    """(the move's time, the search's share of it) that `go go_args` gives in the current position."""
    seconds = protocol.move_seconds(protocol.parse_go(go_args), usi.position.turn, usi.options.NetworkDelay)
    return seconds, usi.search_seconds(seconds)


def assert_deadline(usi: protocol.UsiEngine, limits: limits_lib.Limits, began: float, ended: float,
                    planned: tuple[float, float]) -> None:
    """The move must be played `planned[0]` after the command's arrival (in [began, ended]) and the
    search stops `planned[1]` after it: the deadlines the engine set, not how long this machine took."""
    seconds, search_seconds = planned
    arrival = usi._hard_deadline - seconds
    assert began <= arrival + 1e-9 and arrival <= ended + 1e-9
    assert limits.deadline is not None and not limits.infinite
    assert limits.deadline == pytest.approx(arrival + search_seconds, abs=1e-9)


def test_handshake_loads_from_usi_on() -> None:
    evaluator = SlowEvaluator()
    usi, out = engine(evaluator)
    usi.handle("usi")
    assert out.lines[0] == f"id name test {protocol.__version__}" and out.lines[-1] == "usiok"
    assert "option name MultiPV type spin default 1 min 1 max 32" in out.lines
    assert "option name CPuct type spin default 100 min 1 max 10000" in out.lines
    assert any(line.startswith("option name EnteringKingRule type combo") for line in out.lines)
    usi.handle("isready")                                 # waits for the load started at usi
    assert out.lines[-1] == "readyok" and evaluator.loads == 1
    usi.handle("isready")
    assert evaluator.loads == 1                           # loaded and warmed once


class _Failing(SlowEvaluator):
    def load(self) -> None:
        super().load()
        raise OSError("no model here")


def test_a_failed_load_answers_readyok_and_plays_material_moves() -> None:
    evaluator = _Failing()
    err = Lines()
    out = Lines()
    usi = protocol.UsiEngine(evaluator, out, name="test", err=err)
    usi.handle("usi")
    usi.handle("isready")
    failure = "info string error: model: no model here; playing the material player's moves"
    assert out.lines[-2:] == [failure, "readyok"]
    usi.handle("isready")                                 # tried again at isready
    assert evaluator.loads == 2 and out.lines[-2:] == [failure, "readyok"]
    start = len(out.lines)
    usi.handle("position startpos moves 7g7f")
    usi.handle("go byoyomi 1000")                         # not tried again at go: the clock runs
    assert out.since(start) == [failure, f"bestmove {protocol.material_move(new_position(_AFTER_7G7F))}"]
    assert evaluator.loads == 2 and out.since(start)[-1].split()[1] in new_position(_AFTER_7G7F).legal_usi()
    assert err.lines == ["shogi-dnn usi: error: no model here"]      # once
    assert usi.run(["quit"]) == 1


_AFTER_7G7F = "lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2"


def test_a_game_of_searches() -> None:
    usi, out = engine()
    for line in ("usi", "isready", "usinewgame", "position startpos moves 7g7f 3c3d", "go depth 1"):
        usi.handle(line)
    best = out.wait_for("bestmove")
    info = [line for line in out.lines if line.startswith("info depth")][-1]
    assert " score cp " in info and " nodes " in info and " nps " in info and " pv " in info
    position = new_position("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1")
    for move in ("7g7f", "3c3d"):
        position.push_usi(move)
    assert best.split()[1] in position.legal_usi()
    start = len(out.lines)
    searches = spy_searches(usi)
    planned = planned_seconds(usi, ["btime", "2000", "wtime", "2000", "byoyomi", "300"])
    assert planned[1] <= planned[0] < 2.0
    began = time.monotonic()
    usi.handle("go btime 2000 wtime 2000 byoyomi 300")    # within the clock
    ended = time.monotonic()
    assert_deadline(usi, searches[-1].limits, began, ended, planned)
    out.wait_for("bestmove", start=start)
    start = len(out.lines)
    usi.handle("go nodes 300")
    out.wait_for("bestmove", start=start)
    nodes = [int(line.split(" nodes ")[1].split()[0]) for line in out.since(start) if line.startswith("info")]
    assert 300 <= nodes[-1] < 600
    usi.handle("gameover win")
    assert usi.run(iter(["quit"])) == 0


def test_stop_during_a_search() -> None:
    usi, out = engine(SlowEvaluator())
    usi.handle("position startpos")
    usi.handle("go infinite")
    time.sleep(0.3)
    assert not any(line.startswith("bestmove") for line in out.lines)   # infinite: none before stop
    began = time.monotonic()
    usi.handle("stop")
    assert time.monotonic() - began < 1.0
    assert sum(line.startswith("bestmove") for line in out.lines) == 1
    assert out.lines[-1].startswith("bestmove ") and out.lines[-2].startswith("info depth")


def test_quit_mid_search_ends_the_run() -> None:
    usi, out = engine(SlowEvaluator())
    lines = iter(["usi", "isready", "position startpos", "go infinite", "isready", "quit", "go depth 1"])
    done = []
    thread = threading.Thread(target=lambda: done.append(usi.run(_slow(lines))))
    thread.start()
    thread.join(timeout=10)
    assert done == [0]
    assert out.lines.count("readyok") == 2                # answered while searching
    assert sum(line.startswith("bestmove") for line in out.lines) == 1   # nothing after quit


def _slow(lines):
    for line in lines:
        yield line
        if line.startswith("go"):
            time.sleep(0.3)


def test_ponder_then_ponderhit() -> None:
    usi, out = engine(SlowEvaluator())
    searches = spy_searches(usi)
    usi.handle("position startpos moves 7g7f")
    usi.handle("go ponder btime 0 wtime 0 byoyomi 300")
    time.sleep(0.3)
    assert not any(line.startswith("bestmove") for line in out.lines)
    assert searches[-1].limits.deadline is None           # pondering: no clock yet
    planned = planned_seconds(usi, ["btime", "0", "wtime", "0", "byoyomi", "300"])
    assert planned[1] <= planned[0] < 2.0
    began = time.monotonic()
    usi.handle("ponderhit")
    ended = time.monotonic()
    assert_deadline(usi, searches[-1].limits, began, ended, planned)    # the clock starts at ponderhit
    out.wait_for("bestmove", timeout=5)


def test_multipv_and_mate_in_one() -> None:
    usi, out = engine()
    usi.handle("setoption name MultiPV value 3")
    usi.handle("position startpos")
    usi.handle("go depth 1")
    out.wait_for("bestmove")
    ranks = {line.split(" multipv ")[1].split()[0] for line in out.lines if " multipv " in line}
    assert ranks == {"1", "2", "3"}
    start = len(out.lines)
    usi.handle("setoption name MultiPV value 1")
    usi.handle(f"position sfen {MATE_IN_ONE}")
    usi.handle("go btime 1000 wtime 1000")
    assert out.wait_for("bestmove", start=start) == "bestmove G*5b"
    assert " score mate 1 " in [line for line in out.since(start) if line.startswith("info")][-1]


def test_declaration_and_resignation() -> None:
    usi, out = engine()
    usi.handle(f"position sfen {DECLARE}")
    usi.handle("go byoyomi 100")
    assert out.lines[-1] == "bestmove win"
    usi.handle("setoption name EnteringKingRule value NoEnteringKing")
    usi.handle("go depth 1")
    assert out.wait_for("bestmove", start=1) != "bestmove win"
    start = len(out.lines)
    usi.handle("setoption name ResignValue value 500")
    usi.handle("position sfen 4k4/9/9/9/9/9/9/9/4K4 b 2r2b 1")        # two rooks and bishops down
    usi.handle("go depth 1")
    assert out.wait_for("bestmove", start=start) == "bestmove resign"


@pytest.mark.parametrize("command,answer", [
    ("position startpos moves 7g7e", "info string illegal position: position: move 1 '7g7e' is illegal"),
    ("position sfen garbage here", "info string illegal position"),
    ("position kifu 1", "info string illegal position: position: expected 'startpos' or 'sfen'"),
    ("position", "info string illegal position: position: nothing after 'position'"),
    ("setoption name MultiPV value 999", "info string error: setoption: MultiPV 999: outside 1..32"),
    ("setoption name MultiPV value many", "info string error: setoption"),
    ("setoption name NoSuchOption value 1", "info string unknown option 'NoSuchOption' ignored"),
    ("setoption MultiPV 2", "info string error: setoption: expected 'setoption name N [value V]'"),
])
def test_bad_input_is_one_info_line(command: str, answer: str) -> None:
    usi, out = engine()
    usi.handle(command)
    assert len(out.lines) == 1 and out.lines[0].startswith(answer), out.lines


@pytest.mark.parametrize("sfen,rule", [
    ("9/9/9/9/9/9/9/9/9 b P 1", "black has no king (exactly one)"),
    ("4k4/9/9/9/9/9/9/9/9 b G 1", "black has no king (exactly one)"),
    ("9/9/9/9/9/9/9/9/4K4 b G 1", "white has no king (exactly one)"),
])
def test_a_position_that_breaks_a_rule_is_refused_and_never_searched(sfen: str, rule: str) -> None:
    usi, out = engine()
    searches = spy_searches(usi)
    usi.handle(f"position sfen {sfen}")
    assert len(out.lines) == 1 and out.lines[0].startswith("info string illegal position: ") \
        and rule in out.lines[0], out.lines
    usi.handle("go depth 1")
    assert out.lines[-2:] == ["info string no valid position; resigning", "bestmove resign"]
    assert searches == []


def test_unknown_commands_are_ignored_and_an_illegal_position_resigns() -> None:
    usi, out = engine()
    for line in ("", "   ", "hello world", "register later", "debug on", "\x00\xff"):
        usi.handle(line)
    assert out.lines == []
    usi.handle("position startpos moves 7g7f 7g7f")
    usi.handle("go depth 1")
    assert out.lines[-2:] == ["info string no valid position; resigning", "bestmove resign"]
    usi.handle("position startpos")                      # a good position afterwards works again
    usi.handle("go depth 1")
    assert out.wait_for("bestmove", start=3) != "bestmove resign"
    usi.handle("go mate 1000")
    assert out.lines[-1] == "checkmate notimplemented"


def test_time_budget() -> None:
    go = protocol.parse_go(["btime", "60000", "wtime", "30000", "binc", "1000", "winc", "2000"])
    assert protocol.move_seconds(go, 0, 100) == pytest.approx((60000 / 30 + 1000 - 100) / 1000)
    assert protocol.move_seconds(go, 1, 100) == pytest.approx((30000 / 30 + 2000 - 100) / 1000)
    assert protocol.move_seconds(protocol.parse_go(["byoyomi", "1000"]), 0, 120) == pytest.approx(0.88)
    assert protocol.move_seconds(protocol.parse_go(["movetime", "500"]), 0, 120) == pytest.approx(0.38)
    assert protocol.move_seconds(protocol.parse_go(["btime", "50", "wtime", "50"]), 0, 120) == \
        protocol.MIN_SECONDS
    assert protocol.move_seconds(protocol.parse_go(["infinite"]), 0, 120) is None


@pytest.mark.parametrize("line,problem", [
    ("go byoyomi 1e9", "info string go byoyomi '1e9': not an integer, ignored"),
    ("go btime soon wtime 100", "info string go btime 'soon': not an integer, ignored"),
    ("go btime 1000 wtime 1000 frobnicate", "info string go 'frobnicate': unknown, ignored"),
    ("go movetime -5", "info string go movetime '-5': not an integer, ignored"),
    ("go btime", "info string go btime '': not an integer, ignored"),
])
def test_a_malformed_go_still_answers(line: str, problem: str) -> None:
    usi, out = engine()
    searches = spy_searches(usi)
    usi.handle("position startpos")
    usi.handle(line)
    assert out.lines[0] == problem
    assert out.wait_for("bestmove").split()[1] in new_position(protocol.STANDARD_START_SFEN).legal_usi()
    limits = searches[-1].limits                          # a clock or one ply: the search ends by itself
    assert not limits.infinite and (limits.depth == 1 or limits.deadline is not None)
    if limits.deadline is not None:
        assert planned_seconds(usi, line.split()[1:])[0] < 3.0


def test_a_malformed_infinite_go_answers_at_stop() -> None:
    usi, out = engine(SlowEvaluator())
    usi.handle("position startpos")
    usi.handle("go infinite btime soon")
    time.sleep(0.2)
    assert out.lines == ["info string go btime 'soon': not an integer, ignored"]
    usi.handle("stop")
    assert out.lines[-1].startswith("bestmove ") and sum(x.startswith("bestmove") for x in out.lines) == 1


def test_an_absurd_clock_is_capped() -> None:
    problems: list[str] = []
    go = protocol.parse_go(["btime", "99999999999999999999999", "wtime", "1"], problems)
    assert problems == [] and go.btime == protocol.MAX_CLOCK_MS and go.wtime == 1
    seconds = protocol.move_seconds(go, 0, 120)
    assert seconds == pytest.approx((protocol.MAX_CLOCK_MS / protocol.MOVES_TO_GO - 120) / 1000)
    assert protocol.move_seconds(go, 1, 120) == protocol.MIN_SECONDS
    usi, out = engine()
    searches = spy_searches(usi)
    usi.handle("position startpos moves 7g7f")            # White to move: 1 ms left, answered at once
    planned = planned_seconds(usi, ["btime", "99999999999999999999999", "wtime", "1"])
    assert planned == (protocol.MIN_SECONDS, protocol.MIN_SECONDS)
    began = time.monotonic()
    usi.handle("go btime 99999999999999999999999 wtime 1")
    ended = time.monotonic()
    assert_deadline(usi, searches[-1].limits, began, ended, planned)
    out.wait_for("bestmove")


def _busy(count: int) -> list[subprocess.Popen]:
    """Processes that spin on a core each, 5 nice levels below the test (the engine is not the one niced)."""
    return [subprocess.Popen([sys.executable, "-c", "import os; os.nice(5)\nwhile True: pass"])
            for _ in range(count)]


def test_the_clock_under_cpu_load() -> None:
    """Searches at byoyomi 600 on a machine made busier by two spinning processes, with an evaluator that
    sleeps and spends CPU per position: every bestmove before byoyomi."""
    load = _busy(2)
    try:
        usi, out = engine(SlowEvaluator(delay=0.01, per_position=0.0005))
        usi.handle("setoption name NetworkDelay value 120")
        usi.handle("isready")
        taken = []
        games = ("", " moves 7g7f", " moves 7g7f 3c3d", " moves 2g2f", " moves 2g2f 8c8d", " moves 5g5f")
        for moves in games:
            usi.handle(f"position startpos{moves}")
            start = len(out.lines)
            began = time.monotonic()
            usi.handle("go btime 0 wtime 0 byoyomi 600")
            out.wait_for("bestmove", start=start, timeout=5)
            taken.append(time.monotonic() - began)
    finally:
        for process in load:
            process.kill()
            process.wait()
    # zero moves over byoyomi (a server's forfeit line); the engine aims at byoyomi - NetworkDelay (480 ms),
    # which a niced pytest on a machine loaded 8 on 2 cores sometimes misses by the ~100 ms the process
    # waits for a core (docs/engine.md: the clock, measured)
    assert max(taken) < 0.6, taken
    assert sorted(taken)[len(taken) // 2] > 0.1, taken    # and the time was used


def test_the_tree_is_kept_and_temperature_varies_the_opening() -> None:
    usi, out = engine()
    usi.handle("position startpos")
    usi.handle("go nodes 800")
    best = out.wait_for("bestmove").split()
    kept = usi._tree[1]
    reply = best[3] if len(best) > 3 else None
    assert reply is not None
    usi.handle(f"position startpos moves {best[1]} {reply}")
    start = len(out.lines)
    usi.handle("go nodes 200")
    out.wait_for("bestmove", start=start)
    assert usi._tree[1] is search_lib.subtree(kept, (best[1], reply))     # the reply's node is the root
    usi.handle("usinewgame")
    assert usi._tree is None
    usi.handle("setoption name Temperature value 100")
    usi.handle("setoption name TemperatureMoves value 10")
    moves = set()
    for _ in range(12):
        usi.handle("usinewgame")
        usi.handle("position startpos")
        start = len(out.lines)
        usi.handle("go nodes 300")
        moves.add(out.wait_for("bestmove", start=start).split()[1])
    assert len(moves) > 1
