#!/usr/bin/env python3
"""USI engine self-play corpus generator (Fairy-Stockfish): CSA V2.2 games with per-move evaluations.

Each game is fully determined by its seed:
  * rng = random.Random(seed); K = rng.randint(0, 10) opening plies are uniformly random legal
    moves (python-shogi move generator, moves sorted by USI string before choosing); they carry
    no evaluation;
  * N = rng.choice((3000, 6000, 12000)) is the node budget of *both* sides (`go nodes N`), so the
    two sides of a game play at the same strength;
  * a fresh Fairy-Stockfish process for each game (USI, Threads 1, Hash 16, Contempt 0, then
    `usinewgame`) plays both sides, so a fixed-node search replays to the same move and score
    (`verify` regenerates games and compares). One process for many games is not enough:
    `usinewgame` clears the hash and history tables, but some engine state survives it (seen:
    a game regenerated after other games than in the original run got other scores from ply 35
    on), so games would depend on the games played before them in the same process;
  * every engine move is checked with python-shogi before it is played.

Evaluations: after every engine move comes the comment line `'** <score>`, floodgate style: the
score of the search that chose the move, in centipawns from Black's (sente's) view (positive =
good for Black); a mate score (`score mate N`) is written as +100000 / -100000 (Black's view).
The engine reports scores from the side to move's view; they are negated for White's moves.

Endings (CSA V2.2 special moves):
  %TSUMI            the side to move is checkmated (written after the mating move)
  %TORYO            resignation of the side to move, by adjudication: the Black-view score of
                    the last 6 engine plies all had the same sign and |score| >= 3000, or the last
                    engine score was a mate score, and the side to move is the one losing (so
                    the winner plays its move first when it is on move); the side to move also
                    resigns when its own search reports being mated or the engine answers
                    `bestmove resign`; and (never seen) when it has no legal move without being in check
  %SENNICHITE       the same position (board, hands, side to move) for the 4th time (draw)
  %+ILLEGAL_ACTION  the same, but every Black move since the first occurrence gave check:
  %-ILLEGAL_ACTION  perpetual check loses (oute-sennichite), so Black (+) / White (-) loses;
                    python-shogi's and cshogi's CSA readers read these as a loss for that side.
                    A comment line names the perpetual check.
  %KACHI            the engine declared an entering-king win (`bestmove win`) and cshogi agrees
  %HIKIWAKE         256 plies reached (V2.2 has no max-moves marker; %MAX_MOVES only exists
                    from CSA V3.0), followed by the comment "'max_moves:256 ..."
Games where the engine misbehaves (illegal move, no answer within --move-timeout seconds, crash,
a `bestmove win` cshogi does not confirm) are not written; their seeds go to ABORTED.tsv in the
state folder. Fairy-Stockfish 11.1 (Debian) differs from python-shogi's and cshogi's rules in one
known way: its move generator allows a pawn drop that gives mate (uchifuzume); such a move is
illegal, so a game where the engine plays it is aborted.

Output layout (split by file, deterministic: file n goes to the holdout folder iff n % 4 == 3):
  <shared>/fairy-NNNN.csa   100 games per file, separated by lines "/"; "V2.2" only on the
                            first line of the file
  <shared>/SUMMARY.tsv      one row per game: seed, file, index_in_file, nodes, random_plies,
                            plies, winner, ending
  <shared>/README.md        written by `report`
and the same under <holdout>.

Usage (paths relative to the repository root):
  nice -n 19 python scripts/usi_selfplay.py play --shared games/fairy --holdout games/fairy-holdout \
      --state STATE_DIR --seed-base 2000000 --max-minutes 75
  python scripts/usi_selfplay.py report --shared games/fairy --holdout games/fairy-holdout --state STATE_DIR
  python scripts/usi_selfplay.py verify --shared games/fairy --holdout games/fairy-holdout --state STATE_DIR --sample 5
A killed `play` resumes where it stopped when started again with the same folders. A second
`play` may run beside the first on a disjoint seed range with its own --state and --first-file
(its files are numbered from there; each process only resumes its own files).
"""

from __future__ import annotations

import argparse
import atexit
import collections
import datetime as dt
import os
import random
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import shogi

ENGINE_NAME = "fairy-stockfish"
ENGINE_DIRS = ("/usr/games",)          # Debian installs game engines outside the default PATH
ENGINE_OPTIONS = (("Threads", "1"), ("Hash", "16"), ("Contempt", "0"))
NODE_CHOICES = (3000, 6000, 12000)
MAX_PLIES = 256
MAX_RANDOM_PLIES = 10
GAMES_PER_FILE = 100
LANE_FILES = 500                      # a `play` process owns files first_file .. first_file + 499
MATE_SCORE = 100_000
RESIGN_SCORE = 3000
RESIGN_PLIES = 6
START_TIME_BASE = dt.datetime(2000, 1, 1)   # $START_TIME = this + seed seconds (deterministic)
FILE_PREFIX = "fairy-"

# ---------------------------------------------------------------------------
# notation helpers

CSA_PIECE = {
    shogi.PAWN: "FU", shogi.LANCE: "KY", shogi.KNIGHT: "KE", shogi.SILVER: "GI",
    shogi.GOLD: "KI", shogi.BISHOP: "KA", shogi.ROOK: "HI", shogi.KING: "OU",
    shogi.PROM_PAWN: "TO", shogi.PROM_LANCE: "NY", shogi.PROM_KNIGHT: "NK",
    shogi.PROM_SILVER: "NG", shogi.PROM_BISHOP: "UM", shogi.PROM_ROOK: "RY",
}


def square_fr(square: int) -> tuple[int, int]:
    """python-shogi square index -> (file 1..9, rank 1..9)."""
    return 9 - square % 9, square // 9 + 1


def csa_move(board: shogi.Board, move: shogi.Move) -> str:
    """CSA move token for `move` played from `board` (before pushing it)."""
    sign = "+" if board.turn == shogi.BLACK else "-"
    tf, tr = square_fr(move.to_square)
    if move.drop_piece_type:
        return f"{sign}00{tf}{tr}{CSA_PIECE[move.drop_piece_type]}"
    ff, fr = square_fr(move.from_square)
    ptype = board.piece_type_at(move.from_square)
    if move.promotion:
        ptype = shogi.PIECE_PROMOTED[ptype]
    return f"{sign}{ff}{fr}{tf}{tr}{CSA_PIECE[ptype]}"


