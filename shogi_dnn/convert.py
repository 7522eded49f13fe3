"""The `convert` job: record files -> filtered, split, encoded games -> HDF5 shards, manifest and report.

Flow (memory stays flat: one window of files in flight, at most one open shard per split):

  sources.iter_sources --(bytes, in order)--> workers: parse + filter + split + encode one file
      --(results, same order)--> parent: game ids, per-split buffers, shard files, state, report

Determinism: workers only transform one file at a time and results are consumed in input order, so
game ids, shard contents and shard bytes are the same for any number of workers. A shard holds whole
games; it is closed once it holds at least `shard_size` positions and its rows are stored in an order
shuffled with a seed derived from (seed, split, shard number).

Split: by a stable hash of the game (start SFEN and moves), so reruns give the same split and duplicate
games land in the same split.

Resume: after each shard, DIR/convert-state.json records its sha256 and a digest of its contents.
A rerun with the same inputs and settings re-reads the inputs but skips writing every shard whose
file still matches; a shard cut off mid-write is only ever a `.tmp` file (write_shard renames it).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import re
import resource
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn import shards
from shogi_dnn.errors import ConfigError, KifuError, ShogiDnnError
from shogi_dnn.features import EncodedGame, encode_game
from shogi_dnn.kifu import read_record_bytes
from shogi_dnn.kifu.record import Ending, GameRecord, SourceLine, Winner
from shogi_dnn.rules import BACKEND_ENV, position_factory, resolve_backend
from shogi_dnn.sources import SourceFile, iter_sources

log = logging.getLogger(__name__)

REPORT_NAME = "convert-report.json"
STATE_NAME = "convert-state.json"
SHARD_PATTERN = re.compile(r"^(train|validation|test)-\d{5}\.h5(\.tmp)?$")
MAX_LISTED_ERRORS = 100_000        # errors beyond this are counted, not listed, in the report
PIECE_BYTES = 1 << 20              # multi-game CSA files are handed to workers in pieces of about this size
_CSA_SEPARATOR = re.compile(rb"\n/\r?\n")
RATING_OF = ("both", "loser")
DRAWS = ("keep", "drop")
# Skip reasons, in report order.
SKIP_ERROR, SKIP_NO_RESULT, SKIP_RATING, SKIP_MOVES, SKIP_ENDING, SKIP_DRAW = (
    "error", "no_result", "min_rating", "min_moves", "ending", "draw")


@dataclasses.dataclass(frozen=True)
class GameFilter:
    """Which games with a result become training data. Defaults keep every one of them."""

    min_rating: float | None = None    # minimum rating (of both players or of the loser); None = off
    rating_of: str = "both"            # 'both' or 'loser' (a draw has no loser: both then)
    min_moves: int = 0                 # minimum moves in the main line
    endings: frozenset[str] | None = None   # Ending values to keep; None = all endings with a result
    draws: str = "keep"                # 'keep' (label 0.5) or 'drop'

    def __post_init__(self) -> None:
        if self.rating_of not in RATING_OF:
            raise ConfigError(f"--rating-of {self.rating_of!r}: choose from {', '.join(RATING_OF)}")
        if self.draws not in DRAWS:
            raise ConfigError(f"--draws {self.draws!r}: choose from {', '.join(DRAWS)}")
        if self.min_moves < 0:
            raise ConfigError(f"--min-moves {self.min_moves}: must be >= 0")
        known = {e.value for e in Ending}
        unknown = sorted(set(self.endings or ()) - known)
        if unknown:
            raise ConfigError(f"--endings: unknown {', '.join(unknown)} (known: {', '.join(sorted(known))})")

    def skip_reason(self, record: GameRecord) -> str | None:
        """The reason a game is not kept (a SKIP_* name), or None when it is kept."""
        if not record.has_result:
            return SKIP_NO_RESULT
        if self.draws == "drop" and record.winner is Winner.DRAW:
            return SKIP_DRAW
        if self.endings is not None and record.ending.value not in self.endings:
            return SKIP_ENDING
        if len(record.moves) < self.min_moves:
            return SKIP_MOVES
        if self.min_rating is not None and not self._rated_enough(record):
            return SKIP_RATING
        return None

    def _rated_enough(self, record: GameRecord) -> bool:
        ratings = {Winner.BLACK: record.black_rating, Winner.WHITE: record.white_rating}
        if self.rating_of == "loser" and record.winner in ratings:
            loser = Winner.WHITE if record.winner is Winner.BLACK else Winner.BLACK
            rating = ratings[loser]
            return rating is not None and rating >= self.min_rating
        return all(r is not None and r >= self.min_rating for r in ratings.values())


@dataclasses.dataclass(frozen=True)
class ConvertSettings:
    """Everything that decides the output bytes (the worker count and the rules backend do not)."""

    filters: GameFilter = GameFilter()
    val_fraction: float = 0.05         # share of games in the validation split
    test_fraction: float = 0.0         # share of games in the test split (0: no test split)
    shard_size: int = 100_000          # positions per shard (a shard holds whole games: at least this)
    seed: int = 0                      # seed of the within-shard shuffle

    def __post_init__(self) -> None:
        if not (0 <= self.val_fraction and 0 <= self.test_fraction and self.val_fraction + self.test_fraction < 1):
            raise ConfigError(f"--val-fraction {self.val_fraction} + --test-fraction {self.test_fraction}: "
                              "each must be >= 0 and their sum < 1")
        if self.shard_size < 1:
            raise ConfigError(f"--shard-size {self.shard_size}: must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (manifest settings, state fingerprint)."""
        data = dataclasses.asdict(self)
        endings = self.filters.endings
        data["filters"]["endings"] = None if endings is None else sorted(endings)
        return data


