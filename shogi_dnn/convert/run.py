"""The `convert` job: record files -> filtered, split, encoded games -> HDF5 shards, manifest and report.

Flow (memory stays flat: one window of files in flight, at most one open shard per split); the
halves live in worker.py (parallel) and writer.py (serial), the filters and the split in filters.py:

  sources.iter_sources --(bytes, in order)--> workers: parse + filter + split + encode one file
      --(results, same order)--> parent: game ids, per-split buffers, shard files, state, report

Determinism: workers only transform one file at a time and results are consumed in input order, so
game ids, shard contents and shard bytes are the same for any number of workers. A shard holds whole
games; it is closed once it holds at least `shard_size` positions and its rows are stored in game order
(default) or shuffled with a seed derived from (seed, split, shard number) (`--row-order shuffled`).

Split: by a stable hash of the game (start SFEN and moves), so reruns give the same split and duplicate
games land in the same split.

Dedup (settings.dedup, default on; --no-dedup): the parent drops a kept game whose hash (start SFEN and
moves) equals an earlier kept game's, across files and formats; it sees results in input order, so the
first copy is kept for any number of workers. Counted as skipped "duplicate" in the report.

Resume: after each shard, DIR/convert-state.json records its sha256 and a digest of its contents, and
after the piece during which it was written, a checkpoint (resume.py: the games kept but not yet in a
shard, the dedup keys, the report's counters). A rerun with the same inputs and settings restores the
checkpoint and skips, unread, every piece before it; without a usable checkpoint it reads the inputs
again but skips writing every shard whose file still matches. A shard cut off mid-write is only ever a
`.tmp` file (write_shard renames it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from shogi_dnn.convert import resume
from shogi_dnn.convert.filters import (
    DRAWS,
    RATING_OF,
    SKIP_DUPLICATE,
    ConvertSettings,
    Deduplicator,
    GameFilter,
    assign_split,
    game_key,
    small_split_warnings,
)
from shogi_dnn.convert.sources import iter_sources, list_files
from shogi_dnn.convert.worker import (
    ARCHIVE_EXPANSION,
    SourcePiece,
    Workers,
    capped_workers_note,
    describe_workers,
    iter_results,
    plan_workers,
    process_file,
    split_source,
)
from shogi_dnn.convert.writer import (
    REPORT_NAME,
    STATE_NAME,
    ConvertReport,
    ConvertState,
    DatasetWriter,
)
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError, KifuError
from shogi_dnn.folders import locks, run_files
from shogi_dnn.kifu import names
from shogi_dnn.rules import resolve_backend
from shogi_dnn.wording import plural, progress_bar

# The job's public names, re-exported so that callers need only `shogi_dnn.convert.run`.
__all__ = ["DRAWS", "RATING_OF", "REPORT_NAME", "STATE_NAME", "ConvertReport", "ConvertSettings",
           "GameFilter", "SourcePiece", "assign_split", "game_key", "iter_results", "process_file",
           "run_convert", "split_source"]

log = logging.getLogger(__name__)

SHARD_PATTERN = re.compile(r"^(train|validation|test)-\d{5}\.h5(\.tmp)?$")


def fingerprint(inputs: Sequence[str | os.PathLike[str]], settings: ConvertSettings) -> str:
    """What a resumed run must share with the interrupted one: the inputs (every file's path, size and
    modification time, so a file added to a folder is noticed), the settings and the schema."""
    files = []
    for path in list_files(inputs):
        stat = path.stat()
        files.append((str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    data = {"inputs": [str(Path(p).resolve()) for p in inputs], "files": files,
            "settings": settings.to_dict(), "schema_version": shards.SCHEMA_VERSION}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _is_output_name(name: str) -> bool:
    """A name convert writes in DIR: a shard, the manifest, report or state (or their temps), a checkpoint."""
    return SHARD_PATTERN.match(name) is not None or resume.is_checkpoint_file(name) or name.removesuffix(
        ".tmp") in (shards.MANIFEST_NAME, REPORT_NAME, STATE_NAME)


def _is_own_dataset(out: Path) -> bool:
    """True when DIR holds a shogi-dnn dataset or conversion: a shogi-dnn manifest.json, or a
    convert-state.json (written first by every conversion). Only then are its files convert's to replace.

    Raises:
        ConfigError: DIR's manifest.json is not a shogi-dnn manifest (shards.foreign_manifest).
    """
    problem = shards.foreign_manifest(out)
    if problem is not None:
        raise ConfigError(f"{out}: its {shards.MANIFEST_NAME} is not a shogi-dnn dataset's ({problem}); "
                          "choose an empty or new --out")
    if (out / shards.MANIFEST_NAME).is_file():
        return True
    try:
        state = json.loads((out / STATE_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(state, dict) and isinstance(state.get("fingerprint"), str) and \
        isinstance(state.get("shards"), dict)


def prepare_output(out: Path, print_: str, overwrite: bool) -> ConvertState:
    """Create DIR or pick up its unfinished conversion. `print_` is this run's fingerprint. --overwrite
    removes only the files of a shogi-dnn dataset (_is_own_dataset); a file named like convert's output in
    a folder that is not one is refused, --overwrite or not.

    Raises:
        ConfigError: DIR holds something else and --overwrite was not given, a manifest.json that is not
            shogi-dnn's, or files named like a dataset's without a shogi-dnn manifest or state.
    """
    out.mkdir(parents=True, exist_ok=True)
    state = ConvertState.load(out, print_)
    if state is not None:
        return state
    own = _is_own_dataset(out)
    named = [p for p in out.iterdir() if _is_output_name(p.name)]
    if named and not own:
        raise ConfigError(f"{out}: not empty and not a shogi-dnn dataset ({named[0].name} without a "
                          f"shogi-dnn {shards.MANIFEST_NAME} or {STATE_NAME}); choose an empty or new --out")
    ours = named if own else []
    others = [p for p in out.iterdir() if p not in ours and p.name not in locks.LOCK_FILES]
    if ours and not overwrite:
        raise ConfigError(f"{out}: holds a dataset converted from other inputs or settings; "
                          "pass --overwrite to replace it or choose another --out")
    if others and not overwrite:
        raise ConfigError(f"{out}: not empty ({others[0].name}, ...); choose an empty or new --out "
                          "(or --overwrite)")
    for path in ours:
        path.unlink()
    state = ConvertState(out / STATE_NAME, print_)
    state.save()        # at once: a run killed before its first shard is still recognised on rerun
    return state


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
    """A progress bar (progress.bar) over files with games/positions in the postfix (silent when disabled)."""

    def __init__(self, total: int | None, enabled: bool) -> None:
        self.bar = progress_bar(total=total, unit="file", enabled=enabled, leave=True)

    def update(self, report: ConvertReport, writer: DatasetWriter) -> None:
        self.bar.update(1)
        if self.bar.n % 16 == 0 or self.bar.n == self.bar.total:
            positions = sum(report.positions.values()) + sum(writer.buffered.values())
            self.bar.set_postfix(games=report.converted, positions=positions, errors=len(report.errors),
                                 refresh=False)

    def close(self) -> None:
        self.bar.close()


class _Interrupts:
    """Ctrl-C and SIGTERM as KeyboardInterrupt, but deferred out of critical sections (shard, state
    and manifest writes): an exception raised while h5py holds its lock can hang the process's exit."""

    def __init__(self) -> None:
        self.depth, self.pending = 0, 0
        self.saved: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:  # noqa: PYI034 - Python 3.10 has no typing.Self
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self.saved[signum] = signal.signal(signum, self._handle)
            except ValueError:      # not the main thread: leave signals alone
                break
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        # Remembered either way: an exception raised while a finalizer runs (multiprocessing's, say) is
        # printed and dropped by Python; the next critical section's end raises it again then.
        self.pending = signum
        if not self.depth:
            raise KeyboardInterrupt(f"signal {signum}")

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if not self.depth and self.pending:
            raise KeyboardInterrupt(f"signal {self.pending}")


