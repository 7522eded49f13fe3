"""Matches between USI engines through ShogiArena (PyPI `shogiarena`, a USI tournament runner), and their
result.

What a match writes under its folder OUT:

  OUT/engines/<name>.sh      a one-executable wrapper per player (ShogiArena wants an engine path)
  OUT/engines/<name>.yaml    ShogiArena's engine file: name, engine_path, working_directory, options
  OUT/openings.sfen          the start positions: one `startpos moves ...` line each (random legal openings)
  OUT/tournament.yaml        ShogiArena's tournament file (JSON text, which YAML reads)
  OUT/arena/                 ShogiArena's run folder: game.db (SQLite), results/, logs
  OUT/arena.log              ShogiArena's console output
  OUT/games/NNNN.csa         every game as CSA V2.2 (csa_writer.format_csa), the arena's result in a final
                             comment line (`'arena result: BLACK_WIN`); an ending CSA cannot express (a win
                             adjudicated with the winner to move, a forfeit) is written %CHUDAN; after each
                             move a `T` line with the time the mover took as ShogiArena measured it (from
                             `go` sent to `bestmove` read), in seconds with milliseconds (`T0.213`, the
                             CSA V3.0 fraction)
  OUT/summary.json           the result table below, with the moves over the deadline per player

Games are read from OUT/arena/game.db: table `game` (game_name, game_result = rsshogi GameResult name,
black_player_id, white_player_id, initial_position_sfen), table `player` (id, player_name), table
`game_move` (game_id, ply, next_move = rsshogi 16-bit move, its MOVE_END code ending the list,
next_move_time_ms = the mover's time), ordered by id.

`over_deadline`: a player's moves, from the CSA `T` lines, that took longer than its fixed time per move.
Each opening is played twice, once with each player as Black. Elo = -400 log10(1/s - 1), s = (W + D/2) / N,
with a 95% interval from the trinomial normal approximation (Wilson's at s = 0 or 1); games ShogiArena
marks ERROR/INVALID/PAUSED are counted apart.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files
from shogi_dnn.kifu import csa_writer
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import new_position

Z95 = 1.959963984540054
ENGINES_DIR, GAMES_DIR, ARENA_DIR = "engines", "games", "arena"
OPENINGS_FILE, TOURNAMENT_FILE, ARENA_LOG, SUMMARY_JSON = "openings.sfen", "tournament.yaml", "arena.log", \
    "summary.json"
GAME_DB = "game.db"
MAX_PLIES = 320                       # a game this long is a draw (ShogiArena's adjudication)
NOT_PLAYED = ("ERROR", "INVALID", "PAUSED")
# rsshogi GameResult name -> (winner, ending) for the CSA record.
_RESULTS = {
    "BLACK_WIN": (Winner.BLACK, None), "WHITE_WIN": (Winner.WHITE, None),
    "BLACK_WIN_BY_DECLARATION": (Winner.BLACK, Ending.ENTERING_KING),
    "WHITE_WIN_BY_DECLARATION": (Winner.WHITE, Ending.ENTERING_KING),
    "BLACK_WIN_BY_TRY_RULE": (Winner.BLACK, Ending.ENTERING_KING),
    "WHITE_WIN_BY_TRY_RULE": (Winner.WHITE, Ending.ENTERING_KING),
    "BLACK_WIN_BY_TIMEOUT": (Winner.BLACK, Ending.TIME_UP),
    "WHITE_WIN_BY_TIMEOUT": (Winner.WHITE, Ending.TIME_UP),
    "BLACK_WIN_BY_ILLEGAL_MOVE": (Winner.BLACK, Ending.ILLEGAL_MOVE),
    "WHITE_WIN_BY_ILLEGAL_MOVE": (Winner.WHITE, Ending.ILLEGAL_MOVE),
    "BLACK_WIN_BY_FORFEIT": (Winner.BLACK, Ending.FORFEIT),
    "WHITE_WIN_BY_FORFEIT": (Winner.WHITE, Ending.FORFEIT),
    "DRAW_BY_REPETITION": (Winner.DRAW, Ending.SENNICHITE),
    "DRAW_BY_MAX_PLIES": (Winner.DRAW, Ending.MAX_MOVES),
    "DRAW_BY_IMPASSE": (Winner.DRAW, Ending.JISHOGI), "DRAW_BY_ADJUDICATION": (Winner.DRAW, Ending.DRAW),
}


@dataclasses.dataclass(frozen=True)
class Player:
    """One side of a match: a command line (argv) started by a wrapper script, its USI options, and its
    per-move limit in ShogiArena's time_control keys (node_limit, depth_limit, time_ms, byoyomi_ms, ...)."""

    name: str
    argv: tuple[str, ...]
    options: dict[str, Any]
    time_control: dict[str, int]