def game_key(record: GameRecord) -> bytes:
    """sha1 of the start position and the moves: equal for duplicate games, stable across runs."""
    return hashlib.sha1((record.start_sfen + "\n" + " ".join(record.moves)).encode("utf-8")).digest()


def assign_split(key: bytes, val_fraction: float, test_fraction: float) -> str:
    """'train', 'validation' or 'test' from the game key: a uniform number in [0, 1) from its first 8 bytes."""
    u = int.from_bytes(key[:8], "big") / 2.0 ** 64
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "validation"
    return "train"


@dataclasses.dataclass(frozen=True)
class ConvertedGame:
    """One kept game: its split, its games-table row (without game_id) and its positions."""

    split: str
    row: tuple
    positions: EncodedGame


@dataclasses.dataclass(frozen=True)
class SourcePiece:
    """A file, or a run of whole games of a big multi-game CSA file starting at `first_line`."""

    name: str
    data: bytes
    first_line: int = 1
    last: bool = True          # the file's last piece (counted as a file read)


def split_source(source: SourceFile, piece_bytes: int | None = None) -> Iterator[SourcePiece]:
    """Cut a multi-game CSA file bigger than `piece_bytes` after `/` separator lines, so that one
    worker result (encoded positions) stays small however big the file; other files pass whole."""
    data, start, line = source.data, 0, 1
    piece_bytes = piece_bytes or PIECE_BYTES
    if len(data) <= piece_bytes or not source.name.lower().endswith(".csa"):
        yield SourcePiece(source.name, data)
        return
    while True:
        cut = _CSA_SEPARATOR.search(data, start + piece_bytes)
        if cut is None:
            yield SourcePiece(source.name, data[start:], line, True)
            return
        yield SourcePiece(source.name, data[start:cut.end()], line, False)
        line += data.count(b"\n", start, cut.end())
        start = cut.end()