def run_convert(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str],
                settings: ConvertSettings | None = None, *, workers: int | None = None,
                backend: str | None = None, overwrite: bool = False, progress: bool = False,
                on_shard: Callable[[shards.ShardInfo], None] | None = None) -> ConvertReport:
    """Convert record files into DIR: shards, manifest.json, convert-report.json (see the module docstring).

    Args:
        settings: filters, split fractions, shard size (default ConvertSettings()).
        workers: worker processes (None: worker.plan_workers decides; <= 1: in-process); the output
            does not depend on it.
        backend: rules backend for encoding ('auto', 'python-shogi', 'cshogi'); neither does it.
        on_shard: called after each shard is written (progress hooks, tests).
    Raises:
        ConfigError: bad settings, a --compression whose HDF5 filter is not installed, or an output folder
            holding something else.
        locks.LockedError: another `convert` is writing DIR (DIR/writer.lock names it), or a `train` or
            `evaluate` is reading it (DIR/readers.lock names them).
        KeyboardInterrupt: Ctrl-C or SIGTERM; finished shards are kept and a rerun resumes.
    """
    out, settings = Path(out), settings or ConvertSettings()
    _check_inputs(inputs)
    if not shards.compression_available(settings.compression):
        name = settings.compression
        raise ConfigError(f"--compression {name}: {shards.missing_filter_hint(name)}; or --compression gzip")
    with locks.acquire(out, locks.WRITER_LOCK, "convert", instead="choose another --out"), \
            locks.replace_dataset(out, "convert"):      # one writer of DIR, and no train or evaluate reads it
        return _run_locked(inputs, out, settings, workers, backend, overwrite, progress, on_shard)