@dataclasses.dataclass(frozen=True)
class ArenaGame:
    """A game read back from game.db: result is rsshogi's GameResult name; moves in USI."""

    name: str
    black: str
    white: str
    start_sfen: str
    moves: tuple[str, ...]
    result: str
    times_ms: tuple[int | None, ...] = ()          # each move's time as the arena measured it


@dataclasses.dataclass(frozen=True)
class MatchResult:
    """Wins, draws and losses of `player` against `opponent`, games not played, Elo and its 95% interval."""

    player: str
    opponent: str
    wins: int
    draws: int
    losses: int
    not_played: int
    complete: bool = True          # False: stopped at the timeout, the games finished by then
    over_deadline: tuple[tuple[str, int, int, int], ...] = ()   # (player, limit ms, moves over, timed moves)

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        return (self.wins + self.draws / 2) / self.games if self.games else float("nan")

    def elo(self) -> tuple[float, float, float]:
        """(Elo, low, high) of the 95% interval (module docstring)."""
        return elo_interval(self.wins, self.draws, self.losses)

    def to_dict(self) -> dict[str, Any]:
        elo, low, high = self.elo()
        return {"player": self.player, "opponent": self.opponent, "games": self.games, "wins": self.wins,
                "draws": self.draws, "losses": self.losses, "not_played": self.not_played,
                "complete": self.complete,
                "over_deadline": {name: {"limit_ms": limit, "over": over, "moves": moves}
                                  for name, limit, over, moves in self.over_deadline},
                "score": self.score, "elo": elo, "elo_low": low, "elo_high": high}


def score_to_elo(score: float) -> float:
    """Elo difference of an expected score in [0, 1] (+-inf at the ends)."""
    if score <= 0:
        return -math.inf
    if score >= 1:
        return math.inf
    return -400.0 * math.log10(1.0 / score - 1.0)


def elo_interval(wins: int, draws: int, losses: int) -> tuple[float, float, float]:
    """(Elo, low, high): the point estimate and 95% interval of a W/D/L result (module docstring)."""
    n = wins + draws + losses
    if n == 0:
        return math.nan, math.nan, math.nan
    s = (wins + draws / 2) / n
    if 0 < s < 1:
        var = (wins * (1 - s) ** 2 + draws * (0.5 - s) ** 2 + losses * s ** 2) / n
        half = Z95 * math.sqrt(var / n)
        low, high = max(s - half, 0.0), min(s + half, 1.0)
    else:                                  # Wilson score interval: finite at the other end
        centre = (s + Z95 ** 2 / (2 * n)) / (1 + Z95 ** 2 / n)
        half = Z95 * math.sqrt(s * (1 - s) / n + Z95 ** 2 / (4 * n * n)) / (1 + Z95 ** 2 / n)
        low, high = (max(centre - half, 0.0), 1.0) if s == 1 else (0.0, min(centre + half, 1.0))
    return score_to_elo(s), score_to_elo(low), score_to_elo(high)


