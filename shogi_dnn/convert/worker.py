"""The parallel half of `convert`: one file (or one piece of a big multi-game file) in, its kept
games parsed, filtered, split and encoded out, in input order whatever the number of workers.

Workers only transform one piece at a time and `iter_results` hands results back in input order,
with a bounded window of pieces in flight, so memory stays flat and the output is deterministic.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import multiprocessing
import multiprocessing.pool
import os
import re
import resource
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from shogi_dnn.convert import packed_source
from shogi_dnn.convert.filters import SKIP_ERROR, ConvertSettings, assign_split, game_key
from shogi_dnn.convert.sources import SourceFile, skip_kind
from shogi_dnn.dataset import fast_encoding
from shogi_dnn.dataset.features import EncodedGame, encode_game, first_fourfold, repeated_games
from shogi_dnn.errors import KifuError, ShogiDnnError
from shogi_dnn.kifu import read_record_bytes, repetition
from shogi_dnn.kifu.record import Ending, GameRecord, SourceLine
from shogi_dnn.rules import BACKEND_ENV, BLACK, in_check, position_factory

PIECE_BYTES = 1 << 20              # multi-game CSA files are handed to workers in pieces of about this size
_CSA_SEPARATOR = re.compile(rb"\n/\r?\n")


@dataclasses.dataclass(frozen=True)
class ConvertedGame:
    """One kept game: its split, its games-table row (without game_id) and its positions."""

    split: str
    row: tuple
    positions: EncodedGame
    key: bytes = b""           # filters.game_key: the parent drops repeats with it (--dedup)


@dataclasses.dataclass(frozen=True)
class SourcePiece:
    """A file, or a run of whole games of a big multi-game CSA file starting at `first_line`."""

    name: str
    data: bytes
    first_line: int = 1
    last: bool = True          # the file's last piece (counted as a file read)
    raw_name: bytes = b""      # the name's bytes when they are not `name` in UTF-8 (SourceFile.raw_name)


def split_source(source: SourceFile, piece_bytes: int | None = None) -> Iterator[SourcePiece]:
    """Cut a multi-game CSA file bigger than `piece_bytes` after `/` separator lines, so that one
    worker result (encoded positions) stays small however big the file; other files pass whole."""
    data, start, line = source.data, 0, 1
    piece_bytes = piece_bytes or PIECE_BYTES
    if len(data) <= piece_bytes or not source.name.lower().endswith(".csa"):
        yield SourcePiece(source.name, data, raw_name=source.raw_name)
        return
    while True:
        cut = _CSA_SEPARATOR.search(data, start + piece_bytes)
        if cut is None:
            yield SourcePiece(source.name, data[start:], line, True, source.raw_name)
            return
        yield SourcePiece(source.name, data[start:cut.end()], line, False, source.raw_name)
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
    pid: int = 0                     # the process that made this result
    cpu_s: float = 0.0               # that process's CPU time so far (user + system)
    first_line: int = 0              # the piece's first line in its file (0: an unreadable input)
    # What the report lists by kind (convert-report.json `fidelity`): repaired record lines, foul
    # endings (ILLEGAL_MOVE games by format), repetitions cut or refused (kifu.repetition kinds).
    fidelity: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    repaired: list[str] = dataclasses.field(default_factory=list)     # `file:line: what` per repair
    input_skipped: str = ""          # an unreadable input or member: why, as sources.skip_kind says


def _game_row(record: GameRecord, source_raw: str) -> tuple:
    """The games-table row (shards.GAME_SCHEMA without game_id), then `source_raw` (the file name's
    bytes in hex, '' for a UTF-8 name: shards.OPTIONAL_GAME_SCHEMA)."""
    nan = float("nan")
    return (record.source.path, record.source.line, record.black, record.white,
            nan if record.black_rating is None else record.black_rating,
            nan if record.white_rating is None else record.white_rating,
            record.winner.value, record.ending.value, len(record.moves), record.start_sfen, source_raw)


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
        return FileResult(source.path, readable=False, errors=[str(source)], input_skipped=skip_kind(source))
    kind = packed_source.kind_of(source.name)
    if kind is not None:                      # hcpe / PackedSfenValue: positions, not records
        result = FileResult(source.name, last=source.last, first_line=source.first_line)
        started = time.perf_counter()
        result.games = [ConvertedGame(*game) for game in
                        packed_source.convert_rows(source.data, source.name, kind, settings, result)]
        result.encode_s += time.perf_counter() - started
        return result
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
    result = FileResult(source.name, last=source.last, first_line=source.first_line)
    records: list[GameRecord] = []           # the record of each kept game (result.games)
    for item in _read_records(source, result):
        if isinstance(item, KifuError):
            result.errors.append(str(item))
            if item.line > 0:           # line 0: the file as a whole (not a record), not a game
                result.found += 1
                result.skipped[SKIP_ERROR] += 1
            continue
        result.found += 1
        _count_fidelity(item, result)
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
        key = game_key(item)
        split = assign_split(key, settings.val_fraction, settings.test_fraction)
        result.games.append(ConvertedGame(split, _game_row(item, source.raw_name.hex()), positions, key))
        records.append(item)
    start = time.perf_counter()
    _settle_repetitions(result, records, factory)
    result.encode_s += time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result.peak_rss_mib = usage.ru_maxrss / 1024   # Linux: KiB
    result.pid, result.cpu_s = os.getpid(), usage.ru_utime + usage.ru_stime
    return result


SKIP_REPETITION = "unconfirmed_repetition"     # skip reason: 千日手 claimed, no fourfold repetition


def _count_fidelity(record: GameRecord, result: FileResult) -> None:
    """Repairs and foul endings of a read record, for the report."""
    for repair in record.repairs:
        kind = repair.partition(" ")[0]
        result.fidelity[f"repaired:{kind}"] += 1
        result.repaired.append(f"{record.source.path}: {repair}")
    if record.ending is Ending.ILLEGAL_MOVE:
        result.fidelity[f"foul:{record.format}"] += 1


def _settle_repetitions(result: FileResult, records: list[GameRecord], factory: Callable) -> None:
    """Apply the fourfold-repetition rule (kifu.repetition) to the kept games of one piece: a game that
    played on past a fourth occurrence is cut and re-encoded, one whose claimed repetition did not
    happen is dropped (skip reason SKIP_REPETITION, an error line). Candidates come from
    features.repeated_games: with the C extension one hashed pass over each game's packed rows (about
    10 ns a position), else one sort of every position's key for the whole piece."""
    candidates = set(repeated_games([game.positions for game in result.games]))
    candidates.update(i for i, record in enumerate(records) if record.ending in CLAIMED_REPETITION)
    dropped = []
    for index in sorted(candidates):
        game, record = result.games[index], records[index]
        end = first_fourfold(game.positions)
        first, checks = _repeat_span(game.positions, end)
        try:
            settled = repetition.settle(record, end, checks, first)
        except KifuError as exc:                 # a claimed repetition that did not happen
            result.errors.append(str(exc))
            result.skipped[SKIP_REPETITION] += 1
            result.fidelity[f"repetition:{repetition.UNCONFIRMED_CLAIM}"] += 1
            dropped.append(index)
            continue
        if settled.kind:
            result.fidelity[f"repetition:{settled.kind}"] += 1
        if settled.record is not record:
            result.games[index] = dataclasses.replace(game, row=_game_row(settled.record, game.row[-1]),
                                                      positions=encode_game(settled.record, factory))
    for index in reversed(dropped):
        del result.games[index]


