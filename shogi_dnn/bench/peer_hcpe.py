"""The peer that `shogi-dnn bench convert --peer` measures `convert` against: dlshogi's way of turning CSA
records into training data (its csa_to_hcpe), on cshogi: cshogi's C++ CSA parser, `Board.push`, and
`Board.to_hcp` into a numpy record array of 38-byte positions (32-byte Huffman-coded position, eval,
16-bit move, result), one core, CSA files only, raw (uncompressed) output, no legality check of
its own (cshogi's parser trusts the record), no dedup. It counts the position before each move of a
game with a result, as dlshogi does.

    python -m shogi_dnn.bench.peer_hcpe OUT.hcpe FILE_OR_DIR...
    -> "N positions in S s: R positions/s (1 core)", its in-process rate (imports excluded)
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

HCPE = np.dtype([("hcp", np.uint8, 32), ("eval", np.int16), ("bestMove16", np.uint16),
                 ("gameResult", np.uint8), ("dummy", np.uint8)])
BLOCK = 1 << 20                         # rows buffered before a write


def csa_files(inputs: list[str]) -> list[pathlib.Path]:
    files: list[pathlib.Path] = []
    for name in inputs:
        path = pathlib.Path(name)
        files += sorted(path.rglob("*.csa")) if path.is_dir() else [path]
    return files


def convert(out: str, inputs: list[str]) -> tuple[int, float]:
    """Write the hcpe records of every game with a result; (positions, seconds)."""
    import cshogi
    import cshogi.CSA
    files = csa_files(inputs)
    start = time.perf_counter()
    rows = np.zeros(BLOCK, HCPE)
    n = total = 0
    board = cshogi.Board()
    results = (cshogi.BLACK_WIN, cshogi.WHITE_WIN, cshogi.DRAW)
    with open(out, "wb") as f:
        for path in files:
            for game in cshogi.CSA.Parser.parse_file(str(path)):
                if game.win not in results:
                    continue
                board.set_sfen(game.sfen)
                for move in game.moves:
                    if n == len(rows):
                        rows.tofile(f)
                        n = 0
                    board.to_hcp(rows["hcp"][n:n + 1])
                    rows["bestMove16"][n] = cshogi.move16(move)
                    rows["gameResult"][n] = game.win
                    board.push(move)
                    n += 1
                    total += 1
        rows[:n].tofile(f)
    return total, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    positions, seconds = convert(args[0], args[1:])
    print(f"{positions} positions in {seconds:.4f} s: "
          f"{positions / max(seconds, 1e-9):.0f} positions/s (1 core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