def random_openings(count: int, plies: int, seed: int) -> list[str]:
    """`count` distinct openings of `plies` random legal moves from the start position, as
    `startpos moves ...` lines; none ends the game (the position after them has a legal move)."""
    rng = random.Random(seed)
    lines: list[str] = []
    seen: set[str] = set()
    attempts = 0
    while len(lines) < count:
        attempts += 1
        if attempts > 100 * count:
            raise RunError(f"could not draw {count} distinct {plies}-ply openings")
        position = new_position(STANDARD_START_SFEN)
        moves = []
        for _ in range(plies):
            legal = sorted(position.legal_usi())
            moves.append(rng.choice(legal))
            position.push_usi(moves[-1])
        if not position.legal_usi() or position.sfen() in seen:
            continue
        seen.add(position.sfen())
        lines.append("startpos moves " + " ".join(moves) if moves else "startpos")
    return lines


def usi_command(model: Path | None, player: str = "network", extra: Sequence[str] = ()) -> tuple[str, ...]:
    """argv of `shogi-dnn usi` on this interpreter and this copy of the package (model None: the packaged
    network)."""
    source: tuple[str, ...] = () if model is None else \
        ("--model" if Path(model).is_file() else "--run-dir", str(Path(model).resolve()))
    return (sys.executable, "-m", "shogi_dnn", "usi", *source, "--player", player, *extra)


def fairy_stockfish() -> str:
    """Path of the Fairy-Stockfish binary (PATH or /usr/games). Raises RunError when absent."""
    found = shutil.which("fairy-stockfish") or shutil.which("fairy-stockfish", path="/usr/games")
    if not found:
        raise RunError("fairy-stockfish not found (Debian/Ubuntu: apt-get install fairy-stockfish)")
    return found


def shogiarena_command() -> list[str]:
    """How to start ShogiArena: its console script next to this interpreter, else on PATH."""
    beside = Path(sys.executable).with_name("shogiarena")
    found = str(beside) if beside.is_file() else shutil.which("shogiarena")
    if not found:
        raise RunError("shogiarena is not installed: pip install 'shogi-dnn[games]' (Python >= 3.11)")
    return [found]


def _write_text(path: Path, text: str, mode: int | None = None) -> None:
    run_files.write_atomic(path, text, mode=mode)


def write_player(out: Path, player: Player) -> Path:
    """The wrapper script and ShogiArena engine file of a player; returns the engine file."""
    folder = out / ENGINES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / f"{player.name}.sh"
    package_root = Path(__file__).resolve().parents[2]      # this copy of shogi_dnn, whatever is installed
    _write_text(script, "#!/bin/sh\n"
                        f"export PYTHONPATH={shlex.quote(str(package_root))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                        f"exec {shlex.join(player.argv)} \"$@\"\n", mode=0o755)
    engine = folder / f"{player.name}.yaml"
    _write_text(engine, json.dumps({"name": player.name, "engine_path": str(script.resolve()),
                                    "working_directory": str(folder.resolve()), "options": player.options},
                                   indent=2) + "\n")
    return engine


def tournament_config(name: str, engines: Sequence[tuple[Player, Path]], games: int, openings: Path,
                      parallel: int = 1, seed: int = 1) -> dict[str, Any]:
    """ShogiArena's tournament file: two players, `games` games (each opening with both colours)."""
    return {
        "experiment_name": name,
        "engines": [{"engine_path": str(path.resolve()), "name": p.name, "time_control": p.time_control}
                    for p, path in engines],
        "tournament": {"scheduler": "round_robin", "games_per_pair": games, "num_parallel": parallel,
                       "seed": seed},
        "rules": {"initial_positions": {"type": "file", "source": str(openings.resolve()),
                                        "flip_policy": "pair_both",
                                        "selection_policy": "without_replacement"},
                  "adjudication": {"sync_max_plies_with_engine": False, "max_plies": MAX_PLIES}},
        "dashboard": {"enabled": False},
        "output_dir": str(openings.resolve().parent),     # ShogiArena's own scratch: the match folder
    }