def _run_locked(inputs: Sequence[str | os.PathLike[str]], out: Path, settings: ConvertSettings,
                workers: int | None, backend: str | None, overwrite: bool, progress: bool,
                on_shard: Callable[[shards.ShardInfo], None] | None) -> ConvertReport:
    cores = len(os.sched_getaffinity(0))
    count = plan_workers(workers, cores, _input_bytes(inputs))
    note = capped_workers_note(workers, cores)
    if note:
        log.warning("convert: %s", note)
    report = ConvertReport(backend=resolve_backend(backend), workers=max(count, 1),
                           worker_plan=describe_workers(count))
    state = prepare_output(out, fingerprint(inputs, settings), overwrite)
    previous = _already_complete(out, state)
    if previous is not None:
        log.info("%s: already converted (every shard checks); nothing to do", out)
        done = ConvertReport.from_dict(previous)
        done.earlier_run = True         # its summary must not pass that run's speed off as this one's
        return done
    started = time.perf_counter()
    state.complete = False
    with _Interrupts() as interrupts, Workers(count) as pool:
        writer = DatasetWriter(out, settings, state, report, on_shard, interrupts.critical, pool)
        written = _convert_all(inputs, settings, writer, progress, interrupts.critical)
        report.timings["total_s"] = time.perf_counter() - started
        with interrupts.critical():
            _finish(out, settings, inputs, state, report, written)
    return report


def _input_bytes(inputs: Sequence[str | os.PathLike[str]]) -> int:
    """The inputs' size for plan_workers: archives counted ARCHIVE_EXPANSION times."""
    from shogi_dnn.convert.sources import is_archive
    total = 0
    for path in list_files(inputs):
        with contextlib.suppress(OSError):
            total += path.stat().st_size * (ARCHIVE_EXPANSION if is_archive(str(path)) else 1)
    return total


def _check_inputs(inputs: Sequence[str | os.PathLike[str]]) -> None:
    if not inputs:
        raise ConfigError("no INPUT given (files, folders or archives of game records)")
    missing = [names.from_path(p).text for p in inputs if not Path(p).exists()]
    if missing:        # a typo must not give an empty dataset and exit 0
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ConfigError(f"{missing[0]}: no such file or folder{more}")


