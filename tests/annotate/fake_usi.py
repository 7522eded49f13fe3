"""A scripted USI engine for annotate's tests: deterministic answers, and crashes or hangs on demand.

Run as a program (tests write a wrapper script naming it as the engine). Its answer to a position
(`position sfen S [moves ...]` or `position startpos [moves ...]`) depends on the position alone (board, side to move, hands: the SFEN's first three fields):
`info depth 1 score cp score_of(sfen) pv M` then `bestmove M`, M the legal move move_of(sfen) when the
config asks for moves (python-shogi), else `resign`. $FAKE_USI_CONFIG names a JSON file:
  {"moves": bool, "crash": [keys], "hang": [keys], "delay": seconds per search, "mate": [keys],
   "garbage": [keys]}
`crash`: exit at once when asked to search a position with that key (position_key); `hang`: never
answer it; `mate`: answer `score mate -1` for it; `garbage`: answer `score cp -1e5` (no integer).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path


def position_key(sfen: str) -> str:
    """A position without its move number: 'board side hands'."""
    return " ".join(sfen.split()[:3])


def _digest(sfen: str) -> int:
    return int(hashlib.sha1(position_key(sfen).encode()).hexdigest()[:8], 16)


def score_of(sfen: str) -> int:
    """The fake's score of a position, cp, -1000..1000."""
    return _digest(sfen) % 2001 - 1000


def move_of(sfen: str) -> str:
    """The fake's best move: one of the legal moves (sorted as USI), chosen by the position's digest."""
    import shogi
    moves = sorted(m.usi() for m in shogi.Board(sfen).legal_moves)
    return moves[_digest(sfen) % len(moves)] if moves else "resign"


def write_engine(folder: Path, **config: object) -> str:
    """An executable fake engine in `folder` (created) answering with `config`; its path."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    script = folder / "fake-usi"
    script.write_text(f"#!/bin/sh\nFAKE_USI_CONFIG='{folder / 'config.json'}' exec '{sys.executable}' "
                      f"'{Path(__file__).resolve()}'\n", encoding="utf-8")
    script.chmod(0o755)
    return str(script)


def _position(words: list[str]) -> str:
    """The SFEN of `sfen S [moves ...]` / `startpos [moves ...]` (python-shogi plays the moves)."""
    if words[:1] == ["startpos"]:
        start, rest = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1", words[1:]
    else:
        start, rest = " ".join(words[1:5]), words[5:]
    if rest[:1] != ["moves"] or len(rest) == 1:
        return start
    import shogi
    board = shogi.Board(start)
    for move in rest[1:]:
        board.push_usi(move)
    return board.sfen()


def main() -> None:
    path = os.environ.get("FAKE_USI_CONFIG")
    config = json.loads(Path(path).read_text(encoding="utf-8")) if path else {}
    sfen = ""
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "usi":
            print("id name FakeUSI 1\noption name Threads type spin default 1 min 1 max 8\nusiok", flush=True)
        elif words[0] == "isready":
            print("readyok", flush=True)
        elif words[0] == "position":
            sfen = _position(words[1:])
        elif words[0] == "go":
            key = position_key(sfen)
            if key in config.get("crash", ()):
                os._exit(3)
            if key in config.get("hang", ()):
                time.sleep(3600)
            time.sleep(config.get("delay", 0.0))
            move = move_of(sfen) if config.get("moves") else "resign"
            score = "mate -1" if key in config.get("mate", ()) else f"cp {score_of(sfen)}"
            score = "cp -1e5" if key in config.get("garbage", ()) else score
            print(f"info depth 1 score {score} pv {move}\nbestmove {move}", flush=True)
        elif words[0] == "quit":
            return


if __name__ == "__main__":
    main()
