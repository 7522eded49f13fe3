"""The USI protocol: a GUI or a tournament runner talks to the engine through stdin/stdout.

Threads: the caller's thread reads commands line by line (run()); `go` starts the search in its own
thread, so `stop`, `ponderhit`, `isready` and `quit` are answered while it thinks. Output lines are
written whole under a lock. A search started by `go infinite` or `go ponder` holds its `bestmove` until
`stop` (or `ponderhit`, which starts the clock of a ponder search), as USI requires.

Commands (anything else is ignored; an error in a command is one `info string` line, never a crash):
  usi                         id name/author, the options below, usiok
  setoption name N [value V]  sets an option (an unknown name or bad value: one info string)
  isready                     loads and warms the evaluator (the slow part happens here), readyok
  usinewgame, gameover ...    stop any search; nothing else to reset
  position startpos|sfen S [moves ...]   an illegal position or move: one info string, no position
  go [btime wtime binc winc byoyomi movetime nodes depth infinite ponder]   searches, then
                              info depth .. seldepth .. score cp|mate .. nodes .. nps .. time .. [multipv k] pv ..
                              and bestmove MOVE [ponder MOVE] | bestmove resign | bestmove win
  go mate ...                 checkmate notimplemented
  stop, ponderhit, quit

Options:
  USI_Ponder check, USI_Hash spin        accepted for GUIs (the tree lives only during one search)
  MultiPV spin 1..MAX_MULTIPV            root moves reported, best first
  DepthLimit spin 0..64                  0 none; 1 plays the one-ply player (every reply in one batch)
  NodesLimit spin 0..                    0 none; else positions evaluated per move
  ResignValue spin 0..30000              resign when the best score is below -ResignValue cp (0 never)
  EnteringKingRule combo                 search.ENTERING_KING_RULES: declare `bestmove win` when allowed
  NetworkDelay spin ms                   kept back from every time budget (GUI and pipe latency)
Time per move (no movetime): remaining / MOVES_TO_GO + increment + byoyomi - NetworkDelay, at most the
time left plus byoyomi and increment minus NetworkDelay, and at least MIN_SECONDS.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from typing import TextIO

from shogi_dnn import __version__
from shogi_dnn.engine import search as search_lib
from shogi_dnn.engine.players import Evaluator, warm_up
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import BLACK, IllegalMoveError, Position, position_factory

AUTHOR = "shogi-dnn"
MAX_MULTIPV = 32
MOVES_TO_GO = 30
MIN_SECONDS = 0.01
GO_INT_ARGS = ("btime", "wtime", "binc", "winc", "byoyomi", "movetime", "nodes", "depth", "movestogo")


@dataclasses.dataclass
class Options:
    """The engine's USI options (module docstring); names as the GUI sends them."""

    MultiPV: int = 1
    DepthLimit: int = 0
    NodesLimit: int = 0
    ResignValue: int = 0
    EnteringKingRule: str = "CSARule27"
    NetworkDelay: int = 120
    USI_Ponder: bool = False
    USI_Hash: int = 16


_SPIN_RANGES = {"MultiPV": (1, MAX_MULTIPV), "DepthLimit": (0, 64), "NodesLimit": (0, 1 << 40),
                "ResignValue": (0, search_lib.MAX_CP), "NetworkDelay": (0, 10000), "USI_Hash": (1, 1 << 20)}


def option_lines(defaults: Options) -> list[str]:
    """The `option name ...` lines of `usi`."""
    lines = [f"option name USI_Ponder type check default {str(defaults.USI_Ponder).lower()}"]
    for name, (low, high) in _SPIN_RANGES.items():
        lines.append(f"option name {name} type spin default {getattr(defaults, name)} min {low} max {high}")
    rules = " ".join(f"var {r}" for r in search_lib.ENTERING_KING_RULES)
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


def parse_go(tokens: list[str]) -> Go:
    """`go` arguments -> Go. Raises ValueError naming a bad value; unknown words are skipped."""
    values: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        word = tokens[i]
        if word in GO_INT_ARGS and i + 1 < len(tokens):
            try:
                values[word] = max(0, int(tokens[i + 1]))
            except ValueError:
                raise ValueError(f"go {word} {tokens[i + 1]!r}: not an integer") from None
            i += 2
            continue
        if word in ("infinite", "ponder", "mate"):
            values[word] = True
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
        position = factory(sfen)
    except IllegalMoveError as exc:
        raise ValueError(f"position: {exc}") from None
    for ply, move in enumerate(rest[1:], start=1):
        try:
            position.push_usi(move)
        except IllegalMoveError:
            raise ValueError(f"position: move {ply} {move!r} is illegal") from None
    return position


def format_info(info: search_lib.SearchInfo) -> list[str]:
    """`info ...` lines of a search state, one per root line (with `multipv k` when more than one)."""
    lines = []
    for k, line in enumerate(info.lines, start=1):
        score = f"mate {line.mate}" if line.mate is not None else f"cp {line.cp}"
        multipv = f" multipv {k}" if len(info.lines) > 1 else ""
        lines.append(f"info depth {max(1, len(line.pv))} seldepth {info.seldepth}{multipv} score {score} "
                     f"nodes {info.nodes} nps {info.nps} time {int(info.seconds * 1000)} pv {' '.join(line.pv)}")
    return lines