def _repeat_span(positions, end: int) -> tuple[int, list[bool] | None]:
    """The first of the four occurrences and, from it to `end`, whether the side to move is in check
    (read off the encoded boards, side to move's view: no replay); (-1, None) without a repetition."""
    if end < 0:
        return -1, None
    board, hands, turn = positions.board[:end + 1], positions.hands[:end + 1], positions.turn[:end + 1]
    same = (board == board[end]).all(axis=1) & (hands == hands[end]).all(axis=1) & (turn == turn[end])
    first = int(np.argmax(same))                                     # the first row equal to row `end`
    if fast_encoding.in_check_rows is not None:
        flags = fast_encoding.in_check_rows(np.ascontiguousarray(board[first:]))
        return first, [False] * first + [bool(flag) for flag in flags]
    return first, [False] * first + [in_check(board[i].tolist(), BLACK) for i in range(first, end + 1)]


CLAIMED_REPETITION = (Ending.SENNICHITE, Ending.OUTE_SENNICHITE)


@dataclasses.dataclass(frozen=True)
class TrainedGame:
    """One record as convert trains it (`inspect` shows this): `record` is the game convert encodes (cut
    and relabelled by the fourfold-repetition rule, or the record itself), None when convert skips it.

    skip: the skip reason (a SKIP_* name) when skipped; repetition: kifu.repetition's kind of change ('' when
    none); plies_cut: moves cut off the record; detail: the error of a skipped game (unconfirmed claim,
    a move that cannot be encoded)."""

    record: GameRecord | None
    skip: str = ""
    repetition: str = ""
    plies_cut: int = 0
    detail: str = ""


