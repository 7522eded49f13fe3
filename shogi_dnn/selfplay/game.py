"""One self-play game, decided by its seed: the opening, the node budget, the colours, then the engines.

  rng = random.Random(seed)
  opening     a line of --openings (rng.randrange), else the standard start; then K = rng.randint(A, B)
              uniformly random legal moves (--random-plies A-B; candidates sorted by USI before the draw)
  nodes       rng.choice(--nodes): both sides search `go nodes N`
  colours     with two engines, rng.randrange(2) says which plays Black
  engines     a fresh process per engine per game (`usinewgame` once): a fixed-node search then depends only
              on the game's moves, so the game replays from its seed

Every engine move is checked against the rules backend's legal moves; evaluations are the searching
side's score of the position before its move, stored (GameRecord.evals) at the position after it.
Endings, by the rules (kifu/repetition for the fourfold repetition and perpetual check):

  CHECKMATE       the side to move has no legal move and is in check
  RESIGN          adjudicated: the last engine score is a mate score, or the last RESIGN_PLIES scores
                  (Black's view) all have one sign and |score| >= RESIGN_SCORE; the loser resigns at its
                  turn. Also: the engine answers `bestmove resign`, or its search reports being mated
  SENNICHITE      the same position for the 4th time; OUTE_SENNICHITE when one side checked throughout
  ENTERING_KING   `bestmove win` and rules.declaration_win agrees
  MAX_MOVES       --max-plies plies (a draw)

An engine that plays an illegal move, declares a win the rules do not confirm, prints no score, crashes or
hangs aborts the game (GameAborted): it is not written.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Sequence

from shogi_dnn.annotate.usi_client import EngineFailure, UsiEngine
from shogi_dnn.errors import ConfigError
from shogi_dnn.kifu import repetition
from shogi_dnn.kifu.evals import MATE_EVAL
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import BLACK, declaration_win, new_position, position_key

RESIGN_SCORE = 3000
RESIGN_PLIES = 6


class GameAborted(Exception):
    """An engine misbehaved: the game is not written (the seed goes to ABORTED.tsv)."""


@dataclasses.dataclass(frozen=True)
class Opening:
    """A start position and moves from it (an --openings line), checked legal."""

    sfen: str
    moves: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every game of a folder shares (selfplay.json keeps it)."""

    engines: tuple[str, ...]                  # one path (self-play) or two
    nodes: tuple[int, ...] = (3000, 6000, 12000)
    random_plies: tuple[int, int] = (0, 10)
    openings: tuple[Opening, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    max_plies: int = 256
    move_timeout: float = 60.0

    def __post_init__(self) -> None:
        low, high = self.random_plies
        if not 1 <= len(self.engines) <= 2:
            raise ConfigError(f"--engine: one engine (self-play) or two, got {len(self.engines)}")
        if not self.nodes or any(n < 1 for n in self.nodes):
            raise ConfigError(f"--nodes {','.join(map(str, self.nodes))}: node budgets must be >= 1")
        if not 0 <= low <= high:
            raise ConfigError(f"--random-plies {low}-{high}: need 0 <= A <= B")
        if self.max_plies < 1:
            raise ConfigError(f"--max-plies {self.max_plies}: must be >= 1")


@dataclasses.dataclass(frozen=True)
class GamePlan:
    """What the seed decides before any engine move."""

    seed: int
    opening: int                 # index into Settings.openings, -1: the standard start
    random_plies: int
    nodes: int
    black: int                   # index into Settings.engines of Black's engine


@dataclasses.dataclass(frozen=True)
class PlayedGame:
    """A finished game: the record (evals: GameRecord's convention), its plan and what happened."""

    plan: GamePlan
    record: GameRecord
    notes: tuple[str, ...]
    engine_plies: int
    seconds: float


def plan_game(seed: int, settings: Settings) -> GamePlan:
    rng = random.Random(seed)
    opening = rng.randrange(len(settings.openings)) if settings.openings else -1
    plies = rng.randint(*settings.random_plies)
    nodes = rng.choice(settings.nodes)
    black = rng.randrange(2) if len(settings.engines) == 2 else 0
    return GamePlan(seed, opening, plies, nodes, black)


def parse_opening(line: str, where: str) -> Opening:
    """`startpos [moves M...]` or `sfen S [moves M...]` (a `position ` prefix allowed), checked legal.

    Raises:
        ConfigError: a bad position or an illegal move, naming `where` (file:line).
    """
    words = line.split()
    if words[:1] == ["position"]:
        words = words[1:]
    if words[:1] == ["startpos"]:
        sfen, rest = STANDARD_START_SFEN, words[1:]
    elif words[:1] == ["sfen"] and len(words) >= 5:
        sfen, rest = " ".join(words[1:5]), words[5:]
    else:
        raise ConfigError(f"{where}: expected 'startpos [moves ...]' or 'sfen SFEN [moves ...]'")
    if rest[:1] == ["moves"]:
        rest = rest[1:]
    elif rest:
        raise ConfigError(f"{where}: expected 'moves' after the position, got {rest[0]!r}")
    try:
        position = new_position(sfen)
    except (ValueError, KeyError, IndexError) as exc:
        raise ConfigError(f"{where}: bad SFEN {sfen!r} ({exc})") from None
    for move in rest:
        if move not in position.legal_usi():
            raise ConfigError(f"{where}: illegal move {move!r} in {position.sfen()}")
        position.push_usi(move)
    return Opening(sfen, tuple(rest))


def resign_verdict(black_scores: Sequence[int | None]) -> tuple[int, str] | None:
    """(the colour that has lost, why) from the engine scores so far (Black's view), else None."""
    if not black_scores or black_scores[-1] is None:
        return None
    last = black_scores[-1]
    if abs(last) >= MATE_EVAL:
        return (1 if last > 0 else 0), "mate score"
    tail = black_scores[-RESIGN_PLIES:]
    if len(tail) == RESIGN_PLIES and all(s is not None and abs(s) >= RESIGN_SCORE for s in tail):
        if all(s is not None and s > 0 for s in tail):
            return 1, f"score >= +{RESIGN_SCORE} (Black's view) for {RESIGN_PLIES} plies"
        if all(s is not None and s < 0 for s in tail):
            return 0, f"score <= -{RESIGN_SCORE} (Black's view) for {RESIGN_PLIES} plies"
    return None


_COLOUR = ("black", "white")
_WINNER = (Winner.BLACK, Winner.WHITE)


class _Board:
    """The game so far: the position, one key and one in-check flag per position, evaluations."""

    def __init__(self, opening: Opening) -> None:
        self.start = opening.sfen
        self.position = new_position(opening.sfen)
        self.moves: list[str] = []
        self.keys = [position_key(self.position)]
        self.checks = [self.position.in_check()]
        self.evals: list[int | None] = [None]
        self.black_scores: list[int | None] = []
        for move in opening.moves:
            self.push(move, None)

    def push(self, move: str, score: int | None) -> None:
        """Play `move`; `score`: the mover's search score (its view), None for an opening move."""
        mover = self.position.turn
        self.position.push_usi(move)
        self.moves.append(move)
        self.keys.append(position_key(self.position))
        self.checks.append(self.position.in_check())
        self.evals.append(None if score is None else -score)
        self.black_scores.append(None if score is None else (score if mover == BLACK else -score))

    def usi_position(self) -> str:
        return f"sfen {self.start}" + (f" moves {' '.join(self.moves)}" if self.moves else "")

    def ending(self, max_plies: int) -> tuple[Winner, Ending, str] | None:
        """How the game is over in the current position, by the rules, else None."""
        to_move = self.position.turn
        if not self.position.legal_usi():
            if self.position.in_check():
                return _WINNER[1 - to_move], Ending.CHECKMATE, ""
            return _WINNER[1 - to_move], Ending.RESIGN, f"{_COLOUR[to_move]} has no legal move"
        end = len(self.keys) - 1
        if self.keys.count(self.keys[end]) >= 4:
            first = self.keys.index(self.keys[end])
            first_turn = 0 if self.start.split(" ")[1] == "b" else 1
            winner, ending = repetition.result_from_checks(first, end, self.checks, first_turn)
            note = "" if ending is Ending.SENNICHITE else f"perpetual check: {winner.value} wins"
            return winner, ending, note
        if len(self.moves) >= max_plies:
            return Winner.DRAW, Ending.MAX_MOVES, f"max_moves:{max_plies} (a draw by the move limit)"
        return None


def play_game(seed: int, settings: Settings, names: Sequence[str] = ()) -> PlayedGame:
    """Play the game of `seed` (module docstring). names: the engines' player names (default: paths).

    Raises:
        GameAborted: an engine misbehaved (the reason in words).
        RunError: an engine cannot be started.
    """
    started = time.monotonic()
    plan = plan_game(seed, settings)
    opening = settings.openings[plan.opening] if plan.opening >= 0 else Opening(STANDARD_START_SFEN)
    board = _Board(opening)
    rng = random.Random(seed)
    plan_game_draws(rng, settings)
    for _ in range(plan.random_plies):
        if board.ending(settings.max_plies):
            break
        candidates = sorted(board.position.legal_usi())
        board.push(candidates[rng.randrange(len(candidates))], None)
    order = (plan.black, 1 - plan.black) if len(settings.engines) == 2 else (0, 0)
    engines: dict[int, UsiEngine] = {}
    notes: list[str] = []
    engine_plies = 0
    try:
        for index in sorted(set(order)):
            engines[index] = UsiEngine(settings.engines[index], settings.options)
        first = {index: True for index in engines}
        while (over := board.ending(settings.max_plies)) is None:
            mover = board.position.turn
            verdict = resign_verdict(board.black_scores)
            if verdict is not None and verdict[0] == mover:
                over = _WINNER[1 - mover], Ending.RESIGN, f"{_COLOUR[mover]} resigns: {verdict[1]}"
                break
            engine = order[mover]
            try:
                result = engines[engine].go(board.usi_position(), plan.nodes, settings.move_timeout,
                                            new_game=first[engine])
            except EngineFailure as exc:
                raise GameAborted(f"{exc.kind} at ply {len(board.moves) + 1}: {exc}") from None
            first[engine] = False
            if result.bestmove in ("resign", "(none)"):
                over = _WINNER[1 - mover], Ending.RESIGN, \
                    f"{_COLOUR[mover]} resigns: the engine answered bestmove {result.bestmove}"
                break
            if result.bestmove == "win":
                if not declaration_win(board.position):
                    raise GameAborted(f"bestmove win the rules do not confirm in {board.position.sfen()}")
                over = _WINNER[mover], Ending.ENTERING_KING, f"{_COLOUR[mover]} declares an entering-king win"
                break
            if result.score is None:
                raise GameAborted(f"no score before bestmove {result.bestmove} at ply {len(board.moves) + 1}")
            if result.score <= -MATE_EVAL:
                over = _WINNER[1 - mover], Ending.RESIGN, \
                    f"{_COLOUR[mover]} resigns: its search finds mate against it"
                break
            if result.bestmove not in board.position.legal_usi():
                raise GameAborted(f"illegal engine move {result.bestmove} at ply {len(board.moves) + 1} in "
                                  f"{board.position.sfen()}")
            board.push(result.bestmove, result.score)
            engine_plies += 1
    finally:
        for engine_process in engines.values():
            engine_process.close()
    winner, ending, note = over
    if note:
        notes.append(note)
    labels = [names[i] if i < len(names) else settings.engines[i] for i in range(len(settings.engines))]
    player = [f"{labels[order[colour]]} nodes {plan.nodes}" for colour in (0, 1)]
    record = GameRecord(opening.sfen, tuple(board.moves), winner, ending, SourceLine("selfplay", 0), "csa",
                        player[0], player[1], evals=tuple(board.evals))
    return PlayedGame(plan, record, tuple(notes), engine_plies, time.monotonic() - started)


def plan_game_draws(rng: random.Random, settings: Settings) -> None:
    """Advance `rng` past plan_game's draws, so that the random plies draw from the same stream after them."""
    if settings.openings:
        rng.randrange(len(settings.openings))
    rng.randint(*settings.random_plies)
    rng.choice(settings.nodes)
    if len(settings.engines) == 2:
        rng.randrange(2)