@dataclasses.dataclass
class FileResult:
    """What a worker made of one file or piece (or of one unreadable input)."""

    name: str
    games: list[ConvertedGame] = dataclasses.field(default_factory=list)
    found: int = 0
    readable: bool = True
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    errors: list[str] = dataclasses.field(default_factory=list)
    parse_s: float = 0.0
    encode_s: float = 0.0
    last: bool = True
    peak_rss_mib: float = 0.0        # the worker process's peak resident memory so far


def _game_row(record: GameRecord) -> tuple:
    nan = float("nan")
    return (record.source.path, record.source.line, record.black, record.white,
            nan if record.black_rating is None else record.black_rating,
            nan if record.white_rating is None else record.white_rating,
            record.winner.value, record.ending.value, len(record.moves), record.start_sfen)


def _read_records(source: SourcePiece, result: FileResult) -> Iterator[GameRecord | KifuError]:
    """The piece's records and errors (lines counted in the whole file), timing the parse. A reader
    bug is reported, never raised: one file must not stop a corpus conversion (the report names it)."""
    records = read_record_bytes(source.data, source.name)
    while True:
        start = time.perf_counter()
        try:
            item = next(records)
        except StopIteration:
            return
        except KifuError as exc:
            item = exc
        except Exception as exc:  # noqa: BLE001 - see the docstring
            item = KifuError(source.name, 0, f"reader failed: {type(exc).__name__}: {exc}")
        finally:
            result.parse_s += time.perf_counter() - start
        yield _shift_lines(item, source.first_line - 1)
        if isinstance(item, KifuError) and item.reason.startswith("reader failed"):
            return


def _shift_lines(item: GameRecord | KifuError, offset: int) -> GameRecord | KifuError:
    if not offset:
        return item
    if isinstance(item, KifuError):
        return KifuError(item.path, item.line + offset if item.line else 0, item.reason, item.ply)
    return dataclasses.replace(item, source=SourceLine(item.source.path, item.source.line + offset))


def process_file(source: SourcePiece | KifuError, settings: ConvertSettings, backend: str) -> FileResult:
    """Parse, filter, split and encode every game of one file or piece (runs in a worker process)."""
    if isinstance(source, KifuError):
        return FileResult(source.path, readable=False, errors=[str(source)])
    with _rules_backend(backend):
        return _process_records(source, settings, position_factory(backend))


@contextlib.contextmanager
def _rules_backend(backend: str) -> Iterator[None]:
    """The readers (rules.new_position) use `backend` too, for this call only."""
    previous = os.environ.get(BACKEND_ENV)
    os.environ[BACKEND_ENV] = backend
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(BACKEND_ENV, None)
        else:
            os.environ[BACKEND_ENV] = previous


def _process_records(source: SourcePiece, settings: ConvertSettings, factory: Callable) -> FileResult:
    result = FileResult(source.name, last=source.last)
    for item in _read_records(source, result):
        if isinstance(item, KifuError):
            result.errors.append(str(item))
            if item.line > 0:           # line 0: the file as a whole (not a record), not a game
                result.found += 1
                result.skipped[SKIP_ERROR] += 1
            continue
        result.found += 1
        reason = settings.filters.skip_reason(item)
        if reason is not None:
            result.skipped[reason] += 1
            continue
        start = time.perf_counter()
        try:
            positions = encode_game(item, factory)
        except ValueError as exc:
            result.errors.append(f"{item.source}: cannot encode: {exc}")
            result.skipped[SKIP_ERROR] += 1
            continue
        finally:
            result.encode_s += time.perf_counter() - start
        split = assign_split(game_key(item), settings.val_fraction, settings.test_fraction)
        result.games.append(ConvertedGame(split, _game_row(item), positions))
    result.peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB
    return result


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C goes to the parent, which stops the pool


@dataclasses.dataclass(frozen=True)
class _Ready:
    """A result made in the parent, queued in order among the workers' pending results."""

    value: FileResult

    def result(self) -> FileResult:
        return self.value


