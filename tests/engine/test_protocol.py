"""engine/protocol.py against a scripted GUI: the handshake, searches, stop and quit during a search,
ponder, MultiPV, mates, declarations, illegal input and unknown commands."""

from __future__ import annotations

import threading
import time

import pytest

from shogi_dnn.engine import protocol
from shogi_dnn.rules import new_position
from tests.engine.support import DECLARE, MATE_IN_ONE, Lines, SlowEvaluator, material


def engine(evaluator=None) -> tuple[protocol.UsiEngine, Lines]:
    out = Lines()
    return protocol.UsiEngine(evaluator or material(), out, name="test"), out


def test_handshake_loads_at_isready() -> None:
    evaluator = SlowEvaluator()
    usi, out = engine(evaluator)
    usi.handle("usi")
    assert out.lines[0] == f"id name test {protocol.__version__}" and out.lines[-1] == "usiok"
    assert "option name MultiPV type spin default 1 min 1 max 32" in out.lines
    assert any(line.startswith("option name EnteringKingRule type combo") for line in out.lines)
    assert evaluator.loads == 0
    usi.handle("isready")
    assert out.lines[-1] == "readyok" and evaluator.loads == 1
    usi.handle("isready")
    assert evaluator.loads == 1                           # loaded and warmed once


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
    usi.handle("go btime 2000 wtime 2000 byoyomi 300")    # within the clock
    began = time.monotonic()
    out.wait_for("bestmove", start=start)
    assert time.monotonic() - began < 2.0
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
    usi.handle("position startpos moves 7g7f")
    usi.handle("go ponder btime 0 wtime 0 byoyomi 300")
    time.sleep(0.3)
    assert not any(line.startswith("bestmove") for line in out.lines)
    began = time.monotonic()
    usi.handle("ponderhit")
    out.wait_for("bestmove", timeout=5)
    assert time.monotonic() - began < 2.0


def test_multipv_and_mate_in_one() -> None:
    usi, out = engine()
    usi.handle("setoption name MultiPV value 3")
    usi.handle("position startpos")
    usi.handle("go depth 1")
    out.wait_for("bestmove")
    assert {line.split(" multipv ")[1].split()[0] for line in out.lines if " multipv " in line} == {"1", "2", "3"}
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
    ("go btime soon", "info string error: go: go btime 'soon': not an integer"),
    ("setoption name MultiPV value 999", "info string error: setoption: MultiPV 999: outside 1..32"),
    ("setoption name MultiPV value many", "info string error: setoption"),
    ("setoption name NoSuchOption value 1", "info string unknown option 'NoSuchOption' ignored"),
    ("setoption MultiPV 2", "info string error: setoption: expected 'setoption name N [value V]'"),
])
def test_bad_input_is_one_info_line(command: str, answer: str) -> None:
    usi, out = engine()
    usi.handle(command)
    assert len(out.lines) == 1 and out.lines[0].startswith(answer), out.lines


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