def start_time(seed: int) -> str:
    return (START_TIME_BASE + dt.timedelta(seconds=seed)).strftime("%Y/%m/%d %H:%M:%S")


# ---------------------------------------------------------------------------
# engine


class EngineError(RuntimeError):
    """The engine hung, died or answered something we cannot use."""


@dataclass
class SearchResult:
    bestmove: str
    score: int | None        # side to move's view: centipawns, or +-MATE_SCORE for a mate score
    mate: int | None         # N of `score mate N` (side to move's view), else None
    depth: int
    nodes: int
    nps: int


INFO_SCORE_RE = re.compile(r"\bscore (cp|mate) (-?\d+)")
INFO_INT_RE = {k: re.compile(rf"\b{k} (\d+)") for k in ("depth", "nodes", "nps")}


def find_engine(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path=os.pathsep.join(ENGINE_DIRS))
    if path is None:
        raise SystemExit(f"engine {name!r} not found on PATH or in {', '.join(ENGINE_DIRS)} "
                         "(Debian: apt-get install fairy-stockfish)")
    return path


class Engine:
    """One USI engine process; the caller always waits for exactly one answer."""

    live: set[Engine] = set()

    def __init__(self, path: str, move_timeout: float):
        self.move_timeout = move_timeout
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, bufsize=0)
        Engine.live.add(self)
        self.buf = b""
        self.id_name = ""
        try:
            self.send("usi")
            for line in self.lines_until("usiok", 10.0):
                if line.startswith("id name "):
                    self.id_name = line[len("id name "):]
            for name, value in ENGINE_OPTIONS:
                self.send(f"setoption name {name} value {value}")
            self.sync()
        except EngineError:
            self.close()
            raise

    def send(self, *lines: str) -> None:
        try:
            self.proc.stdin.write("".join(line + "\n" for line in lines).encode())
        except (BrokenPipeError, OSError) as exc:
            raise EngineError(f"write failed: {exc}") from exc

    def readline(self, deadline: float) -> str:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineError(f"no answer within the time limit; tail={self.buf[-200:]!r}")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    raise EngineError(f"engine exited (rc={self.proc.poll()}); tail={self.buf[-200:]!r}")
                self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("latin-1").rstrip("\r")

    def lines_until(self, first_word: str, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        lines = []
        while True:
            line = self.readline(deadline)
            lines.append(line)
            if line.split(" ", 1)[0] == first_word:
                return lines

    def sync(self) -> None:
        self.send("isready")
        self.lines_until("readyok", self.move_timeout)

    def new_game(self) -> None:
        """`usinewgame` clears hash and history tables: searches replay deterministically."""
        self.send("usinewgame")
        self.sync()

    def search(self, moves: list[str], nodes: int) -> SearchResult:
        self.send("position startpos" + (" moves " + " ".join(moves) if moves else ""), f"go nodes {nodes}")
        lines = self.lines_until("bestmove", self.move_timeout)
        parts = lines[-1].split()
        if len(parts) < 2:
            raise EngineError(f"bad bestmove line {lines[-1]!r}")
        score = mate = None
        info = {"depth": 0, "nodes": 0, "nps": 0}
        for line in lines[:-1]:
            if not line.startswith("info ") or " string " in line:
                continue
            m = INFO_SCORE_RE.search(line)
            if m is None or " multipv " in line and " multipv 1 " not in line:
                continue
            if m.group(1) == "cp":
                score, mate = int(m.group(2)), None
            else:
                mate = int(m.group(2))
                score = MATE_SCORE if mate > 0 else -MATE_SCORE
            for k, pat in INFO_INT_RE.items():
                mm = pat.search(line)
                info[k] = int(mm.group(1)) if mm else 0
        return SearchResult(parts[1], score, mate, info["depth"], info["nodes"], info["nps"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.kill()          # by PID, our own child only
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except Exception:
                pass
        Engine.live.discard(self)


def kill_live_engines() -> None:
    for eng in list(Engine.live):
        try:
            eng.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# one game


@dataclass
class Game:
    seed: int
    random_plies: int
    nodes: int
    moves: list[str] = field(default_factory=list)          # USI
    scores: list[int | None] = field(default_factory=list)  # Black's view, None for random plies
    ending: str = ""          # tsumi | toryo | sennichite | oute_sennichite | max_moves | kachi | no_legal_moves
    winner: str = ""          # b | w | -   ("-" = draw)
    notes: list[str] = field(default_factory=list)
    perpetual_checker: str = ""   # b | w for oute_sennichite
    seconds: float = 0.0
    nps: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    engine_id: str = ""


def resign_loser(scores: list[int | None]) -> tuple[str, str] | None:
    """('b'|'w', reason) if the recorded scores say that side has lost, else None."""
    if not scores or scores[-1] is None:
        return None
    last = scores[-1]
    if abs(last) >= MATE_SCORE:
        return ("w" if last > 0 else "b"), "mate score"
    tail = scores[-RESIGN_PLIES:]
    if len(tail) == RESIGN_PLIES and all(s is not None and abs(s) >= RESIGN_SCORE for s in tail):
        if all(s > 0 for s in tail):
            return "w", f"score >= +{RESIGN_SCORE} (Black's view) for {RESIGN_PLIES} plies"
        if all(s < 0 for s in tail):
            return "b", f"score <= -{RESIGN_SCORE} (Black's view) for {RESIGN_PLIES} plies"
    return None


def color_name(c: str) -> str:
    return "black" if c == "b" else "white"


def play_game(seed: int, engine_path: str, move_timeout: float) -> Game:
    """Play the game of `seed` in a fresh engine process (raises EngineError)."""
    rng = random.Random(seed)
    k = rng.randint(0, MAX_RANDOM_PLIES)
    nodes = rng.choice(NODE_CHOICES)
    game = Game(seed=seed, random_plies=k, nodes=nodes)
    t0 = time.monotonic()
    board = shogi.Board()
    history = [board.zobrist_hash()]
    checks: list[bool] = []            # checks[i]: move i gave check
    engine = Engine(engine_path, move_timeout)
    try:
        game.engine_id = engine.id_name
        engine.new_game()
        for _ in range(k):
            if finished(game, board, history, checks):
                return game
            candidates = sorted(board.legal_moves, key=lambda m: m.usi())
            push(board, candidates[rng.randrange(len(candidates))], None, game, history, checks)
        while not finished(game, board, history, checks):
            mover = "b" if board.turn == shogi.BLACK else "w"
            verdict = resign_loser(game.scores)
            if verdict and verdict[0] == mover:
                resign(game, mover, f"{color_name(mover)} resigns: {verdict[1]}")
                return game
            res = engine.search(game.moves, nodes)
            if res.bestmove in ("resign", "(none)"):
                resign(game, mover, f"{color_name(mover)} resigns: engine answered bestmove {res.bestmove}")
                return game
            if res.bestmove == "win":
                declare_win(game, board, mover)
                return game
            if res.score is None:
                raise EngineError(f"no score before bestmove {res.bestmove} at ply {len(board.move_stack) + 1}")
            if res.mate is not None and res.mate <= 0:
                resign(game, mover, f"{color_name(mover)} resigns: its search finds mate against it "
                                    f"(mate {res.mate})")
                return game
            try:
                move = shogi.Move.from_usi(res.bestmove)
            except ValueError as exc:
                raise EngineError(f"unparsable engine move {res.bestmove!r}") from exc
            if move not in board.legal_moves:
                raise EngineError(f"illegal engine move {res.bestmove} at ply {len(board.move_stack) + 1} "
                                  f"in {board.sfen()}")
            black_view = res.score if mover == "b" else -res.score
            game.nps.append(res.nps)
            game.depths.append(res.depth)
            push(board, move, black_view, game, history, checks)
        return game
    finally:
        engine.close()
        game.seconds = time.monotonic() - t0


def push(board: shogi.Board, move: shogi.Move, score: int | None, game: Game,
         history: list[int], checks: list[bool]) -> None:
    board.push(move)
    game.moves.append(move.usi())
    game.scores.append(score)
    history.append(board.zobrist_hash())
    checks.append(board.is_check())


def resign(game: Game, loser: str, note: str) -> None:
    game.ending, game.winner = "toryo", ("w" if loser == "b" else "b")
    game.notes.append(note)


def declare_win(game: Game, board: shogi.Board, mover: str) -> None:
    """`bestmove win`: an entering-king declaration; kept only when cshogi confirms it."""
    import cshogi

    cb = cshogi.Board(board.sfen())
    if not cb.is_nyugyoku():
        raise EngineError(f"engine declared a win (bestmove win) cshogi does not confirm in {board.sfen()}")
    game.ending, game.winner = "kachi", mover
    game.notes.append(f"{color_name(mover)} declares an entering-king win (bestmove win)")


def perpetual_checker(history: list[int], checks: list[bool]) -> str | None:
    """'b' or 'w' if every move of that side since the first occurrence of the
    repeated (current) position gave check, else None."""
    first = history.index(history[-1])
    by_side = {"b": True, "w": False}
    for side, parity in (("b", 0), ("w", 1)):
        mine = [checks[i] for i in range(first, len(checks)) if i % 2 == parity]
        by_side[side] = bool(mine) and all(mine)
    if by_side["b"]:
        return "b"
    if by_side["w"]:
        return "w"
    return None


def finished(game: Game, board: shogi.Board, history: list[int], checks: list[bool]) -> bool:
    """Set game.ending/winner if the game is over in `board`."""
    if game.ending:
        return True
    mover_won = "w" if board.turn == shogi.BLACK else "b"   # winner if side to move lost
    if not any(True for _ in board.generate_legal_moves()):
        if board.is_check():
            game.ending, game.winner = "tsumi", mover_won
        else:
            game.ending, game.winner = "no_legal_moves", mover_won
            game.notes.append("side to move has no legal move (not in check)")
        return True
    if board.is_fourfold_repetition():
        checker = perpetual_checker(history, checks)
        if checker:
            game.ending, game.winner = "oute_sennichite", ("w" if checker == "b" else "b")
            game.perpetual_checker = checker
            game.notes.append(f"oute_sennichite: perpetual check by {color_name(checker)}, "
                              f"{color_name(checker)} loses")
        else:
            game.ending, game.winner = "sennichite", "-"
        return True
    if len(board.move_stack) >= MAX_PLIES:
        game.ending, game.winner = "max_moves", "-"
        return True
    return False


# ---------------------------------------------------------------------------
# writers

CSA_END = {"tsumi": "%TSUMI", "toryo": "%TORYO", "no_legal_moves": "%TORYO",
           "sennichite": "%SENNICHITE", "max_moves": "%HIKIWAKE", "kachi": "%KACHI"}


def special_move(game: Game) -> str:
    if game.ending == "oute_sennichite":
        return "%+ILLEGAL_ACTION" if game.perpetual_checker == "b" else "%-ILLEGAL_ACTION"
    return CSA_END[game.ending]


def player_name(nodes: int) -> str:
    return f"FairyStockfish-n{nodes}"


def game_to_csa(game: Game) -> str:
    name = player_name(game.nodes)
    options = ", ".join(f"{k} {v}" for k, v in ENGINE_OPTIONS)
    lines = [
        f"N+{name}",
        f"N-{name}",
        "$EVENT:fairy-stockfish-selfplay",
        f"$START_TIME:{start_time(game.seed)}",
        f"'random_plies:{game.random_plies} seed:{game.seed}",
        f"'engine:{game.engine_id} (USI) go nodes {game.nodes} both sides; {options}",
        "PI",
        "+",
    ]
    board = shogi.Board()
    for usi, score in zip(game.moves, game.scores):
        move = shogi.Move.from_usi(usi)
        lines.append(csa_move(board, move))
        if score is not None:
            lines.append(f"'** {score}")
        board.push(move)
    lines.append(special_move(game))
    if game.ending == "max_moves":
        lines.append(f"'max_moves:{MAX_PLIES} (draw by move limit)")
    for note in game.notes:
        lines.append(f"'{note}")
    return "\n".join(lines) + "\n"


SUMMARY_HEADER = ["seed", "file", "index_in_file", "nodes", "random_plies", "plies", "winner", "ending"]
GAMES_HEADER = ["seed", "file", "index_in_file", "seconds", "engine_plies", "mean_nps", "mean_depth", "notes"]


# ---------------------------------------------------------------------------
# play loop


def file_name(n: int) -> str:
    return f"{FILE_PREFIX}{n:04d}.csa"


def file_number(name: str) -> int:
    return int(name[len(FILE_PREFIX):-len(".csa")])


def split_dir(n: int, shared: Path, holdout: Path) -> Path:
    return holdout if n % 4 == 3 else shared


def read_summary(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = path.read_text().splitlines()
    header = rows[0].split("\t")
    return [dict(zip(header, r.split("\t"))) for r in rows[1:] if r]


def in_lane(name: str, first_file: int) -> bool:
    return first_file <= file_number(name) < first_file + LANE_FILES


def resume_point(shared: Path, holdout: Path, state: Path, first_file: int) -> tuple[int, int]:
    """(games already written in this lane, next seed); repairs a torn last file."""
    rows = [r for d in (shared, holdout) for r in read_summary(d / "SUMMARY.tsv")
            if in_lane(r["file"], first_file)]
    aborted = read_summary(state / "ABORTED.tsv")
    seeds = [int(r["seed"]) for r in rows] + [int(r["seed"]) for r in aborted]
    # make every CSA file of this lane hold exactly the games its SUMMARY rows describe
    per_file = collections.Counter(r["file"] for r in rows)
    for d in (shared, holdout):
        for path in sorted(d.glob(f"{FILE_PREFIX}*.csa")):
            if not in_lane(path.name, first_file):
                continue
            chunks = [c for _, c in iter_csa_games(path) if c.strip()]
            keep = per_file.get(path.name, 0)
            if len(chunks) != keep:
                print(f"repair {path.name}: {len(chunks)} games on disk, {keep} in SUMMARY", file=sys.stderr)
                if keep == 0:
                    path.unlink()
                else:
                    path.write_text("V2.2\n" + "/\n".join(chunks[:keep]))
    return len(rows), (max(seeds) + 1 if seeds else -1)


def append_tsv(path: Path, header: list[str], row: list) -> None:
    new = not path.exists()
    with path.open("a") as f:
        if new:
            f.write("\t".join(header) + "\n")
        f.write("\t".join(str(x) for x in row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_game(game: Game, written: int, first_file: int, shared: Path, holdout: Path,
               state: Path) -> None:
    n, idx = divmod(written, GAMES_PER_FILE)
    n += first_file
    out_dir = split_dir(n, shared, holdout)
    csa_path = out_dir / file_name(n)
    with csa_path.open("a") as f:
        f.write(("V2.2\n" if idx == 0 else "/\n") + game_to_csa(game))
        f.flush()
        os.fsync(f.fileno())
    append_tsv(out_dir / "SUMMARY.tsv", SUMMARY_HEADER,
               [game.seed, csa_path.name, idx, game.nodes, game.random_plies, len(game.moves),
                game.winner, game.ending])
    nps = f"{statistics.fmean(game.nps):.0f}" if game.nps else ""
    depth = f"{statistics.fmean(game.depths):.2f}" if game.depths else ""
    append_tsv(state / "GAMES.tsv", GAMES_HEADER,
               [game.seed, csa_path.name, idx, f"{game.seconds:.2f}", len(game.nps), nps, depth,
                " | ".join(game.notes)])


def cmd_play(args) -> int:
    shared, holdout, state = Path(args.shared), Path(args.holdout), Path(args.state)
    for d in (shared, holdout, state):
        d.mkdir(parents=True, exist_ok=True)
    engine_path = find_engine(args.engine)
    written, next_seed = resume_point(shared, holdout, state, args.first_file)
    seed = args.seed_base if next_seed < 0 else max(next_seed, args.seed_base)
    atexit.register(kill_live_engines)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(1))
    log = (state / "play.log").open("a")
    t_start = time.monotonic()
    games_this_run = 0
    print(f"{dt.datetime.now():%Y-%m-%d %H:%M:%S} start: {written} games already, seed {seed}, "
          f"first file {args.first_file}", file=log, flush=True)
    while (written < args.max_games and (time.monotonic() - t_start) < args.max_minutes * 60
           and (args.seed_end is None or seed < args.seed_end)):
        try:
            game = play_game(seed, engine_path, args.move_timeout)
        except EngineError as exc:
            append_tsv(state / "ABORTED.tsv", ["seed", "reason"], [seed, str(exc).replace("\t", " ")[:300]])
            print(f"seed {seed}: aborted: {exc}", file=log, flush=True)
            seed += 1
            continue
        write_game(game, written, args.first_file, shared, holdout, state)
        written += 1
        games_this_run += 1
        seed += 1
        if games_this_run % 10 == 0:
            mins = (time.monotonic() - t_start) / 60
            print(f"{dt.datetime.now():%H:%M:%S} games={written} this_run={games_this_run} "
                  f"rate={games_this_run / mins:.2f}/min last={game.ending}/{len(game.moves)}",
                  file=log, flush=True)
        if args.stop_at_file_boundary and written % GAMES_PER_FILE == 0 and \
                (time.monotonic() - t_start) >= args.stop_at_file_boundary * 60:
            break
    mins = (time.monotonic() - t_start) / 60
    print(f"{dt.datetime.now():%Y-%m-%d %H:%M:%S} done: {written} games total in this lane, "
          f"{games_this_run} in {mins:.1f} min", file=log, flush=True)
    return 0


# ---------------------------------------------------------------------------
# reading our own records


def iter_csa_games(path: Path):
    text = path.read_text()
    if not text.startswith("V2.2\n"):
        raise ValueError(f"{path.name}: does not start with V2.2")
    yield from enumerate(text[len("V2.2\n"):].split("/\n"))


def parse_our_csa(chunk: str) -> tuple[list[str], list[int | None], str | None]:
    """Moves as CSA tokens, the score after each (None: no '** line) and the special move."""
    moves, scores, special = [], [], None
    for line in chunk.splitlines():
        if line[:1] in "+-" and len(line) == 7:
            moves.append(line)
            scores.append(None)
        elif line.startswith("'** ") and moves and special is None:
            scores[-1] = int(line[4:])
        elif line.startswith("%"):
            special = line
    return moves, scores, special


def replay_python_shogi(moves_csa: list[str]) -> shogi.Board:
    board = shogi.Board()
    for tok in moves_csa:
        ff, fr, tf, tr, piece = int(tok[1]), int(tok[2]), int(tok[3]), int(tok[4]), tok[5:7]
        to = (tr - 1) * 9 + (9 - tf)
        if ff == 0:
            ptype = next(p for p, s in CSA_PIECE.items() if s == piece)
            move = shogi.Move(None, to, drop_piece_type=ptype)
        else:
            frm = (fr - 1) * 9 + (9 - ff)
            before = board.piece_type_at(frm)
            move = shogi.Move(frm, to, promotion=CSA_PIECE[before] != piece)
        if move not in board.legal_moves:
            raise ValueError(f"illegal {tok} at ply {len(board.move_stack) + 1}")
        board.push(move)
    return board


# ---------------------------------------------------------------------------
# report / checks


def check_game(where: str, chunk: str, cs, r: dict, extra: dict) -> list[str]:
    """Replay one game with python-shogi and cshogi, compare with SUMMARY; fill extra[seed]."""
    import cshogi

    problems = []
    moves, scores, special = parse_our_csa(chunk)
    try:
        board = replay_python_shogi(moves)
    except ValueError as exc:
        return [f"{where}: python-shogi: {exc}"]
    extra[r["seed"]] = {"scores": scores,
                        "notes": [line[1:] for line in chunk.splitlines()
                                  if line.startswith("'")
                                  and not line.startswith(("'** ", "'random_plies", "'engine"))]}
    k = int(r["random_plies"])
    if any(s is not None for s in scores[:k]) or any(s is None for s in scores[k:]):
        problems.append(f"{where}: evaluations missing after the random plies or present within them")
    cb = cshogi.Board()
    for ply, mv in enumerate(cs.moves, 1):
        if not cb.is_legal(mv):
            problems.append(f"{where}: cshogi illegal at ply {ply}")
            break
        cb.push(mv)
    if [cshogi.move_to_usi(m) for m in cs.moves] != [m.usi() for m in board.move_stack] or cs.endgame != special:
        problems.append(f"{where}: cshogi moves/endgame {len(cs.moves)}/{cs.endgame} vs {len(moves)}/{special}")
    if list(cs.scores) != [0 if s is None else s for s in scores]:
        problems.append(f"{where}: cshogi scores differ from the '** lines")
    # winner as the readers see it; %TSUMI reads as a draw in both (the mating side won)
    cs_win = {cshogi.BLACK_WIN: "b", cshogi.WHITE_WIN: "w", cshogi.DRAW: "-"}[cs.win]
    expect = "-" if r["ending"] == "tsumi" else r["winner"]
    if cs_win != expect:
        problems.append(f"{where}: cshogi result {cs_win} vs SUMMARY {r['winner']} ({r['ending']})")
    if special != (CSA_END.get(r["ending"]) or ("%+ILLEGAL_ACTION" if r["winner"] == "w" else "%-ILLEGAL_ACTION")):
        problems.append(f"{where}: special move {special} vs ending {r['ending']}")
    if int(r["plies"]) != len(moves):
        problems.append(f"{where}: plies mismatch")
    if r["ending"] == "tsumi" and not (board.is_checkmate() and cb.is_game_over() and cb.is_check()):
        problems.append(f"{where}: %TSUMI but not checkmate")
    if r["ending"] == "tsumi" and r["winner"] != ("w" if board.turn == shogi.BLACK else "b"):
        problems.append(f"{where}: %TSUMI winner is not the side that moved last")
    if r["ending"] in ("sennichite", "oute_sennichite") and not board.is_fourfold_repetition():
        problems.append(f"{where}: repetition ending but python-shogi sees no 4-fold repetition")
    if r["ending"] == "max_moves" and len(moves) != MAX_PLIES:
        problems.append(f"{where}: max_moves but {len(moves)} plies")
    if r["ending"] == "toryo":
        loser = "b" if board.turn == shogi.BLACK else "w"
        if r["winner"] == loser:
            problems.append(f"{where}: %TORYO but the winner is the side to move")
    if r["ending"] not in ("tsumi", "no_legal_moves") and (cb.is_game_over() or board.is_checkmate()):
        problems.append(f"{where}: {r['ending']} but the final position has no legal move")
    return problems


def eval_accuracy(rows: list[dict], extra: dict, max_ply: int | None = None) -> tuple[int, int]:
    """(hits, total): the sign of each evaluation, seen from the side that was to move in the
    position it scores, predicting that side's result. Draws and zero evaluations excluded;
    `max_ply`: only positions with fewer than that many moves played before them."""
    hit = tot = 0
    for r in rows:
        if r["winner"] == "-":
            continue
        for i, s in enumerate(extra.get(r["seed"], {}).get("scores", [])):
            if s is None or s == 0 or (max_ply is not None and i >= max_ply):
                continue
            mover = "b" if i % 2 == 0 else "w"          # move i (0-based) is Black's iff i is even
            mine = s if mover == "b" else -s
            tot += 1
            hit += (mine > 0) == (r["winner"] == mover)
    return hit, tot


def stats(rows: list[dict], extra: dict) -> dict:
    s = {"games": len(rows)}
    s["winner"] = collections.Counter(r["winner"] for r in rows)
    s["ending"] = collections.Counter(r["ending"] for r in rows)
    s["ending_winner"] = collections.Counter((r["ending"], r["winner"]) for r in rows)
    plies = sorted(int(r["plies"]) for r in rows)
    s["plies"] = plies
    s["positions"] = sum(plies)
    s["evals"] = sum(1 for r in rows for x in extra.get(r["seed"], {}).get("scores", []) if x is not None)
    s["by_nodes"] = {}
    for n in NODE_CHOICES:
        sub = [r for r in rows if int(r["nodes"]) == n]
        s["by_nodes"][n] = (len(sub), sum(r["winner"] == "b" for r in sub), sum(r["winner"] == "w" for r in sub),
                            statistics.fmean(int(r["plies"]) for r in sub) if sub else 0.0)
    s["acc_all"] = eval_accuracy(rows, extra)
    s["acc_40"] = eval_accuracy(rows, extra, 40)
    s["notes"] = collections.Counter(re.sub(r"[0-9][0-9a-zA-Z/+*-]*", "#", n)
                                     for r in rows for n in extra.get(r["seed"], {}).get("notes", []))
    return s


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / max(1, b):.1%})"


def stats_text(rows: list[dict], extra: dict) -> str:
    s = stats(rows, extra)
    g = max(1, s["games"])
    plies = s["plies"] or [0]
    lines = [f"games: {s['games']}, positions (plies): {s['positions']}, of which with an evaluation: {s['evals']}"]
    lines.append("result: black wins {b} ({bp:.1%}), white wins {w} ({wp:.1%}), draws {d} ({dp:.1%})".format(
        b=s["winner"]["b"], w=s["winner"]["w"], d=s["winner"]["-"],
        bp=s["winner"]["b"] / g, wp=s["winner"]["w"] / g, dp=s["winner"]["-"] / g))
    lines.append("ending: " + ", ".join(f"{k} {v} ({v / g:.1%})" for k, v in s["ending"].most_common()))
    lines.append("ending/winner: " + ", ".join(f"{k[0]}/{k[1]} {v}" for k, v in sorted(s["ending_winner"].items())))
    lines.append(f"plies: mean {statistics.fmean(plies):.1f}, median {plies[len(plies) // 2]}, "
                 f"min {plies[0]}, max {plies[-1]}")
    lines.append("by nodes: " + "; ".join(f"n{n}: {c} games, black {b} / white {w}, mean plies {p:.1f}"
                                          for n, (c, b, w, p) in s["by_nodes"].items()))
    lines.append(f"eval sign (side to move's view) -> winner, decisive games, eval != 0: "
                 f"all plies {pct(*s['acc_all'])}, plies < 40 {pct(*s['acc_40'])}")
    if s["notes"]:
        lines.append("comments in records: " + "; ".join(f"{k} x{v}" for k, v in s["notes"].most_common()))
    return "\n".join(lines)


def aborted_text(aborted: list[dict]) -> str:
    if not aborted:
        return "aborted seeds: none"
    kinds = collections.Counter(re.sub(r"[0-9][0-9a-zA-Z/+*-]*", "#", a["reason"].split(" in ")[0])[:60]
                                for a in aborted)
    return (f"aborted seeds: {len(aborted)} ({', '.join(a['seed'] for a in aborted[:20])}"
            f"{' ...' if len(aborted) > 20 else ''}); reasons: "
            + "; ".join(f"{k} x{v}" for k, v in kinds.most_common()))


def speed_text(states: list[Path]) -> str:
    rows = [r for st in states for r in read_summary(st / "GAMES.tsv")]
    if not rows:
        return ""
    secs = [float(r["seconds"]) for r in rows]
    nps = [float(r["mean_nps"]) for r in rows if r["mean_nps"]]
    runs = [line.split(" done: ", 1)[1] for st in states if (st / "play.log").exists()
            for line in (st / "play.log").read_text().splitlines() if " done: " in line]
    return (f"{statistics.fmean(secs):.2f} s per game on average (nice 19, on a shared 2-core machine "
            f"busy with other jobs); engine-reported speed {statistics.median(nps) / 1000:.0f}k nodes/s "
            f"(median of per-game means)." + (f" Runs: {'; '.join(runs)}." if runs else ""))


def lanes_text(rows: list[dict]) -> str:
    """Seed and file ranges of each `play` process (file numbers first_file .. first_file + 499)."""
    lanes = collections.defaultdict(list)
    for r in rows:
        lanes[file_number(r["file"]) // LANE_FILES].append(r)
    parts = []
    for _, lane in sorted(lanes.items()):
        seeds = sorted(int(r["seed"]) for r in lane)
        files = sorted({file_number(r["file"]) for r in lane})
        parts.append(f"seeds {seeds[0]}..{seeds[-1]} -> files {file_name(files[0])}..{file_name(files[-1])} "
                     f"({len(lane)} games)")
    return "; ".join(parts)


def write_readme(d: Path, rows, all_rows, extra, aborted, args, problems, speed, engine_id) -> None:
    s = stats(rows, extra)
    files = sorted(p.name for p in d.glob(f"{FILE_PREFIX}*.csa"))
    seeds = sorted(int(r["seed"]) for r in rows)
    is_holdout = d.resolve() == Path(args.holdout).resolve()
    part = (f"holdout: files {FILE_PREFIX}NNNN.csa with NNNN % 4 == 3" if is_holdout
            else f"shared: files {FILE_PREFIX}NNNN.csa with NNNN % 4 != 3")
    other = "holdout" if not is_holdout else "shared"
    n_all = len(all_rows)
    options = ", ".join(f"`{k} {v}`" for k, v in ENGINE_OPTIONS)
    n_kachi = sum(r["ending"] == "kachi" for r in all_rows)
    play_commands = "\n".join(
        "    nice -n 19 python scripts/usi_selfplay.py play \\\n"
        "        --shared games/fairy --holdout games/fairy-holdout --state STATE_DIR \\\n"
        f"        {a}" for a in args.play_args)
    lanes_intro = ("One `play` process, one game at a time (nice 19)" if len(args.play_args) < 2 else
                   f"{len(args.play_args)} `play` processes side by side (nice 19; the second started when the "
                   "machine's load fell below 1.5), each one game at a time, each with its own state folder "
                   "and file numbers")
    kachi_text = f"{n_kachi} in the run" if n_kachi else "none occurred in the run"
    txt = f"""# Fairy-Stockfish self-play games with engine evaluations ({part})

Engine games for measuring the win-prediction pipeline: Fairy-Stockfish ({engine_id}, Debian
package fairy-stockfish 11.1, USI protocol, standard shogi) playing itself, every engine move
followed by its search score. Written by `usi_selfplay.py` (its
docstring has the details). The {n_all} games of the run are split by file: {len(rows)} games
here, {n_all - len(rows)} in the {other} folder.

Unlike the GNU Shogi corpus (kifu-gnushogi), both sides of a game search with the same node
budget, so neither side is stronger by construction, and every engine move carries an evaluation.

## Evaluation convention

After each engine move comes a comment line `'** <score>` (floodgate style, without a PV): the
score of the search that chose the move, i.e. the evaluation of the position *before* the move,
in centipawns from **Black's (sente's) view** (positive = good for Black), whichever side moved.
A mate score (`score mate N` in USI) is written as `+100000` (Black mates) or `-100000` (White
mates). The engine reports scores from the side to move's view; White's are negated. The K
random opening plies carry no `'**` line (cshogi's parser then reports a score of 0 for them;
the header comment `'random_plies:K` says how many there are). Contempt is set to 0, so scores
carry no bonus for the side to move.

## How the games were made

{play_commands}
    python scripts/usi_selfplay.py report --shared games/fairy --holdout games/fairy-holdout --state STATE_DIR ...
    python scripts/usi_selfplay.py verify ... --sample 5   # regenerates games, compares

  (Python 3.10+ with python-shogi and cshogi from PyPI; Debian's fairy-stockfish package.)

* {lanes_intro}, a fresh engine process for each game, {options}. {speed}
* Seeds: consecutive from each process's `--seed-base` ({lanes_text(all_rows)}); every seed is
  unique and replays to the same game (`verify` regenerates a sample and compares moves, scores and result).
* Opening: K = random.Random(seed).randint(0, {MAX_RANDOM_PLIES}) uniformly random legal moves
  (python-shogi; candidates sorted by USI string before the draw), no evaluation.
* Then the engine plays both sides with `go nodes N`, N = rng.choice({NODE_CHOICES}) per game, the
  same N for both sides (player names `FairyStockfish-nN`). Each game gets its own engine process
  (then `usinewgame`), so a search depends only on the game's moves: with one process for many
  games, some engine state survives `usinewgame` and a game's scores depended on the games played
  before it in that process (`verify` found it; this corpus was then regenerated this way).
* Every engine move is checked against python-shogi's legal moves (no pawn-drop mate, no two
  pawns on a file, no move into check). Fairy-Stockfish 11.1 allows pawn-drop mate in its move
  generator (checked: over 31,000 positions its `go perft 1` move lists equal python-shogi's except
  for such drops), so its mate scores can count such a drop; a game where it plays one is aborted.
* Endings:
  * `%TORYO`: resignation of the side to move, adjudicated as real engines do: when the last
    {RESIGN_PLIES} engine scores (Black's view) all have the same sign and |score| >= {RESIGN_SCORE}, or the
    last engine score is a mate score, the losing side resigns at its turn (if the winner is on
    move it plays first); the side to move also resigns when its own search reports being mated
    (`score mate -N`; that search's move is not played) or the engine answers `bestmove resign`.
    A comment line after the special move says which.
  * `%TSUMI`: the side to move is checkmated (written after the mating move).
  * `%SENNICHITE`: the same position (board, hands, side to move) for the 4th time
    (python-shogi `is_fourfold_repetition`), a draw.
  * `%+ILLEGAL_ACTION` / `%-ILLEGAL_ACTION`: the same, but every move of one side since the
    first occurrence of the position gave check: perpetual check loses, so Black (+) or White (-)
    loses. These are the CSA V2.2 marks for a loss by a rule violation, read as such by
    python-shogi's and cshogi's CSA readers; the comment `'oute_sennichite: perpetual check by ...`
    names it.
  * `%HIKIWAKE`: {MAX_PLIES} plies reached, plus the comment `'max_moves:{MAX_PLIES} (draw by move limit)`
    (CSA V2.2 has no max-moves mark; `%MAX_MOVES` only exists in CSA V3.0).
  * `%KACHI`: an entering-king declaration (`bestmove win`, confirmed by cshogi); {kachi_text}.

## Files

* `{FILE_PREFIX}NNNN.csa`: CSA V2.2, {GAMES_PER_FILE} games per file (the last file may hold fewer),
  games separated by a line holding only `/`; `V2.2` is the first line of the file only. Each
  game: `N+`, `N-`, `$EVENT:fairy-stockfish-selfplay`, `$START_TIME:` (2000/01/01 00:00:00 plus
  the seed in seconds: fixed by the seed, not a real date), `'random_plies:K seed:S`,
  `'engine:...` (engine, nodes, options), `PI`, `+`, one move per line (`+7776FU`), each engine
  move followed by `'** <score>`, one special move, then comment lines. No `T` lines. LF, ASCII.
* `SUMMARY.tsv`: {", ".join(SUMMARY_HEADER)}. winner: b (Black/sente wins) |
  w (White/gote wins) | - (draw); ending: toryo | tsumi | sennichite | oute_sennichite |
  max_moves | kachi | no_legal_moves.
* Readers: python-shogi's and cshogi's CSA parsers report `%TSUMI` games as draws; the winner of
  a `%TSUMI` game is the side that made the last move. `%TORYO`: the side to move lost.

## Counts (this folder)

{len(files)} files ({files[0] if files else '-'} .. {files[-1] if files else '-'}), {s['games']} games,
seeds {seeds[0] if seeds else '-'}..{seeds[-1] if seeds else '-'}.

```
{stats_text(rows, extra)}
```

The eval-sign line is a sanity figure: for each evaluated position, the sign of the score seen
from the side to move in that position predicts that side's result (decisive games only, zero
scores excluded); "plies < 40": positions with fewer than 40 moves played before them.

Whole run ({n_all} games, both folders):

```
{stats_text(all_rows, extra)}
{aborted_text(aborted)}
```

## Checks (run by `report`)

* Every game is replayed with python-shogi (each move must be in `board.legal_moves`) and read
  back with cshogi's multi-game CSA parser (`cshogi.CSA.Parser.parse_file`), whose moves are
  replayed with `cshogi.Board.is_legal`; both give the same moves and special move; cshogi's
  `scores` equal the `'**` lines (0 where there is none) and its result equals SUMMARY.tsv
  (draw for `%TSUMI`, see above); evaluations are present on exactly the engine moves; `%TSUMI`
  positions are mate for both libraries, repetition endings are a 4-fold repetition, `%TORYO`
  is always the side to move's loss.
* Problems found: {len(problems)}{"" if not problems else " (" + "; ".join(problems[:5]) + ")"}
"""
    (d / "README.md").write_text(txt)


def cmd_report(args) -> int:
    import cshogi.CSA

    shared, holdout, states = Path(args.shared), Path(args.holdout), [Path(x) for x in args.state]
    aborted = [r for st in states for r in read_summary(st / "ABORTED.tsv")]
    extra: dict[str, dict] = {}
    overall = []
    engine_id = ""
    for d in (shared, holdout):
        rows = sorted(read_summary(d / "SUMMARY.tsv"), key=lambda r: (r["file"], int(r["index_in_file"])))
        problems = []
        by_file = collections.defaultdict(dict)
        for r in rows:
            by_file[r["file"]][int(r["index_in_file"])] = r
        for name in sorted(set(by_file) - {p.name for p in d.glob(f"{FILE_PREFIX}*.csa")}):
            problems.append(f"{name}: in SUMMARY.tsv but missing")
        for path in sorted(d.glob(f"{FILE_PREFIX}*.csa")):
            games = list(iter_csa_games(path))
            cs_games = cshogi.CSA.Parser.parse_file(str(path))
            if len(cs_games) != len(games):
                problems.append(f"{path.name}: cshogi sees {len(cs_games)} games, expected {len(games)}")
            if len(games) != len(by_file[path.name]):
                problems.append(f"{path.name}: {len(games)} games but {len(by_file[path.name])} SUMMARY rows")
            for (i, chunk), cs in zip(games, cs_games):
                r = by_file[path.name].get(i)
                if r is None:
                    problems.append(f"{path.name}#{i}: no SUMMARY row")
                    continue
                m = re.search(r"^'engine:(.*?) \(USI\)", chunk, re.M)
                engine_id = engine_id or (m.group(1) if m else "")
                problems += check_game(f"{path.name}#{i}", chunk, cs, r, extra)
        overall.append((d, rows, problems))
    all_rows = [r for _, rows, _ in overall for r in rows]
    speed = speed_text(states)
    for d, rows, problems in overall:
        write_readme(d, rows, all_rows, extra, aborted, args, problems, speed, engine_id)
        print(f"{d}: {len(rows)} games, {len(problems)} problems")
        for p in problems[:20]:
            print("  ", p)
        print(stats_text(rows, extra))
    print("ALL")
    print(stats_text(all_rows, extra))
    print(aborted_text(aborted))
    print(speed)
    return 0 if not any(p for _, _, p in overall) else 1


def cmd_verify(args) -> int:
    """Regenerate a sample of recorded seeds (each in a fresh engine process) and compare."""
    shared, holdout = Path(args.shared), Path(args.holdout)
    rows = []
    for d in (shared, holdout):
        rows += [(d, r) for r in read_summary(d / "SUMMARY.tsv")]
    rows.sort(key=lambda x: int(x[1]["seed"]))
    if not rows:
        print("no games")
        return 1
    step = max(1, len(rows) // args.sample)
    sample = rows[::step][: args.sample]
    atexit.register(kill_live_engines)
    engine_path = find_engine(args.engine)
    same = 0
    for d, r in sample:
        chunk = dict(iter_csa_games(d / r["file"]))[int(r["index_in_file"])]
        moves, scores, special = parse_our_csa(chunk)
        ref = [m.usi() for m in replay_python_shogi(moves).move_stack]
        game = play_game(int(r["seed"]), engine_path, args.move_timeout)
        text_same = game_to_csa(game) == chunk
        ok = (game.moves == ref and game.scores == scores and game.ending == r["ending"]
              and game.winner == r["winner"] and game.nodes == int(r["nodes"]) and text_same)
        same += ok
        print(f"seed {r['seed']}: {'same' if ok else 'DIFFERENT'} ({len(ref)} plies, n{r['nodes']}, "
              f"{r['ending']}, record text {'identical' if text_same else 'differs'})", flush=True)
    print(f"{same}/{len(sample)} regenerated games identical")
    return 0 if same == len(sample) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, state_help="logs, ABORTED.tsv, GAMES.tsv", nargs=None):
        p.add_argument("--shared", required=True)
        p.add_argument("--holdout", required=True)
        p.add_argument("--state", required=True, help=state_help, nargs=nargs)
        p.add_argument("--engine", default=ENGINE_NAME, help="engine executable (name on PATH or path)")
        p.add_argument("--move-timeout", type=float, default=30.0, help="seconds to wait for one engine answer")

    p = sub.add_parser("play", help="generate games")
    common(p)
    p.add_argument("--seed-base", type=int, default=2_000_000)
    p.add_argument("--seed-end", type=int, default=None, help="stop before this seed")
    p.add_argument("--first-file", type=int, default=0, help=f"number of this process's first file "
                   f"(it owns {LANE_FILES} file numbers from there)")
    p.add_argument("--max-games", type=int, default=100_000)
    p.add_argument("--max-minutes", type=float, default=75.0)
    p.add_argument("--stop-at-file-boundary", type=float, default=None, metavar="MINUTES",
                   help="after this many minutes, stop when a file is full")
    p.set_defaults(func=cmd_play)
    r = sub.add_parser("report", help="checks, README.md in both folders")
    common(r, "the state folders of all `play` processes of the run", nargs="+")
    r.add_argument("--play-args", action="append", default=None,
                   help="the other options of one `play` process of the run, shown in README.md "
                        "(repeat for each process)")
    r.set_defaults(func=cmd_report)
    v = sub.add_parser("verify", help="regenerate a sample of seeds and compare")
    common(v)
    v.add_argument("--sample", type=int, default=10)
    v.set_defaults(func=cmd_verify)
    args = ap.parse_args(argv)
    if args.cmd == "report" and not args.play_args:
        args.play_args = ["--seed-base 2000000 --max-minutes 75"]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
