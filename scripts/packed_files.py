#!/usr/bin/env python3
"""Write the positions of game records as dlshogi hcpe or YaneuraOu PackedSfenValue files with cshogi's own
writer (to_hcp / to_psfen): test data for `convert`'s position-file reader and its benchmark.

  python scripts/packed_files.py RECORDS... --out FILE.hcpe [--format hcpe|psv] [--positions N]

Every position before a move of every game with a result, game by game (the eval field: the record's
evaluation where it has one, else 0); with --positions N the rows are repeated (or cut) to exactly N.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cshogi
import numpy as np

from shogi_dnn.convert.sources import iter_sources
from shogi_dnn.dataset import packed
from shogi_dnn.kifu import read_record_bytes
from shogi_dnn.kifu.record import GameRecord, Winner

HCPE_RESULT = {Winner.BLACK: 1, Winner.WHITE: 2, Winner.DRAW: 0}


def rows(game: GameRecord, kind: str) -> np.ndarray:
    out = np.zeros(len(game.moves), packed.DTYPES[kind])
    board = cshogi.Board(game.start_sfen)
    for ply, usi in enumerate(game.moves):
        move = board.move_from_usi(usi)
        if kind == packed.HCPE:
            board.to_hcp(out[ply:ply + 1]["pos"])
            out[ply]["move"] = cshogi.move16(move)
            out[ply]["result"] = HCPE_RESULT[game.winner]
        else:
            board.to_psfen(out[ply:ply + 1]["pos"])
            out[ply]["move"] = cshogi.move16_to_psv(cshogi.move16(move))
            out[ply]["ply"] = ply
            won = (game.winner is Winner.BLACK) == (board.turn == cshogi.BLACK)
            out[ply]["result"] = 0 if game.winner is Winner.DRAW else (1 if won else -1)
        score = game.evals[ply] if game.evals else None
        out[ply]["eval"] = 0 if score is None else score
        board.push(move)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--format", choices=(packed.HCPE, packed.PSV), default=packed.HCPE)
    parser.add_argument("--positions", type=int, default=0)
    args = parser.parse_args()
    chunks = []
    for source in iter_sources(args.records):
        if isinstance(source, Exception):
            continue
        for game in read_record_bytes(source.data, source.name):
            if isinstance(game, GameRecord) and game.has_result and game.moves:
                chunks.append(rows(game, args.format))
    data = np.concatenate(chunks)
    if args.positions:
        data = np.resize(data, args.positions)
    Path(args.out).write_bytes(data.tobytes())
    print(f"{args.out}: {len(data):,} positions, {len(chunks):,} games")
    return 0


if __name__ == "__main__":
    sys.exit(main())