def _convert_all(inputs: Sequence[str | os.PathLike[str]], settings: ConvertSettings, writer: DatasetWriter,
                 progress: bool,
                 critical: Callable[[], contextlib.AbstractContextManager[None]]) -> list[shards.ShardInfo]:
    """Stream every piece through the workers into the writer (from the last checkpoint on, if any);
    a checkpoint after a piece during which a shard was written (resume.CHECKPOINT_SECONDS apart), and
    when interrupted (Ctrl-C, SIGTERM) between pieces. The shards in manifest order."""
    report = writer.report
    bar = _Progress(_progress_total(inputs), progress)
    dedup = Deduplicator(settings.dedup)        # decided here, in input order: any worker count alike
    checkpoints = resume.Checkpointer(writer.out, writer.state)
    done, check = _resume(checkpoints, writer, dedup, report)
    pieces = _pieces(inputs, done, check, bar)
    saved, last, adding = done, ("", 0), False
    try:
        for result in writer.pool.results(pieces, settings, report.backend):
            with critical():        # a result is added whole: Ctrl-C / SIGTERM land between pieces
                adding, shards_before = True, writer.flushed
                report.add_file(result)
                for game in result.games:
                    if dedup.is_duplicate(game.key):
                        report.skipped[SKIP_DUPLICATE] += 1
                        continue
                    writer.add(game)
                done, last, adding = done + 1, (result.name, result.first_line), False
                if result.last:
                    bar.update(report, writer)
                if writer.flushed > shards_before and checkpoints.due():
                    writer.drain()
                    checkpoints.save(done, last, writer, dedup, report)
                    saved = done
        return writer.finish()
    except KeyboardInterrupt:
        if not adding and done > saved:      # stopped between pieces: keep everything added so far
            with critical():
                writer.drain()
                checkpoints.save(done, last, writer, dedup, report)
        raise
    finally:
        bar.close()


def _resume(checkpoints: resume.Checkpointer, writer: DatasetWriter, dedup: Deduplicator,
            report: ConvertReport) -> tuple[int, tuple[str, int] | None]:
    """Restore the last checkpoint, if usable: (pieces to skip, the (name, first line) the last of them
    must have); (0, None) to start from the first piece."""
    if writer.state.checkpoint is None:
        return 0, None
    try:
        resumed = checkpoints.load()
    except resume.CheckpointUnusable as exc:
        log.warning("%s: resume checkpoint not used: %s; reading every input again (finished shards "
                    "that still match are kept)", writer.out, exc)
        writer.state.checkpoint, checkpoints.keys_saved = None, 0
        return 0, None
    resume.restore(resumed, writer, dedup, report)
    log.info("%s: resuming after %s (%s converted before the interruption)", writer.out,
             plural(resumed.pieces, "input piece"), plural(report.converted, "game"))
    return resumed.pieces, (str(resumed.last_piece[0]), int(resumed.last_piece[1]))


def _pieces(inputs: Sequence[str | os.PathLike[str]], skip: int = 0, check: tuple[str, int] | None = None,
            bar: _Progress | None = None) -> Iterator[SourcePiece | KifuError]:
    """Every input piece in order, but the first `skip` (already converted: not parsed, only counted
    on the progress bar); the last skipped one must be `check` (name, first line), else ResumeMismatch."""
    index = 0
    for item in iter_sources(inputs):
        for piece in [item] if isinstance(item, KifuError) else split_source(item):
            index += 1
            if index > skip:
                yield piece
                continue
            name, line, last = ((piece.path, 0, True) if isinstance(piece, KifuError)
                                else (piece.name, piece.first_line, piece.last))
            if index == skip and (name, line) != check:
                assert check is not None            # a resume (skip > 0) names its last piece
                raise ConfigError(f"{name}: the inputs are not those of the interrupted run (piece {index} "
                                  f"is not {check[0]}:{check[1]}); convert again with --overwrite")
            if last and bar is not None:
                bar.bar.update(1)


def _finish(out: Path, settings: ConvertSettings, inputs: Sequence[Any], state: ConvertState,
            report: ConvertReport, written: list[shards.ShardInfo]) -> None:
    _remove_stale(out, {s.path for s in written})
    totals = {"games": report.converted, "positions": sum(report.positions.values()),
              "games_per_split": report.games, "positions_per_split": report.positions,
              "games_found": report.games_found, "skipped": dict(sorted(report.skipped.items()))}
    report.warnings = small_split_warnings(report.games, report.positions, settings)
    # readable names (convert/names.py): a path that is not UTF-8 cannot go into the JSON as it is
    manifest_settings = {**settings.to_dict(), "inputs": [names.from_path(p).text for p in inputs]}
    shards.write_manifest(out, written, manifest_settings, totals)
    text = json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
    run_files.write_atomic(out / REPORT_NAME, text)   # no half-written report; a full disk is one line
    state.complete, state.checkpoint = True, None
    state.save()
    resume.remove_files(out)


def _progress_total(inputs: Sequence[str | os.PathLike[str]]) -> int | None:
    from shogi_dnn.convert.sources import is_archive, list_files
    files = list_files(inputs)
    return None if any(is_archive(str(f)) for f in files) else len(files)
