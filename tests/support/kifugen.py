"""Random legal games as GameRecords and CSA files, for convert/inspect tests (no corpus needed)."""

from __future__ import annotations

import random
from pathlib import Path

from shogi_dnn.kifu.csa_writer import format_csa
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import ShogiPosition

HANDICAP_SFEN = "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"   # 2-piece handicap


def random_game(rng: random.Random, index: int, start_sfen: str = STANDARD_START_SFEN) -> GameRecord:
    """A random legal game: resigned (the side to move loses), a draw, or rated, chosen by `rng`."""
    position = ShogiPosition(start_sfen)
    moves: list[str] = []
    for _ in range(rng.randint(6, 70)):
        legal = sorted(position.legal_usi())
        if not legal:
            break
        moves.append(rng.choice(legal))
        position.push_usi(moves[-1])
    kind = rng.random()
    loser_is_black = position.turn == 0
    if position.is_checkmate():
        winner, ending = (Winner.WHITE if loser_is_black else Winner.BLACK), Ending.CHECKMATE
    elif kind < 0.15:
        winner, ending = Winner.DRAW, Ending.JISHOGI     # a random game never repeats: no 千日手 claim
    else:
        winner, ending = (Winner.WHITE if loser_is_black else Winner.BLACK), Ending.RESIGN
    ratings = (float(rng.randrange(1000, 3000, 100)), float(rng.randrange(1000, 3000, 100))) \
        if rng.random() < 0.7 else (None, None)
    return GameRecord(start_sfen, tuple(moves), winner, ending, SourceLine("generated", 1), "csa",
                      black=f"b{index}", white=f"w{index}", black_rating=ratings[0], white_rating=ratings[1])


def random_games(seed: int, count: int) -> list[GameRecord]:
    rng = random.Random(seed)
    return [random_game(rng, i, HANDICAP_SFEN if i % 7 == 3 else STANDARD_START_SFEN) for i in range(count)]


def write_csa(path: Path, games: list[GameRecord]) -> list[int]:
    """Write games as one multi-game CSA file (separated by '/'); returns each game's first line."""
    texts = [format_csa(g).rstrip("\n") for g in games]
    starts, line = [], 1
    for text in texts:
        starts.append(line)
        line += text.count("\n") + 2      # its lines plus the '/' separator
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n/\n".join(texts) + "\n", encoding="utf-8")
    return starts


def write_corpus(root: Path, seed: int = 1, files: int = 4, per_file: int = 6) -> list[GameRecord]:
    """`files` CSA files (some multi-game) of random games under root/ (with a sub-folder)."""
    games = random_games(seed, files * per_file)
    for i in range(files):
        folder = root / ("sub" if i % 2 else "")
        write_csa(folder / f"games-{i:02d}.csa", games[i * per_file:(i + 1) * per_file])
    return games


def random_moves(seed: int, max_plies: int = 80, start: str = STANDARD_START_SFEN) -> list[str]:
    """A random legal game from `start`: a walk over legal moves, stopping at mate or max_plies."""
    rng = random.Random(seed)
    position, moves = ShogiPosition(start), []
    for _ in range(max_plies):
        legal = sorted(position.legal_usi())
        if not legal:
            break
        move = rng.choice(legal)
        position.push_usi(move)
        moves.append(move)
    return moves