class UsiEngine:
    """The protocol state machine. `evaluator` is loaded at the first `isready`."""

    def __init__(self, evaluator: Evaluator, out: TextIO, name: str = "shogi-dnn",
                 backend: str | None = None, options: Options | None = None) -> None:
        self.evaluator = evaluator
        self.out = out
        self.name = name
        self.factory = position_factory(backend)
        self.options = options or Options()
        self.position: Position | None = self.factory(STANDARD_START_SFEN)
        self._lock = threading.Lock()
        self._ready = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._release = threading.Event()      # bestmove may be sent (not pondering / infinite)
        self._ponder_go: Go | None = None
        self._search: search_lib.Search | None = None

    def send(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def run(self, lines: Iterable[str]) -> int:
        """Handle commands until `quit` or the end of input; returns the exit status (0)."""
        for raw in lines:
            if not self.handle(raw):
                break
        self._finish_search()
        return 0

    def handle(self, raw: str) -> bool:
        """One command line; False after `quit`. Never raises on input."""
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
            handler(args)
        except Exception as exc:        # noqa: BLE001 - a GUI's input must never kill the engine
            self.send(f"info string error: {command}: {exc}")
        return True

    # -- commands ------------------------------------------------------------------------------------

    def _cmd_usi(self, args: list[str]) -> None:
        self.send(f"id name {self.name} {__version__}")
        self.send(f"id author {AUTHOR}")
        for line in option_lines(Options()):
            self.send(line)
        self.send("usiok")

    def _cmd_isready(self, args: list[str]) -> None:
        if not self._ready:
            warm_up(self.evaluator)
            self._ready = True
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
            if value not in search_lib.ENTERING_KING_RULES:
                raise ValueError(f"{name} {value!r}: one of {', '.join(search_lib.ENTERING_KING_RULES)}")
            parsed = value
        setattr(self.options, name, parsed)

    def _cmd_usinewgame(self, args: list[str]) -> None:
        self._finish_search()

    def _cmd_gameover(self, args: list[str]) -> None:
        self._finish_search()

    def _cmd_position(self, args: list[str]) -> None:
        self._finish_search()
        self.position = None
        try:
            self.position = parse_position(args, self.factory)
        except ValueError as exc:
            self.send(f"info string illegal position: {exc}")

    def _cmd_stop(self, args: list[str]) -> None:
        self._finish_search()

    def _cmd_ponderhit(self, args: list[str]) -> None:
        search, go = self._search, self._ponder_go
        if search is None or go is None:
            return
        seconds = move_seconds(go, search.root.position.turn, self.options.NetworkDelay)
        # From now on the ponder search is a normal one: its clock starts here.
        elapsed = time.monotonic() - search._start
        search.limits = dataclasses.replace(search.limits, infinite=False,
                                            seconds=None if seconds is None else elapsed + seconds)
        self._ponder_go = None
        self._release.set()

    def _cmd_go(self, args: list[str]) -> None:
        self._finish_search()
        go = parse_go(args)
        if go.mate:
            self.send("checkmate notimplemented")
            return
        if not self._ready:
            self._cmd_isready_quietly()
        if self.position is None:
            self.send("info string no valid position; resigning")
            self.send("bestmove resign")
            return
        if search_lib.declaration_win(self.position, self.options.EnteringKingRule):
            self.send("bestmove win")
            return
        self._stop.clear()
        self._release.clear()
        if not (go.infinite or go.ponder):
            self._release.set()
        self._ponder_go = go if go.ponder else None
        limits = self._limits(go)
        self._search = search_lib.Search(self.evaluator, self.position, limits, self._stop,
                                         report=lambda info: [self.send(s) for s in format_info(info)],
                                         multipv=self.options.MultiPV)
        self._thread = threading.Thread(target=self._think, args=(self._search,), daemon=True)
        self._thread.start()

    def _cmd_isready_quietly(self) -> None:
        warm_up(self.evaluator)
        self._ready = True

    # -- searching -----------------------------------------------------------------------------------

    def _limits(self, go: Go) -> search_lib.Limits:
        depth = go.depth or self.options.DepthLimit or None
        nodes = go.nodes or self.options.NodesLimit or None
        seconds = None if go.ponder else move_seconds(go, self.position.turn, self.options.NetworkDelay)
        infinite = go.infinite or go.ponder
        if seconds is None and depth is None and nodes is None and not infinite:
            depth = 1                                      # a bare `go`: the one-ply answer
        return search_lib.Limits(nodes=nodes, depth=depth, seconds=seconds, infinite=infinite)

    def _think(self, search: search_lib.Search) -> None:
        try:
            info = search.run()
        except Exception as exc:        # noqa: BLE001 - report, answer, stay alive
            self.send(f"info string error: search: {exc}")
            self._release.wait()
            self.send("bestmove resign")
            return
        for line in format_info(info):
            self.send(line)
        self._release.wait()               # go infinite / ponder: not before stop or ponderhit
        self.send(self._bestmove(info))

    def _bestmove(self, info: search_lib.SearchInfo) -> str:
        if not info.lines:
            return "bestmove resign"
        best = info.lines[0]
        resign = self.options.ResignValue
        if resign and ((best.mate is not None and best.mate < 0) or (best.mate is None and best.cp < -resign)):
            return "bestmove resign"
        ponder = f" ponder {best.pv[1]}" if len(best.pv) > 1 else ""
        return f"bestmove {best.move}{ponder}"

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
            backend: str | None = None) -> int:
    """Speak USI on stdin/stdout until `quit` or end of input."""
    return UsiEngine(evaluator, stdout, name=name, backend=backend).run(stdin)