def trained_game(record: GameRecord, settings: ConvertSettings,
                 factory: Callable | None = None) -> TrainedGame:
    """What convert makes of one readable record: the same filters, encoding and repetition rule as
    _process_records (which finds the repetition candidates of a whole piece at once; this checks one
    game). The --dedup skip is the caller's: it depends on the games before this one."""
    reason = settings.filters.skip_reason(record)
    if reason is not None:
        return TrainedGame(None, reason)
    try:
        positions = encode_game(record) if factory is None else encode_game(record, factory)
    except ValueError as exc:
        return TrainedGame(None, SKIP_ERROR, detail=f"cannot encode: {exc}")
    end = first_fourfold(positions)
    if end < 0 and record.ending not in CLAIMED_REPETITION:
        return TrainedGame(record)
    first, checks = _repeat_span(positions, end)
    try:
        settled = repetition.settle(record, end, checks, first)
    except KifuError as exc:                     # a claimed repetition that did not happen
        return TrainedGame(None, SKIP_REPETITION, detail=exc.reason)
    return TrainedGame(settled.record, repetition=settled.kind, plies_cut=settled.plies_cut)


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C goes to the parent, which stops the pool


@dataclasses.dataclass(frozen=True)
class Done:
    """A value made in the parent, queued in order among the workers' pending jobs (same interface)."""

    value: Any

    def ready(self) -> bool:
        return True

    def get(self, timeout: float | None = None) -> Any:
        return self.value


POOL_MIN_BYTES = 8 << 20          # default workers: inputs smaller than this are converted in-process
ARCHIVE_EXPANSION = 10            # an archive's bytes count this many times (records compress 5-20x)


def plan_workers(requested: int | None, cores: int, input_bytes: int) -> int:
    """Worker processes for a conversion (0: in-process): `--workers N` as asked (N <= 1: in-process)
    up to the cores (capped_workers_note says so); by default in-process on 1 or 2 cores or for inputs
    under POOL_MIN_BYTES (archives counted ARCHIVE_EXPANSION times), else cores - 1 (the parent, which
    assembles the shards, needs a core).

    Measured on 2 cores (a corpus of 1.26M positions, 12 MB, 8 alternated runs): in-process 2.2-2.9 s
    (median 2.31); the inputs parsed in-process with one worker writing the shards 1.9-2.5 s (median
    2.31: no gain once the two share the cores); 2 workers and the parent 2.4-2.5 s. The GNU Shogi
    corpus (2.4 MB): 2 workers 1.04-1.13 s against 0.68-0.85 s in-process (start-up and pipes).
    With a pool the parent only concatenates each shard's rows and hands them to a worker (packing,
    compression and digests are the workers'): 0.7 CPU-s of the 2.5 of a 1.26M-position run, so
    cores - 1 workers on more cores (not measured here: this machine has 2).
    """
    if requested is not None:
        return min(requested, max(cores, 1)) if requested > 1 else 0
    if cores <= 2 or input_bytes < POOL_MIN_BYTES:
        return 0
    return cores - 1


