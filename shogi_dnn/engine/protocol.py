"""The USI protocol: a GUI or a tournament runner talks to the engine through stdin/stdout.

The caller's thread reads commands (run()); `go` searches in its own thread, so `stop`, `ponderhit`,
`isready` and `quit` are answered meanwhile; output lines are written whole under a lock. `go infinite`
and `go ponder` hold `bestmove` until `stop` (or `ponderhit`). The evaluator loads in its own thread;
`isready` waits for it, then `readyok`, always. A model that fails to load is one stderr line, an `info
string error` before `readyok`, the material player's move at every `go`, exit status 1. A search that
evaluated nothing in time reports no score, never resigns, and plays the most visited move, the policy's
prior or the material player's move, with one `info string` naming it.

Commands (anything else is ignored; an error in a command is one `info string` line, never a crash):
  usi                         id name/author, the options below, usiok; starts loading the evaluator
  setoption name N [value V]  sets an option (an unknown name or bad value: one info string)
  isready                     waits for the evaluator (loaded and warmed once), readyok
  usinewgame, gameover ...    stop any search; forget the kept tree
  position startpos|sfen S [moves ...]   a start that breaks a rule of rules/validity.py (a king missing,
                              nifu, ...) or an illegal move: one info string naming it, no position
  go [btime wtime binc winc byoyomi movetime nodes depth infinite ponder]   searches, then
                              info depth .. seldepth .. [multipv k] [score cp|mate ..] nodes .. nps ..
                                   time .. pv ..   (no score: nothing under the move was evaluated)
                              and bestmove MOVE [ponder MOVE] | bestmove resign | bestmove win
                              A malformed value or an unknown word (`go byoyomi 1e9`, `go btime soon`) is one
                              info string and is skipped: the rest of the line is searched and answered.
  go mate ...                 checkmate notimplemented
  stop, ponderhit, quit

Options:
  USI_Ponder check, USI_Hash spin        accepted for GUIs (the tree is bounded by limits.MAX_TREE_NODES)
  MultiPV spin 1..MAX_MULTIPV            root moves reported, best first
  DepthLimit spin 0..64                  0 none; D > 0 plays the best-first search to D plies (1: the
                                         one-ply player), engine/minimax.py, instead of the PUCT search
  NodesLimit spin 0..                    0 none; else positions evaluated per move (quiescence included)
  CPuct spin (hundredths)                c_puct of the PUCT search (100 = 1.0)
  BatchSize spin                         leaves evaluated in one evaluator call
  QuiescencePlies, QuiescenceWidth spin  without a policy head: capture plies at the leaves, captures kept
  Temperature spin (hundredths)          > 0: the move drawn with probability ~ visits^(1/T) ...
  TemperatureMoves spin                  ... while the game's move number is at most this (varied games)
  ResignValue spin 0..30000              resign when the best score, from an evaluated position or a
                                         proof, is below -ResignValue cp (0 never)
  EnteringKingRule combo                 rules.ENTERING_KING_RULES: declare `bestmove win` when allowed
  NetworkDelay spin ms                   kept back from every time budget (GUI and pipe latency)

The clock: time per move (no movetime) is remaining / MOVES_TO_GO + increment + byoyomi - NetworkDelay,
within the time left and at least MIN_SECONDS (clock values capped at MAX_CLOCK_MS). The deadline counts
from the `go` line read, less SAFETY_FRACTION and the engine's stop latency (`stop_margin`); a watchdog
answers with the tree's best at the full budget if the search has not.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from shogi_dnn import __version__
from shogi_dnn.engine import limits as limits_lib
from shogi_dnn.engine import minimax
from shogi_dnn.engine import search as search_lib
from shogi_dnn.engine.players import Evaluator, fixed_material, has_policy, warm_up
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import (
    BLACK,
    ENTERING_KING_RULES,
    IllegalMoveError,
    Position,
    check_sfen,
    declaration_win,
    position_factory,
)
from shogi_dnn.wording import plural

AUTHOR = "shogi-dnn"
MAX_MULTIPV = 32
MOVES_TO_GO = 30
MIN_SECONDS = 0.01
MAX_CLOCK_MS = 86_400_000             # a clock value above a day is read as a day (an absurd `go`)
RECENT_LAGS = 16                      # moves whose stop latency sets the margin
MAX_STOP_MARGIN = 0.5                 # seconds: the margin never takes more than this
SAFETY_FRACTION = 0.1                 # of every budget, kept for a loaded machine's scheduling delays
GO_INT_ARGS = ("btime", "wtime", "binc", "winc", "byoyomi", "movetime", "nodes", "depth", "movestogo")
_SEARCH = limits_lib.Settings()       # the search's defaults: the options of the same meaning start there


@dataclasses.dataclass
class Options:
    """The engine's USI options (module docstring); names as the GUI sends them."""

    MultiPV: int = 1
    DepthLimit: int = 0
    NodesLimit: int = 0
    ResignValue: int = 0
    EnteringKingRule: str = _SEARCH.entering_king_rule
    NetworkDelay: int = 120
    CPuct: int = round(_SEARCH.c_puct * 100)      # hundredths
    BatchSize: int = _SEARCH.batch_size
    QuiescencePlies: int = _SEARCH.quiescence_plies
    QuiescenceWidth: int = _SEARCH.quiescence_width
    Temperature: int = 0
    TemperatureMoves: int = 0
    USI_Ponder: bool = False
    USI_Hash: int = 16

    def settings(self) -> limits_lib.Settings:
        """The search settings these options give."""
        return limits_lib.Settings(c_puct=self.CPuct / 100, batch_size=self.BatchSize,
                                   quiescence_plies=self.QuiescencePlies,
                                   quiescence_width=self.QuiescenceWidth,
                                   entering_king_rule=self.EnteringKingRule)