def run_match(out: Path, player: Player, opponent: Player, games: int, opening_plies: int = 4, seed: int = 1,
              parallel: int = 1, timeout: float | None = None) -> MatchResult:
    """Play `games` games (even: each opening with both colours) through ShogiArena; write the CSA records
    and summary.json under `out` (module docstring) and return the result of `player`. At `timeout` seconds
    ShogiArena and its engines are ended and the games finished by then are the result (complete=False).

    Raises:
        RunError: an odd game count, ShogiArena missing or failing, or no game finished.
    """
    if games < 2 or games % 2:
        raise RunError(f"--games {games}: must be even and at least 2 (each opening is played with both "
                       "colours)")
    out.mkdir(parents=True, exist_ok=True)
    arena_dir = out / ARENA_DIR
    if arena_dir.exists():
        raise RunError(f"{arena_dir}: already exists (a finished match); choose another --out")
    engines = [(p, write_player(out, p)) for p in (player, opponent)]
    openings = out / OPENINGS_FILE
    _write_text(openings, "\n".join(random_openings(games // 2, opening_plies, seed)) + "\n")
    config = out / TOURNAMENT_FILE
    _write_text(config, json.dumps(tournament_config(f"{player.name}-vs-{opponent.name}", engines, games,
                                                     openings, parallel, seed), indent=2) + "\n")
    command = [*shogiarena_command(), "run", "tournament", str(config.resolve()), "--run-dir",
               str(arena_dir.resolve())]
    with open(out / ARENA_LOG, "w", encoding="utf-8") as log:
        # Its own session, so that a timeout ends ShogiArena and the engines it started, nothing else.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=out,
                                   start_new_session=True)
        complete = True
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:          # keep the games finished so far
            os.killpg(process.pid, signal.SIGTERM)
            returncode, complete = process.wait(), False
    if not (arena_dir / GAME_DB).is_file() or (complete and returncode != 0):
        raise RunError(f"shogiarena exited with status {returncode} (see {out / ARENA_LOG})")
    played = read_games(arena_dir / GAME_DB)
    paths = write_csa(played, out / GAMES_DIR)
    limits = {p.name: p.time_control["fixed_time_ms"] for p in (player, opponent)
              if p.time_control.get("fixed_time_ms")}
    deadlines = tuple((name, limit, *over_deadline(paths, name, limit)) for name, limit in limits.items())
    result = dataclasses.replace(tally(played, player.name, opponent.name), complete=complete,
                                 over_deadline=deadlines)
    if not result.games:
        raise RunError(f"no game finished (see {out / ARENA_LOG} and {arena_dir / 'failures'})")
    run_files.write_json_atomic(out / SUMMARY_JSON, {**result.to_dict(), "time_control": {
        player.name: player.time_control, opponent.name: opponent.time_control},
        "opening_plies": opening_plies, "seed": seed})
    return result


def read_games(db: Path) -> list[ArenaGame]:
    """Every game in a ShogiArena game.db (table layout: module docstring), in the order played."""
    from rsshogi.core import Move  # ShogiArena's own dependency: its 16-bit move codes

    end = int(Move.MOVE_END)
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            names = dict(connection.execute("SELECT id, player_name FROM player"))
            rows = connection.execute("SELECT id, game_name, game_result, black_player_id, white_player_id, "
                                      "initial_position_sfen FROM game ORDER BY id").fetchall()
            moves: dict[int, list[int]] = {}
            times: dict[int, list[int | None]] = {}
            for game_id, code, ms in connection.execute("SELECT game_id, next_move, next_move_time_ms "
                                                        "FROM game_move ORDER BY id"):
                moves.setdefault(game_id, []).append(int(code))
                times.setdefault(game_id, []).append(None if ms is None else int(ms))
    except sqlite3.Error as exc:
        raise RunError(f"{db}: not a readable ShogiArena database ({exc})") from exc
    games = []
    for game_id, name, result, black, white, sfen in rows:
        codes = moves.get(game_id, [])
        codes = codes[:codes.index(end)] if end in codes else codes
        games.append(ArenaGame(name, names[black], names[white], sfen,
                               tuple(Move(c).to_usi() for c in codes), result,
                               tuple(times.get(game_id, [])[:len(codes)])))
    return games


def tally(games: Sequence[ArenaGame], player: str, opponent: str) -> MatchResult:
    """W/D/L of `player` over the games between it and `opponent`."""
    wins = draws = losses = not_played = 0
    for game in games:
        if {game.black, game.white} != {player, opponent}:
            continue
        winner = _RESULTS.get(game.result, (None, None))[0]
        if game.result in NOT_PLAYED or winner is None:
            not_played += 1
        elif winner is Winner.DRAW:
            draws += 1
        elif (winner is Winner.BLACK) == (game.black == player):
            wins += 1
        else:
            losses += 1
    return MatchResult(player, opponent, wins, draws, losses, not_played)


def game_record(game: ArenaGame) -> GameRecord:
    """A game as a GameRecord, the ending from the arena's result (a plain win: checkmate when the side to
    move has no legal move, else resignation)."""
    winner, ending = _RESULTS.get(game.result, (Winner.UNKNOWN, Ending.INTERRUPTED))
    if ending is None:
        position = new_position(game.start_sfen)
        for move in game.moves:
            position.push_usi(move)
        ending = Ending.CHECKMATE if not position.legal_usi() else Ending.RESIGN
    return GameRecord(start_sfen=game.start_sfen, moves=game.moves, winner=winner, ending=ending,
                      black=game.black, white=game.white, source=SourceLine(game.name, 0), format="csa",
                      event=game.name)


def write_csa(games: Sequence[ArenaGame], folder: Path) -> list[Path]:
    """Each game as folder/NNNN.csa (1-based, in the order played); returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, game in enumerate(games, start=1):
        record = game_record(game)
        try:
            text = csa_writer.format_csa(record)
        except ValueError:              # e.g. adjudicated after the loser's move: no CSA token says so
            text = csa_writer.format_csa(
                dataclasses.replace(record, winner=Winner.UNKNOWN, ending=Ending.INTERRUPTED))
        text = _with_times(text, game.times_ms) + f"'arena result: {game.result}\n"
        path = folder / f"{number:04d}.csa"
        _write_text(path, text)
        paths.append(path)
    return paths


_CSA_MOVE = re.compile(r"[+-]\d{4}[A-Z]{2}$")


def _with_times(text: str, times_ms: Sequence[int | None]) -> str:
    """CSA text with a `T` line after the k-th move line for each known times_ms[k]."""
    lines, k = [], 0
    for line in text.splitlines():
        lines.append(line)
        if _CSA_MOVE.match(line):
            ms = times_ms[k] if k < len(times_ms) else None
            if ms is not None:
                lines.append(f"T{ms / 1000:.3f}")
            k += 1
    return "\n".join(lines) + "\n"


def move_times(path: Path) -> list[tuple[str, float]]:
    """(the mover's name, seconds) of every timed move of a CSA record written by write_csa."""
    names = {"+": "", "-": ""}
    timed, mover = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line[:2] in ("N+", "N-"):
            names[line[1]] = line[2:]
        elif _CSA_MOVE.match(line):
            mover = names[line[0]]
        elif line.startswith("T") and mover is not None:
            timed.append((mover, float(line[1:])))
            mover = None
    return timed


def over_deadline(paths: Sequence[Path], player: str, limit_ms: int) -> tuple[int, int]:
    """(moves of `player` that took longer than limit_ms, its timed moves) over the CSA records."""
    times = [seconds for path in paths for name, seconds in move_times(path) if name == player]
    return sum(seconds * 1000 > limit_ms for seconds in times), len(times)