def capped_workers_note(requested: int | None, cores: int) -> str | None:
    """The line convert prints when plan_workers capped `--workers N` at the cores, else None.

    More processes than cores only take turns on them, each with its own interpreter and buffers:
    `--workers 64` on 2 cores takes 2.5 GB and runs 40 times slower than the default.
    """
    if requested is None or requested <= max(cores, 1):
        return None
    return (f"--workers {requested} capped at {max(cores, 1)}, the CPU cores this process may use "
            f"(more processes than cores only take turns on them, each with its own memory)")


def describe_workers(count: int) -> str:
    """The report's and the summary's words for a plan_workers count."""
    return "in-process" if count == 0 else f"{count} worker{'s' if count > 1 else ''}"


class Workers:
    """In-process (count <= 1) or a process pool, for the pieces and for shard writes.

    `results` gives the pieces' FileResults in input order with a bounded window in flight;
    `submit` runs a job (a shard write) in a worker, queued behind the pieces already handed out;
    `wait` returns its value. Leaving the `with` block ends the pool at once (an interrupt included).
    """

    def __init__(self, count: int) -> None:
        """`count` worker processes (0: none, all work in this process)."""
        self.count = count
        self.pool: multiprocessing.pool.Pool | None = None
        self.pids: frozenset[int] = frozenset()

    def __enter__(self) -> Workers:  # noqa: PYI034 - Python 3.10 has no typing.Self
        if self.count > 0:
            # multiprocessing.Pool, not ProcessPoolExecutor: terminate() ends it at once on an interrupt,
            # where an executor whose workers were killed can hang the interpreter's exit.
            self.pool = multiprocessing.get_context("forkserver").Pool(self.count, initializer=_worker_init)
            self.pids = _worker_pids(self.pool)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def submit(self, fn: Callable, *args: object) -> Any:
        """Run fn(*args) in a worker (at once, here, without a pool); a handle for `wait`."""
        if self.pool is None:
            return Done(fn(*args))
        return self.pool.apply_async(fn, args)

    def wait(self, name: str, pending: Any) -> Any:
        """The job's value. Pool silently replaces a dead worker and its task never completes, so while
        waiting, a changed set of worker processes means one died: stop with a message.

        Raises:
            ShogiDnnError: a worker process died (killed, out of memory); finished shards are kept.
        """
        while not pending.ready():
            try:
                return pending.get(timeout=0.5)
            except multiprocessing.TimeoutError:
                if self.pids and _worker_pids(self.pool) != self.pids:
                    raise ShogiDnnError(f"{name}: a worker process died (killed or out of memory?) "
                                        "while this file or one after it was being converted; finished "
                                        "shards are kept: rerun the same command to resume") from None
        return pending.get()

    def results(self, items: Iterable[SourcePiece | KifuError], settings: ConvertSettings,
                backend: str) -> Iterator[FileResult]:
        """FileResults in input order; with a pool, at most 4 x count pieces in flight."""
        window: collections.deque = collections.deque()
        limit = 4 * self.count if self.pool is not None else 1
        for item in items:
            if isinstance(item, KifuError):     # nothing to do in a worker (and exceptions pickle badly)
                window.append((item.path, Done(process_file(item, settings, backend))))
            else:
                window.append((item.name, self.submit(process_file, item, settings, backend)))
            if len(window) >= limit:
                yield self.wait(*window.popleft())
        while window:
            yield self.wait(*window.popleft())


def iter_results(items: Iterable[SourcePiece | KifuError], settings: ConvertSettings, backend: str,
                 workers: int) -> Iterator[FileResult]:
    """FileResults in input order, from a Workers of its own (see Workers.results)."""
    with Workers(plan_workers(workers, 1, 0)) as pool:
        yield from pool.results(items, settings, backend)


def _worker_pids(pool: Any) -> frozenset[int]:
    return frozenset(p.pid for p in getattr(pool, "_pool", ()))   # no public handle on the workers