def iter_results(items: Iterable[SourcePiece | KifuError], settings: ConvertSettings, backend: str,
                 workers: int) -> Iterator[FileResult]:
    """FileResults in input order. Workers > 1: a process pool with a bounded window of files in flight.

    Raises:
        ShogiDnnError: a worker process died (killed, out of memory); finished shards are kept.
    """
    if workers <= 1:
        for item in items:
            yield process_file(item, settings, backend)
        return
    window: collections.deque = collections.deque()
    executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver"),
                                   initializer=_worker_init)
    try:
        for item in items:
            if isinstance(item, KifuError):     # nothing to do in a worker (and exceptions pickle badly)
                window.append((item.path, _Ready(process_file(item, settings, backend))))
            else:
                window.append((item.name, executor.submit(process_file, item, settings, backend)))
            if len(window) >= 4 * workers:
                yield _next_result(window)
        while window:
            yield _next_result(window)
    finally:
        _stop(executor)


def _next_result(window: collections.deque) -> FileResult:
    name, pending = window.popleft()
    try:
        return pending.result()
    except BrokenProcessPool as exc:
        raise ShogiDnnError(f"{name}: a worker process died while converting it (killed or out of memory?); "
                            "finished shards are kept: rerun the same command to resume") from exc


def _stop(executor: ProcessPoolExecutor) -> None:
    """Cancel queued work and end the workers now (an interrupt must not wait for their current files)."""
    processes = list(getattr(executor, "_processes", {}).values())   # no public handle on the workers
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)


@dataclasses.dataclass
class ConvertReport:
    """Counts for DIR/convert-report.json and the end summary."""

    files_read: int = 0
    files_unreadable: int = 0
    games_found: int = 0
    converted: int = 0
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    errors: list[str] = dataclasses.field(default_factory=list)
    errors_not_listed: int = 0
    positions: dict[str, int] = dataclasses.field(default_factory=dict)
    games: dict[str, int] = dataclasses.field(default_factory=dict)
    shards: dict[str, int] = dataclasses.field(default_factory=dict)
    shards_reused: int = 0
    timings: dict[str, float] = dataclasses.field(default_factory=lambda: collections.defaultdict(float))
    backend: str = ""
    workers: int = 1
    peak_rss_worker_mib: float = 0.0     # largest peak memory of one worker (the parent when workers=1)

    def add_file(self, result: FileResult) -> None:
        """Count one worker result (its kept games are counted by the writer)."""
        self.files_read += int(result.readable and result.last)
        self.files_unreadable += int(not result.readable)
        self.games_found += result.found
        self.skipped.update(result.skipped)
        room = max(0, MAX_LISTED_ERRORS - len(self.errors))
        self.errors.extend(result.errors[:room])
        self.errors_not_listed += len(result.errors) - min(room, len(result.errors))
        self.peak_rss_worker_mib = max(self.peak_rss_worker_mib, round(result.peak_rss_mib, 1))
        self.timings["parse_s"] += result.parse_s
        self.timings["encode_s"] += result.encode_s

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["skipped"] = dict(sorted(self.skipped.items()))
        data["positions_total"] = sum(self.positions.values())
        data["timings"] = {k: round(v, 3) for k, v in sorted(self.timings.items())}
        return data

    def summary(self) -> str:
        """The end summary, a few lines."""
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "none"
        splits = ", ".join(f"{s} {self.games.get(s, 0)} games / {self.positions.get(s, 0)} positions / "
                           f"{self.shards.get(s, 0)} shards" for s in shards.SPLITS if s in self.positions)
        total = self.timings.get("total_s", 0.0)
        rate = sum(self.positions.values()) / total if total else 0.0
        return (f"files read {self.files_read} (unreadable {self.files_unreadable}); games found "
                f"{self.games_found}, converted {self.converted}, skipped: {skipped}\n"
                f"{splits or 'no positions written'}\n"
                f"{len(self.errors) + self.errors_not_listed} errors (listed in {REPORT_NAME}); "
                f"{total:.1f} s, {rate:,.0f} positions/s, backend {self.backend}, {self.workers} workers")