_SPIN_RANGES = {"MultiPV": (1, MAX_MULTIPV), "DepthLimit": (0, 64), "NodesLimit": (0, 1 << 40),
                "ResignValue": (0, limits_lib.MAX_CP), "NetworkDelay": (0, 10000), "CPuct": (1, 10000),
                "BatchSize": (1, 1024), "QuiescencePlies": (0, 8), "QuiescenceWidth": (1, 64),
                "Temperature": (0, 1000), "TemperatureMoves": (0, 1000), "USI_Hash": (1, 1 << 20)}


def option_lines(defaults: Options) -> list[str]:
    """The `option name ...` lines of `usi`."""
    lines = [f"option name USI_Ponder type check default {str(defaults.USI_Ponder).lower()}"]
    for name, (low, high) in _SPIN_RANGES.items():
        lines.append(f"option name {name} type spin default {getattr(defaults, name)} min {low} max {high}")
    rules = " ".join(f"var {r}" for r in ENTERING_KING_RULES)
    lines.append(f"option name EnteringKingRule type combo default {defaults.EnteringKingRule} {rules}")
    return lines


@dataclasses.dataclass(frozen=True)
class Go:
    """A parsed `go` command: clock values in milliseconds (0 when absent)."""

    btime: int = 0
    wtime: int = 0
    binc: int = 0
    winc: int = 0
    byoyomi: int = 0
    movetime: int = 0
    nodes: int = 0
    depth: int = 0
    movestogo: int = 0
    infinite: bool = False
    ponder: bool = False
    mate: bool = False

    @property
    def has_clock(self) -> bool:
        return any((self.btime, self.wtime, self.binc, self.winc, self.byoyomi, self.movetime))


