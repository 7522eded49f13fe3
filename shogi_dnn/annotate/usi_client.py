"""A USI engine process driven from Python: start, options, `go nodes N` with a deadline, restart.

The client speaks the few USI commands annotate needs (the engine side of the protocol is
engine/protocol.py's docstring):

  usi -> id name ..., option name ..., usiok        once, at start (START_TIMEOUT)
  setoption name NAME value VALUE                   Threads 1, Hash 16, Contempt 0 (those the engine
                                                    offers, unless already its default), then the
                                                    user's --option NAME=VALUE
  isready -> readyok
  usinewgame, position sfen SFEN, go nodes N        every search, in one write; usinewgame clears the
    -> info ... score cp X | score mate N ..., bestmove M   hash and history tables, so a score does
                                                    not depend on the positions searched before it
                                                    (checked with fairy-stockfish)

The score is the last `info` line's (multipv 1), from the side to move's view as USI reports it: `cp X`
clipped to ±MATE_EVAL, `mate N` as +MATE_EVAL (N > 0, '+') or -MATE_EVAL (N <= 0, '-': the side to move
is mated). A value that is not a whole integer (`cp -1e5`, `cp 1.5`) is no score: the position stays
unlabelled and is counted as `no_score`, like a search that printed none.

Fairy-Stockfish (Debian `fairy-stockfish`, /usr/games) plays shogi by default in USI mode: `usi` selects
the USI protocol and UCI_Variant's default is shogi, so no variant option is sent.

An engine that exits, hangs past the per-position timeout or answers something unusable raises
EngineFailure (kind "crash", "timeout" or "protocol"); the caller kills it (close(): our own child, by
its pid) and starts another. The engine runs in its own session, so a Ctrl-C at the terminal reaches
annotate only, which then stops its engines itself.
"""

from __future__ import annotations

import dataclasses
import os
import re
import select
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, cast

from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.kifu.evals import MATE_EVAL

DEFAULT_ENGINE = "fairy-stockfish"
ENGINE_DIRS = ("/usr/games",)          # Debian installs game engines outside the default PATH
# Sent when the engine offers them: one thread (a fixed-node search is then deterministic), a small
# hash, no contempt (a score symmetric for both sides).
DEFAULT_OPTIONS = (("Threads", "1"), ("Hash", "16"), ("Contempt", "0"))
HASH_BYTES_PER_NODE = 64               # what a search's transposition table needs, generously, per node


def sized_options(nodes: int) -> tuple[tuple[str, str], ...]:
    """DEFAULT_OPTIONS with the hash sized to `nodes` (a power of two of MB, 1 to 16)."""
    # usinewgame clears the whole hash: a 16 MB clear costs more CPU than a 1,000-node search
    megabytes = 1
    while megabytes < 16 and megabytes * (1 << 20) < nodes * HASH_BYTES_PER_NODE:
        megabytes *= 2
    return tuple((k, str(megabytes) if k == "Hash" else v) for k, v in DEFAULT_OPTIONS)
START_TIMEOUT = 10.0                   # seconds for `usi` -> `usiok` and the first `readyok`
_SCORE = re.compile(r"\bscore (cp|mate)(?: (\S*))?")
_INTEGER = re.compile(r"[+-]?\d+")
_OPTION = re.compile(r"^option name (.+?) type \S+(?: default (\S*))?")
CRASH, TIMEOUT, PROTOCOL = "crash", "timeout", "protocol"


class EngineFailure(Exception):
    """The engine exited, hung or answered something unusable; `kind` is CRASH, TIMEOUT or PROTOCOL."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """One search: `score` in centipawns from the side to move's view (±MATE_EVAL for a mate), None when
    the engine printed no score; `bestmove` as USI ('resign', 'win' or '(none)' as the engine said it)."""

    score: int | None
    bestmove: str


def find_engine(name: str = DEFAULT_ENGINE) -> str:
    """The engine's executable: a path, or a name on PATH or in /usr/games.

    Raises:
        ConfigError: not found, or not executable.
    """
    if os.sep in name:
        path = Path(name)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ConfigError(f"engine {name}: no such executable file")
        return str(path.resolve())
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(ENGINE_DIRS))
    if found is None:
        hint = " (Debian/Ubuntu: apt-get install fairy-stockfish)" if name == DEFAULT_ENGINE else ""
        raise ConfigError(f"engine {name!r} not found on PATH or in {', '.join(ENGINE_DIRS)}{hint}")
    return found


def parse_options(texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--option NAME=VALUE` arguments as (name, value) pairs. Raises ConfigError naming a bad one."""
    options = []
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--option {text!r}: expected NAME=VALUE (e.g. --option Hash=64)")
        options.append((name.strip(), value.strip()))
    return tuple(options)


def parse_score(line: str) -> int | None:
    """The score of an `info` line, side to move's view (module docstring), or None when it has none or
    its value is not a whole integer token (`cp -1e5`, `cp 12.5`, `cp 3x`: the position stays unlabelled)."""
    match = _SCORE.search(line)
    if match is None:
        return None
    kind, value = match.group(1), match.group(2) or ""
    if kind == "mate" and value in ("+", "-", ""):
        return MATE_EVAL if value == "+" else -MATE_EVAL
    if _INTEGER.fullmatch(value) is None:
        return None
    if kind == "cp":
        return max(-MATE_EVAL, min(MATE_EVAL, int(value)))
    return MATE_EVAL if int(value) > 0 else -MATE_EVAL