@dataclasses.dataclass
class ConvertState:
    """DIR/convert-state.json: the finished shards of a (possibly interrupted) conversion."""

    path: Path
    fingerprint: str
    shards: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    complete: bool = False

    @classmethod
    def load(cls, out: Path, fingerprint: str) -> ConvertState | None:
        """The state of an earlier run with this fingerprint, if there is one."""
        path = out / STATE_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
            return None
        return cls(path, fingerprint, dict(data.get("shards", {})), bool(data.get("complete")))

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "complete": self.complete,
                                   "shards": self.shards}, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def matches(self, out: Path, name: str, content: str) -> bool:
        """True when shard `name` was finished with this content and its file is intact."""
        entry = self.shards.get(name)
        path = out / name
        return (entry is not None and entry.get("content") == content and path.is_file()
                and shards.file_sha256(path) == entry.get("sha256"))


class DatasetWriter:
    """Buffers kept games per split and writes whole-game shards in a deterministic order."""

    def __init__(self, out: Path, settings: ConvertSettings, state: ConvertState, report: ConvertReport,
                 on_shard: Callable[[shards.ShardInfo], None] | None = None) -> None:
        self.out, self.settings, self.state, self.report, self.on_shard = out, settings, state, report, on_shard
        self.buffers: dict[str, list[tuple[int, ConvertedGame]]] = {s: [] for s in shards.SPLITS}
        self.buffered: dict[str, int] = {s: 0 for s in shards.SPLITS}
        self.written: list[shards.ShardInfo] = []
        self.next_game_id = 0

    def add(self, game: ConvertedGame) -> None:
        """Give the game the next id; write its split's shard once it is full."""
        self.buffers[game.split].append((self.next_game_id, game))
        self.buffered[game.split] += len(game.positions)
        self.next_game_id += 1
        self.report.converted += 1
        if self.buffered[game.split] >= self.settings.shard_size:
            self._flush(game.split)

    def finish(self) -> list[shards.ShardInfo]:
        """Write the last, partly filled shard of each split; the shards in manifest order."""
        for split in shards.SPLITS:
            if self.buffers[split]:
                self._flush(split)
        return sorted(self.written, key=lambda s: (shards.SPLITS.index(s.split), s.path))

    def _flush(self, split: str) -> None:
        games, self.buffers[split], self.buffered[split] = self.buffers[split], [], 0
        index = self.report.shards.get(split, 0)
        name = f"{split}-{index:05d}.h5"
        positions, table = _shard_arrays(games, np.random.default_rng(
            [self.settings.seed, shards.SPLITS.index(split), index]))
        content = _content_digest(positions, table)
        start = time.perf_counter()
        if self.state.matches(self.out, name, content):
            digest = self.state.shards[name]["sha256"]
            self.report.shards_reused += 1
        else:
            digest = shards.write_shard(self.out / name, split, positions, table)
            self.state.shards[name] = {"sha256": digest, "content": content}
            self.state.save()
        self.report.timings["write_s"] += time.perf_counter() - start
        info = shards.ShardInfo(name, split, len(positions[shards.KEY_WIN]), len(games), digest)
        self.written.append(info)
        self.report.shards[split] = index + 1
        self.report.positions[split] = self.report.positions.get(split, 0) + info.positions
        self.report.games[split] = self.report.games.get(split, 0) + info.games
        if self.on_shard is not None:
            self.on_shard(info)