def parse_go(tokens: list[str], problems: list[str] | None = None) -> Go:
    """`go` arguments -> Go. A malformed value (not a non-negative integer) or an unknown word is skipped
    and named in `problems` (when given); clock values are capped at MAX_CLOCK_MS. Never raises."""
    values: dict[str, Any] = {}                  # Go's fields: ints, and the flags True
    i = 0
    while i < len(tokens):
        word = tokens[i]
        if word in GO_INT_ARGS:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
            if value.isdigit():
                values[word] = min(int(value), MAX_CLOCK_MS) if word not in ("nodes", "depth") else int(value)
                i += 2
                continue
            if problems is not None:
                problems.append(f"go {word} {value!r}: not an integer, ignored")
            a_word = value in GO_INT_ARGS or value in ("infinite", "ponder", "mate")
            i += 2 if value and not a_word else 1              # a following keyword is read next
            continue
        if word in ("infinite", "ponder", "mate"):
            values[word] = True
        elif problems is not None and word != "searchmoves":
            problems.append(f"go {word!r}: unknown, ignored")
        i += 1
    return Go(**values)


def move_seconds(go: Go, turn: int, delay_ms: int) -> float | None:
    """Seconds to think for this move (module docstring); None when the clock gives no limit."""
    if go.movetime:
        return max(MIN_SECONDS, (go.movetime - delay_ms) / 1000)
    if not go.has_clock:
        return None
    left, inc = (go.btime, go.binc) if turn == BLACK else (go.wtime, go.winc)
    moves_to_go = go.movestogo or MOVES_TO_GO
    budget = left / moves_to_go + inc + go.byoyomi - delay_ms
    ceiling = left + inc + go.byoyomi - delay_ms
    return max(MIN_SECONDS, min(budget, ceiling) / 1000)


def parse_position(tokens: list[str], factory: Callable[[str], Position]) -> Position:
    """`position` arguments -> the position after the moves. Raises ValueError (bad SFEN or move)."""
    return parse_game(tokens, factory)[0]


def parse_game(tokens: list[str],
               factory: Callable[[str], Position]) -> tuple[Position, str, tuple[str, ...]]:
    """`position` arguments -> (the position after the moves, the start SFEN, the moves). The start passes
    the full check of a position given by hand (rules.check_sfen: both kings, piece set, nifu, ...).
    Raises ValueError (bad SFEN, a rule the start breaks, or an illegal move)."""
    if not tokens:
        raise ValueError("position: nothing after 'position'")
    if tokens[0] == "startpos":
        sfen, rest = STANDARD_START_SFEN, tokens[1:]
    elif tokens[0] == "sfen":
        cut = tokens.index("moves") if "moves" in tokens else len(tokens)
        sfen, rest = " ".join(tokens[1:cut]), tokens[cut:]
        if len(tokens[1:cut]) == 3:
            sfen += " 1"                                   # the move number is optional in practice
    else:
        raise ValueError(f"position: expected 'startpos' or 'sfen', got {tokens[0]!r}")
    if rest and rest[0] != "moves":
        raise ValueError(f"position: expected 'moves', got {rest[0]!r}")
    try:
        check_sfen(sfen)
        position = factory(sfen)
    except IllegalMoveError as exc:
        raise ValueError(f"position: {exc}") from None
    for ply, move in enumerate(rest[1:], start=1):
        try:
            position.push_usi(move)
        except IllegalMoveError:
            raise ValueError(f"position: move {ply} {move!r} is illegal") from None
    return position, sfen, tuple(rest[1:])


def format_info(info: limits_lib.SearchInfo) -> list[str]:
    """`info ...` lines of a search state, one per root line (with `multipv k` when more than one)."""
    lines = []
    for k, line in enumerate(info.lines, start=1):
        score = f" score mate {line.mate}" if line.mate is not None else \
            ("" if line.cp is None else f" score cp {line.cp}")
        multipv = f" multipv {k}" if len(info.lines) > 1 else ""
        lines.append(f"info depth {max(1, len(line.pv))} seldepth {info.seldepth}{multipv}{score} "
                     f"nodes {info.nodes} nps {info.nps} time {int(info.seconds * 1000)} "
                     f"pv {' '.join(line.pv)}")
    return lines