def last_score(lines: Sequence[str]) -> int | None:
    """The score of a search's answer: that of its last `info` line (multipv 1, not `info string`) with
    a `score` (parse_score: None when its value is not a whole integer), or None when none has one."""
    for line in reversed(lines):
        if line.startswith("info ") and " string " not in line and (
                " multipv " not in line or " multipv 1 " in line) and _SCORE.search(line):
            return parse_score(line)
    return None


class UsiEngine:
    """One engine process. Not thread-safe: each worker owns its own."""

    def __init__(self, path: str, options: Sequence[tuple[str, str]] = (),
                 defaults: Sequence[tuple[str, str]] = DEFAULT_OPTIONS) -> None:
        """Start the engine and set `defaults` (where it offers them), then `options`.

        Raises:
            RunError: it cannot be started, or does not answer `usi`/`isready` within START_TIMEOUT.
        """
        self.path = path
        self.name = ""
        self.offered: dict[str, str | None] = {}      # option name -> its default value
        self._buffer = b""
        try:
            self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, bufsize=0, start_new_session=True)
        except OSError as exc:
            raise RunError(f"engine {path}: cannot start it ({exc})") from None
        self._stdin = cast(IO[bytes], self.proc.stdin)          # both pipes: never None
        self._stdout = cast(IO[bytes], self.proc.stdout)
        try:
            self._handshake(defaults, options)
        except EngineFailure as exc:
            self.close()
            raise RunError(f"engine {path}: not a working USI engine ({exc})") from None

    def _handshake(self, defaults: Sequence[tuple[str, str]], options: Sequence[tuple[str, str]]) -> None:
        self._send("usi")
        for line in self._lines_until("usiok", time.monotonic() + START_TIMEOUT):
            if line.startswith("id name "):
                self.name = line[len("id name "):].strip()
            match = _OPTION.match(line)
            if match:
                self.offered[match.group(1)] = match.group(2)
        for name, value in defaults:
            # One already at the engine's default is not sent: Fairy-Stockfish rebuilds its threads
            # and hash for Threads and Hash (about 50 ms of its CPU at each start), to the same state.
            if name in self.offered and self.offered[name] != value:
                self._send(f"setoption name {name} value {value}")
        for name, value in options:
            self._send(f"setoption name {name} value {value}")
        self._send("isready")
        self._lines_until("readyok", time.monotonic() + START_TIMEOUT)

    def search(self, sfen: str, nodes: int, timeout: float) -> SearchResult:
        """`usinewgame`, then search the position at `nodes` nodes; within `timeout` seconds in all.

        Raises:
            EngineFailure: the engine exited, did not finish in time or gave no bestmove.
        """
        return self.go(f"sfen {sfen}", nodes, timeout, new_game=True)

    def go(self, position: str, nodes: int, timeout: float, new_game: bool = False) -> SearchResult:
        """search() of `position POSITION` (`sfen S [moves ...]`); `usinewgame` first when `new_game`."""
        deadline = time.monotonic() + timeout
        # One write, no `isready` round trip: the engine carries out its commands in order, so the
        # search starts after usinewgame's clearing all the same.
        self._send(*(["usinewgame"] if new_game else []), f"position {position}", f"go nodes {nodes}")
        lines = self._lines_until("bestmove", deadline)
        parts = lines[-1].split()
        if len(parts) < 2:
            raise EngineFailure(PROTOCOL, f"bad bestmove line {lines[-1]!r}")
        return SearchResult(last_score(lines[:-1]), parts[1])

    def _send(self, *lines: str) -> None:
        try:
            self._stdin.write("".join(line + "\n" for line in lines).encode())
        except OSError as exc:
            raise EngineFailure(CRASH, f"engine exited (rc={self.proc.poll()}): {exc}") from None

    def _read(self, deadline: float) -> None:
        """Whatever the engine has written (at least a byte), appended to the buffer; waits until
        `deadline` at most."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise EngineFailure(TIMEOUT, "no answer within the time limit")
        fd = self._stdout.fileno()
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            data = os.read(fd, 65536)
            if not data:
                self.proc.wait()
                raise EngineFailure(CRASH, f"engine exited (rc={self.proc.returncode})")
            self._buffer += data

    def _lines_until(self, first_word: str, deadline: float) -> list[str]:
        """The engine's next lines, through the first whose first word is `first_word`."""
        marker = first_word.encode()
        lines: list[str] = []
        while True:
            # Lines are split only once the word has arrived: a search's answer is read in a few
            # pieces, and its info lines are looked at once, in last_score.
            if marker in self._buffer:
                *complete, self._buffer = self._buffer.split(b"\n")
                for k, raw in enumerate(complete):
                    lines.append(raw.decode("utf-8", "replace").rstrip("\r"))
                    if lines[-1].split(" ", 1)[0] == first_word:
                        self._buffer = b"\n".join([*complete[k + 1:], self._buffer])
                        return lines
            self._read(deadline)

    def close(self, graceful: bool = True) -> None:
        """Ask the engine to quit (`graceful`), and kill it (our own child, by its pid) when it has not
        within a second, or at once (not `graceful`: after a failure)."""
        if graceful and self.proc.poll() is None:
            try:
                self._stdin.write(b"quit\n")
                self._stdin.close()
                self.proc.wait(timeout=1.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self._stdin, self._stdout):
            try:
                stream.close()
            except OSError:
                pass