def _shard_arrays(games: list[tuple[int, ConvertedGame]], rng: np.random.Generator
                  ) -> tuple[dict[str, np.ndarray], dict[str, list]]:
    """Position arrays (rows shuffled by `rng`) and the games table of one shard."""
    fields = ("board", "hands", "turn", "ply", "move", "win")
    positions = {key: np.concatenate([getattr(g.positions, key) for _, g in games]) for key in fields}
    positions[shards.KEY_GAME] = np.concatenate(
        [np.full(len(g.positions), game_id, np.int32) for game_id, g in games])
    order = rng.permutation(len(positions[shards.KEY_GAME]))
    positions = {key: value[order] for key, value in positions.items()}
    columns = [c for c in shards.GAME_SCHEMA if c != "game_id"]
    table: dict[str, list] = {"game_id": [game_id for game_id, _ in games]}
    for i, column in enumerate(columns):
        table[column] = [g.row[i] for _, g in games]
    return positions, table


def _content_digest(positions: dict[str, np.ndarray], table: dict[str, list]) -> str:
    digest = hashlib.sha256()
    for key in sorted(positions):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(positions[key]).tobytes())
    digest.update(repr(sorted(table.items())).encode("utf-8"))
    return digest.hexdigest()


def fingerprint(inputs: Sequence[str | os.PathLike[str]], settings: ConvertSettings) -> str:
    """What a resumed run must share with the interrupted one: the inputs, settings and schema."""
    data = {"inputs": [str(Path(p).resolve()) for p in inputs], "settings": settings.to_dict(),
            "schema_version": shards.SCHEMA_VERSION}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def prepare_output(out: Path, print_: str, overwrite: bool) -> ConvertState:
    """Create DIR or pick up its unfinished conversion. `print_` is this run's fingerprint.

    Raises:
        ConfigError: DIR holds something else and --overwrite was not given.
    """
    out.mkdir(parents=True, exist_ok=True)
    state = ConvertState.load(out, print_)
    if state is not None:
        return state
    ours = [p for p in out.iterdir() if SHARD_PATTERN.match(p.name) or p.name in (
        shards.MANIFEST_NAME, REPORT_NAME, STATE_NAME, shards.MANIFEST_NAME + ".tmp", STATE_NAME + ".tmp")]
    others = [p for p in out.iterdir() if p not in ours]
    if ours and not overwrite:
        raise ConfigError(f"{out}: holds a dataset converted from other inputs or settings; "
                          "pass --overwrite to replace it or choose another --out")
    if others and not overwrite:
        raise ConfigError(f"{out}: not empty ({others[0].name}, ...); choose an empty or new --out "
                          "(or --overwrite)")
    for path in ours:
        path.unlink()
    return ConvertState(out / STATE_NAME, print_)


def _remove_stale(out: Path, keep: set[str]) -> None:
    """Shard files of an earlier, longer attempt and leftover temp files."""
    for path in out.iterdir():
        if SHARD_PATTERN.match(path.name) and path.name not in keep:
            path.unlink()


def _already_complete(out: Path, state: ConvertState) -> dict[str, Any] | None:
    """The earlier report when a finished conversion is still intact (every shard checks)."""
    if not state.complete:
        return None
    try:
        manifest = shards.read_manifest(out)
        report = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    except (shards.ShardFormatError, OSError, json.JSONDecodeError):
        return None
    intact = all(manifest.shard_path(s).is_file() and shards.file_sha256(manifest.shard_path(s)) == s.sha256
                 for s in manifest.shards)
    return report if intact else None