def first_line(exc: BaseException) -> str:
    """An exception as one line: its first line of text, or its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def material_move(position: Position) -> str | None:
    """The material player's move (players.fixed_material, one ply, no quiescence); None without a legal
    move."""
    info = minimax.BestFirst(fixed_material(), position, limits_lib.Limits(depth=1),
                             settings=limits_lib.Settings(quiescence_plies=0)).run()
    return info.lines[0].move if info.lines else None


class UsiEngine:
    """The protocol state machine. `evaluator` starts loading at `usi` (in a thread) or at `isready`."""

    def __init__(self, evaluator: Evaluator, out: TextIO, name: str = "shogi-dnn",
                 backend: str | None = None, options: Options | None = None, seed: int | None = None,
                 err: TextIO | None = None) -> None:
        self.evaluator = evaluator
        self.out = out
        self.err = err                         # a load failure's one line (stderr), once
        self.name = name
        self.factory = position_factory(backend)
        self.options = options or Options()
        self.position: Position | None = self.factory(STANDARD_START_SFEN)
        self.game: tuple[str, tuple[str, ...]] = (STANDARD_START_SFEN, ())
        self.lags: list[float] = []            # recent stop latencies, seconds (stop_margin)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self._load_error: BaseException | None = None
        self.load_failure: str | None = None   # the last load's error, until a load succeeds
        self._ready = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._release = threading.Event()      # bestmove may be sent (not pondering / infinite)
        self._ponder_go: Go | None = None
        self._search: search_lib.Search | minimax.BestFirst | None = None
        # the kept tree: (game, root, a bound on its size)
        self._tree: tuple[tuple[str, tuple[str, ...]], search_lib.Node, int] | None = None
        self._hard_deadline: float | None = None        # the watchdog answers for the search then
        self._answered = False                          # the current search's bestmove was sent
        self._answer_lock = threading.Lock()

    def send(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def run(self, lines: Iterable[str]) -> int:
        """Handle commands until `quit` or the end of input; returns the exit status (0, or 1 when the
        evaluator failed to load)."""
        for raw in lines:
            if not self.handle(raw):
                break
        self._finish_search()
        return 0 if self.load_failure is None else 1

    def handle(self, raw: str) -> bool:
        """One command line; False after `quit`. Never raises on input."""
        received = time.monotonic()
        tokens = raw.strip().split()
        if not tokens:
            return True
        command, args = tokens[0], tokens[1:]
        if command == "quit":
            return False
        handler = getattr(self, f"_cmd_{command}", None)
        if handler is None:
            return True                                    # unknown commands are ignored (USI)
        try:
            if command == "go":
                self._cmd_go(args, received)
            else:
                handler(args)
        except Exception as exc:        # noqa: BLE001 - a GUI's input must never kill the engine
            self.send(f"info string error: {command}: {exc}")
        return True

    # -- loading -------------------------------------------------------------------------------------

    def start_loading(self) -> threading.Thread:
        """Load and warm the evaluator in a thread (once); that thread."""
        if self._loader is None:
            self._loader = threading.Thread(target=self._load, daemon=True, name="load")
            self._loader.start()
        return self._loader

    def _load(self) -> None:
        try:
            warm_up(self.evaluator)
        except BaseException as exc:    # noqa: BLE001 - reported at isready / go, in the reader's thread
            self._load_error = exc

    def wait_loaded(self) -> bool:
        """Wait for the evaluator; False when loading failed (load_failure says why; the first failure is
        one line on `err`; a later call tries again)."""
        if self._ready:
            return True
        self.start_loading().join()
        if self._load_error is not None:
            error, self._load_error, self._loader = self._load_error, None, None
            if self.load_failure is None and self.err is not None:
                self.err.write(f"shogi-dnn usi: error: {first_line(error)}\n")
                self.err.flush()
            self.load_failure = first_line(error)
            return False
        self._ready = True
        self.load_failure = None
        return True

    def _no_model_line(self) -> str:
        return f"info string error: model: {self.load_failure}; playing the material player's moves"

    # -- commands ------------------------------------------------------------------------------------

    def _cmd_usi(self, args: list[str]) -> None:
        self.send(f"id name {self.name} {__version__}")
        self.send(f"id author {AUTHOR}")
        for line in option_lines(Options()):
            self.send(line)
        self.send("usiok")
        self.start_loading()

    def _cmd_isready(self, args: list[str]) -> None:
        if not self.wait_loaded():
            self.send(self._no_model_line())
        self.send("readyok")

    def _cmd_setoption(self, args: list[str]) -> None:
        if not args or args[0] != "name":
            raise ValueError("expected 'setoption name N [value V]'")
        cut = args.index("value") if "value" in args else len(args)
        name, value = " ".join(args[1:cut]), " ".join(args[cut + 1:])
        fields = {f.name: f for f in dataclasses.fields(Options)}
        if name not in fields:
            self.send(f"info string unknown option {name!r} ignored")
            return
        current = getattr(self.options, name)
        if isinstance(current, bool):
            parsed: object = value.lower() == "true"
        elif isinstance(current, int):
            low, high = _SPIN_RANGES[name]
            parsed = int(value)
            if not low <= parsed <= high:
                raise ValueError(f"{name} {parsed}: outside {low}..{high}")
        else:
            if value not in ENTERING_KING_RULES:
                raise ValueError(f"{name} {value!r}: one of {', '.join(ENTERING_KING_RULES)}")
            parsed = value
        setattr(self.options, name, parsed)

    def _cmd_usinewgame(self, args: list[str]) -> None:
        self._finish_search()
        self._tree = None

    def _cmd_gameover(self, args: list[str]) -> None:
        self._finish_search()
        self._tree = None

    def _cmd_position(self, args: list[str]) -> None:
        self._finish_search()
        self.position = None
        try:
            self.position, start, moves = parse_game(args, self.factory)
            self.game = (start, moves)
        except ValueError as exc:
            self.send(f"info string illegal position: {exc}")

    def _cmd_stop(self, args: list[str]) -> None:
        self._finish_search()

    def _cmd_ponderhit(self, args: list[str]) -> None:
        search, go = self._search, self._ponder_go
        if search is None or go is None:
            return
        seconds = move_seconds(go, self._searched_position().turn, self.options.NetworkDelay)
        # From now on the ponder search is a normal one: its clock starts here.
        deadline = None
        if seconds is not None:
            now = time.monotonic()
            deadline = now + self.search_seconds(seconds)
            self._hard_deadline = now + seconds
        search.limits = dataclasses.replace(search.limits, infinite=False, deadline=deadline)
        self._ponder_go = None
        self._release.set()

    def _cmd_go(self, args: list[str], received: float | None = None) -> None:
        received = time.monotonic() if received is None else received
        self._finish_search()
        problems: list[str] = []
        go = parse_go(args, problems)
        for problem in problems:
            self.send(f"info string {problem}")
        if go.mate:
            self.send("checkmate notimplemented")
            return
        if self.position is None:
            self.send("info string no valid position; resigning")
            self.send("bestmove resign")
            return
        if declaration_win(self.position, self.options.EnteringKingRule):
            self.send("bestmove win")
            return
        if not self._ready and (self.load_failure is not None or not self.wait_loaded()):
            self.send(self._no_model_line())            # isready tries the load again, never go
            move = material_move(self.position)
            self.send("bestmove resign" if move is None else f"bestmove {move}")
            return
        self._stop.clear()
        self._release.clear()
        if not (go.infinite or go.ponder):
            self._release.set()
        self._ponder_go = go if go.ponder else None
        limits = self._limits(go, received)
        seconds = None if go.ponder else move_seconds(go, self.position.turn, self.options.NetworkDelay)
        self._hard_deadline = None if seconds is None or go.infinite else received + seconds
        self._search = self._new_search(limits)
        self._answered = False
        finished = threading.Event()
        self._thread = threading.Thread(target=self._think, args=(self._search, finished), daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch, args=(self._search, finished), daemon=True).start()

    # -- searching -----------------------------------------------------------------------------------

    def _searched_position(self) -> Position:
        """The position of the search under way (go starts none without a position)."""
        assert self.position is not None, "a search without a position"
        return self.position

    def stop_margin(self) -> float:
        """Seconds kept back for the engine's own stop latency (module docstring)."""
        return min(MAX_STOP_MARGIN, max(self.lags, default=0.0))

    def search_seconds(self, seconds: float) -> float:
        """The search's own time out of a budget of `seconds`: less SAFETY_FRACTION and the stop margin."""
        return max(MIN_SECONDS, seconds * (1 - SAFETY_FRACTION) - self.stop_margin())

    def _limits(self, go: Go, received: float) -> limits_lib.Limits:
        depth = go.depth or self.options.DepthLimit or None
        nodes = go.nodes or self.options.NodesLimit or None
        turn = self._searched_position().turn
        seconds = None if go.ponder else move_seconds(go, turn, self.options.NetworkDelay)
        infinite = go.infinite or go.ponder
        if seconds is None and depth is None and nodes is None and not infinite:
            depth = 1                                      # a bare `go`: the one-ply answer
        deadline = None if seconds is None else received + self.search_seconds(seconds)
        return limits_lib.Limits(nodes=nodes, depth=depth, infinite=infinite, deadline=deadline)

    def _new_search(self, limits: limits_lib.Limits) -> search_lib.Search | minimax.BestFirst:
        def report(info: limits_lib.SearchInfo) -> None:
            for line in format_info(info):
                self.send(line)

        settings = self.options.settings()
        position = self._searched_position()
        if limits.depth is not None:
            return minimax.BestFirst(self.evaluator, position, limits, self._stop, report=report,
                                     multipv=self.options.MultiPV, settings=settings)
        start, moves = self.game
        tree, size = None, 1
        if self._tree is not None:
            (old_start, old_moves), old_root, size = self._tree
            if old_start == start and moves[:len(old_moves)] == old_moves:
                tree = search_lib.subtree(old_root, moves[len(old_moves):])
        _, history = search_lib.game_history(self.factory(start), moves)
        return search_lib.Search(self.evaluator, position, limits, self._stop, report=report,
                                 multipv=self.options.MultiPV, settings=settings, history=history, tree=tree,
                                 tree_nodes=size)

    def _think(self, search: search_lib.Search | minimax.BestFirst, finished: threading.Event) -> None:
        try:
            info = search.run()
        except Exception as exc:        # noqa: BLE001 - report, answer, stay alive
            finished.set()
            self.send(f"info string error: search: {exc}")
            self._release.wait()
            self._answer(search, None)
            return
        finished.set()
        self._answer(search, info)

    def _watch(self, search: search_lib.Search | minimax.BestFirst, finished: threading.Event) -> None:
        """The hard deadline (the clock's budget, without the stop margin): when the search has not
        answered by then (an evaluator call that the machine's load stretched), answer for it from the
        tree as it stands; the search thread stops after its call and its answer is dropped."""
        while not finished.is_set():
            hard = self._hard_deadline
            left = None if hard is None else hard - time.monotonic()
            if left is not None and left <= 0 and self._release.is_set():
                self._stop.set()
                try:
                    info: limits_lib.SearchInfo | None = search.info()
                except Exception as exc:        # noqa: BLE001 - the watchdog answers whatever happens
                    self.send(f"info string error: search: {first_line(exc)}")
                    info = None
                self._answer(search, info)
                return
            finished.wait(0.05 if left is None else min(max(left, 0.001), 0.05))

    def _answer(self, search: search_lib.Search | minimax.BestFirst,
                info: limits_lib.SearchInfo | None) -> None:
        """Send the final info lines and the bestmove of `search`, once (the search thread or the
        watchdog, whichever comes first); record the stop latency."""
        returned = time.monotonic()
        released = self._release.is_set()
        try:
            notes, move = self._choose(search, info)
        except Exception as exc:        # noqa: BLE001 - report, answer, stay alive
            notes, move = self._unsearched(search, None, f"error: search: {first_line(exc)}")
        self._release.wait()               # go infinite / ponder: not before stop or ponderhit
        with self._answer_lock:
            if self._answered or search is not self._search:
                return
            self._answered = True
            for line in [] if info is None else format_info(info):
                self.send(line)
            for line in notes:
                self.send(line)
            self.send(move)
        sent = time.monotonic()
        if isinstance(search, search_lib.Search):
            self._tree = (self.game, search.tree, search.tree_nodes)
        if released and search.limits.deadline is not None and not search.limits.infinite:
            # what the engine needed after the search decided: the next margin (a late move from a stalled
            # machine is the watchdog's, it would only shrink the next moves' time)
            self.lags = (self.lags + [sent - returned])[-RECENT_LAGS:]

    def _choose(self, search: search_lib.Search | minimax.BestFirst,
                info: limits_lib.SearchInfo | None) -> tuple[list[str], str]:
        """The `info string` lines and the bestmove line: resign (no legal move, or an evaluated or proven
        loss past ResignValue), or the search's move (drawn with Temperature early in the game), or the
        move of a search that evaluated nothing in time (the module docstring)."""
        notes = []
        if search.unevaluated:
            count = plural(search.unevaluated, "position")
            notes.append(f"info string error: the network gave NaN for {count}: treated as unevaluated")
        if info is None or not info.lines or info.lines[0].p is None:
            more, move = self._unsearched(search, info, "no move evaluated in time")
            return notes + more, move
        best = info.lines[0]
        resign = self.options.ResignValue
        mated = best.mate is not None and best.mate < 0
        cp = best.cp                                       # an int: best.p is not None (above)
        if resign and (mated or (best.mate is None and cp is not None and cp < -resign)):
            return notes, "bestmove resign"
        line = best
        move_number = int(self._searched_position().sfen().split()[-1])
        if isinstance(search, search_lib.Search) and self.options.Temperature and \
                move_number <= self.options.TemperatureMoves:
            chosen = search.choose(self.options.Temperature / 100, self._rng)
            if chosen is not None and chosen != best.move:  # None only without a legal move
                line = search.line(chosen)
        ponder = f" ponder {line.pv[1]}" if len(line.pv) > 1 else ""
        return notes, f"bestmove {line.move}{ponder}"

    def _unsearched(self, search: search_lib.Search | minimax.BestFirst, info: limits_lib.SearchInfo | None,
                    why: str) -> tuple[list[str], str]:
        """The move of a search with no evaluated reply: the policy's prior when the root was evaluated by
        a network with a policy head, else the material player's; resign only without a legal move."""
        if info is not None and info.lines and isinstance(search, search_lib.Search) and \
                has_policy(self.evaluator) and search.tree.expanded:
            return [f"info string {why}: the policy's move"], f"bestmove {info.lines[0].move}"
        move = material_move(self._searched_position())
        if move is None:
            return [], "bestmove resign"
        return [f"info string {why}: the material player's move"], f"bestmove {move}"

    def _finish_search(self) -> None:
        """Stop a running search and wait for its bestmove (sent by its thread)."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        self._release.set()
        thread.join()
        self._thread = None
        self._search = None
        self._ponder_go = None


def run_usi(evaluator: Evaluator, stdin: TextIO, stdout: TextIO, name: str = "shogi-dnn",
            backend: str | None = None, stderr: TextIO | None = None) -> int:
    """Speak USI on stdin/stdout until `quit` or end of input. The evaluator starts loading at once, so
    that TensorFlow's import overlaps the GUI's handshake."""
    engine = UsiEngine(evaluator, stdout, name=name, backend=backend, err=stderr)
    engine.start_loading()
    return engine.run(stdin)
