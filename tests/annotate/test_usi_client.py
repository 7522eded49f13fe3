"""usi_client: scores as the side to move sees them, and an engine that crashes or hangs as EngineFailure."""

from __future__ import annotations

import pytest

from shogi_dnn.annotate import usi_client
from shogi_dnn.annotate.usi_client import EngineFailure, UsiEngine, last_score, parse_score
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.kifu.evals import MATE_EVAL
from tests.annotate import fake_usi

SFEN = "lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2"


@pytest.mark.parametrize("line, score", [
    ("info depth 5 score cp -254 upperbound nodes 1000 pv 3a3b", -254),
    ("info depth 5 score cp 40000 pv 3a3b", MATE_EVAL),
    ("info depth 9 score mate 3 pv 3a3b", MATE_EVAL),
    ("info depth 9 score mate -2 pv 3a3b", -MATE_EVAL),
    ("info depth 0 score mate 0", -MATE_EVAL),
    ("info depth 9 score mate + pv 3a3b", MATE_EVAL),
    ("info depth 9 score mate - pv 3a3b", -MATE_EVAL),
    ("info depth 9 nodes 100", None),
    ("info depth 5 score cp -1e5 pv 3a3b", None),
    ("info depth 5 score cp 12.5 pv 3a3b", None),
    ("info depth 5 score cp 300x pv 3a3b", None),
    ("info depth 5 score cp", None),
    ("info depth 5 score mate 3e2 pv 3a3b", None),
])
def test_parse_score(line: str, score: int | None) -> None:
    assert parse_score(line) == score


@pytest.mark.parametrize("lines, score", [
    (["info depth 1 score cp 10 pv 7g7f", "info depth 2 score cp 20 pv 7g7f", "info nodes 1000"], 20),
    (["info depth 2 score cp 20 pv 7g7f", "info string score cp 99"], 20),
    (["info depth 2 multipv 1 score cp 20 pv 7g7f", "info depth 2 multipv 2 score cp -5 pv 2g2f"], 20),
    (["info depth 1 score cp 10 pv 7g7f", "info depth 2 score cp 1.5 pv 7g7f"], None),
    (["info depth 1 nodes 10", "readyok"], None),
    ([], None),
])
def test_last_score_is_the_last_scoring_info_line(lines: list[str], score: int | None) -> None:
    assert last_score(lines) == score


def test_options_offered_are_read_with_their_defaults(fake_engine) -> None:
    engine = UsiEngine(fake_engine())
    try:
        assert engine.offered == {"Threads": "1"}
    finally:
        engine.close()


def test_search_gives_the_engines_score_and_move(fake_engine) -> None:
    engine = UsiEngine(fake_engine(moves=True))
    try:
        assert engine.name == "FakeUSI 1"
        result = engine.search(SFEN, 100, 10.0)
        assert result.score == fake_usi.score_of(SFEN)
        assert result.bestmove == fake_usi.move_of(SFEN)
    finally:
        engine.close()


@pytest.mark.parametrize("kind", ["crash", "hang"])
def test_a_crash_or_a_hang_is_an_engine_failure(fake_engine, kind: str) -> None:
    engine = UsiEngine(fake_engine(**{kind: [fake_usi.position_key(SFEN)]}))
    try:
        with pytest.raises(EngineFailure) as failure:
            engine.search(SFEN, 100, 0.5)
        assert failure.value.kind == (usi_client.CRASH if kind == "crash" else usi_client.TIMEOUT)
    finally:
        engine.close(graceful=False)
    assert engine.proc.poll() is not None          # killed, not left behind


def test_a_missing_engine_or_one_that_is_not_usi_is_one_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        usi_client.find_engine("no-such-engine-here")
    with pytest.raises(ConfigError, match="no such executable"):
        usi_client.find_engine(str(tmp_path / "missing"))
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\necho hello\n")
    silent.chmod(0o755)
    with pytest.raises(RunError, match="not a working USI engine"):
        UsiEngine(str(silent))


def test_the_hash_is_sized_to_the_node_budget() -> None:
    """usinewgame clears the whole hash: annotate asks for the least a search of its budget fills."""
    from shogi_dnn.annotate.usi_client import DEFAULT_OPTIONS, sized_options

    hash_of = {n: dict(sized_options(n))["Hash"] for n in (1, 1000, 16_384, 16_385, 100_000, 10**7)}
    assert hash_of == {1: "1", 1000: "1", 16_384: "1", 16_385: "2", 100_000: "8", 10**7: "16"}
    assert [k for k, _ in sized_options(1000)] == [k for k, _ in DEFAULT_OPTIONS]