class _Progress:
    """tqdm bar over files with games/positions in the postfix (silent when disabled)."""

    def __init__(self, total: int | None, enabled: bool) -> None:
        from tqdm import tqdm
        self.bar = tqdm(total=total, unit="file", disable=not enabled, dynamic_ncols=True, leave=True)

    def update(self, report: ConvertReport, writer: DatasetWriter) -> None:
        self.bar.update(1)
        if self.bar.n % 16 == 0 or self.bar.n == self.bar.total:
            positions = sum(report.positions.values()) + sum(writer.buffered.values())
            self.bar.set_postfix(games=report.converted, positions=positions, errors=len(report.errors),
                                 refresh=False)

    def close(self) -> None:
        self.bar.close()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_convert(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str],
                settings: ConvertSettings = ConvertSettings(), *, workers: int | None = None,
                backend: str | None = None, overwrite: bool = False, progress: bool = False,
                on_shard: Callable[[shards.ShardInfo], None] | None = None) -> ConvertReport:
    """Convert record files into DIR: shards, manifest.json, convert-report.json (see the module docstring).

    Args:
        workers: parallel worker processes (None: all cores); the output does not depend on it.
        backend: rules backend for encoding ('auto', 'python-shogi', 'cshogi'); neither does it.
        on_shard: called after each shard is written (progress hooks, tests).
    Raises:
        ConfigError: bad settings or an output folder holding something else.
        KeyboardInterrupt: Ctrl-C or SIGTERM; finished shards are kept and a rerun resumes.
    """
    out = Path(out)
    if not inputs:
        raise ConfigError("no INPUT given (files, folders or archives of game records)")
    missing = [str(p) for p in inputs if not Path(p).exists()]
    if missing:        # a typo must not give an empty dataset and exit 0
        raise ConfigError(f"{missing[0]}: no such file or folder" + (f" (and {len(missing) - 1} more)"
                                                                      if len(missing) > 1 else ""))
    workers = max(1, workers or len(os.sched_getaffinity(0)))
    report = ConvertReport(backend=resolve_backend(backend), workers=workers)
    state = prepare_output(out, fingerprint(inputs, settings), overwrite)
    previous = _already_complete(out, state)
    if previous is not None:
        log.info("%s: already converted (every shard checks); nothing to do", out)
        return _report_from_dict(previous)
    started = time.perf_counter()
    state.complete = False
    old_handler = _install_sigterm()
    writer = DatasetWriter(out, settings, state, report, on_shard)
    bar = _Progress(_progress_total(inputs), progress)
    try:
        for result in iter_results(_pieces(inputs), settings, report.backend, workers):
            report.add_file(result)
            for game in result.games:
                writer.add(game)
            if result.last:
                bar.update(report, writer)
        written = writer.finish()
    finally:
        bar.close()
        _restore_sigterm(old_handler)
    report.timings["total_s"] = time.perf_counter() - started
    _finish(out, settings, inputs, state, report, written)
    return report


def _pieces(inputs: Sequence[str | os.PathLike[str]]) -> Iterator[SourcePiece | KifuError]:
    for item in iter_sources(inputs):
        if isinstance(item, KifuError):
            yield item
        else:
            yield from split_source(item)


def _finish(out: Path, settings: ConvertSettings, inputs: Sequence[Any], state: ConvertState,
            report: ConvertReport, written: list[shards.ShardInfo]) -> None:
    _remove_stale(out, {s.path for s in written})
    totals = {"games": report.converted, "positions": sum(report.positions.values()),
              "games_per_split": report.games, "positions_per_split": report.positions,
              "games_found": report.games_found, "skipped": dict(sorted(report.skipped.items()))}
    manifest_settings = {**settings.to_dict(), "inputs": [str(p) for p in inputs]}
    shards.write_manifest(out, written, manifest_settings, totals)
    tmp = out / (REPORT_NAME + ".tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out / REPORT_NAME)
    state.complete = True
    state.save()


def _report_from_dict(data: dict[str, Any]) -> ConvertReport:
    fields = {f.name for f in dataclasses.fields(ConvertReport)}
    report = ConvertReport(**{k: v for k, v in data.items() if k in fields})
    report.skipped = collections.Counter(report.skipped)
    report.timings = collections.defaultdict(float, report.timings)
    return report


def _progress_total(inputs: Sequence[str | os.PathLike[str]]) -> int | None:
    from shogi_dnn.sources import is_archive, list_files
    files = list_files(inputs)
    return None if any(is_archive(str(f)) for f in files) else len(files)


def _install_sigterm() -> Any:
    try:
        return signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:      # not the main thread: leave signals alone
        return None


def _restore_sigterm(handler: Any) -> None:
    if handler is not None:
        signal.signal(signal.SIGTERM, handler)
