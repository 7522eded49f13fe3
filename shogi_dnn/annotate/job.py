"""The `annotate` job: a dataset folder -> engine labels -> an annotated dataset folder (output.py).

Flow: the plan (plan.py: chunks, the off-path draw; from the manifest and the settings alone) ->
`workers` threads, each with its own engine process (worker.py: a fresh one per chunk), take the chunks
in order and save each finished chunk atomically as DIR/annotate-chunks/NNNNNN.npz -> once every chunk
is done, the shards, manifest.json and annotate-report.json are written (output.py). The threads only
wait on their engines, which search in their own processes, so threads are enough for parallel engines.

Determinism: a chunk's labels depend on the chunk alone (plan.py, worker.py), so the output is the same
for any worker count, and for a run interrupted and resumed.

Resume: DIR/annotate-state.json holds the plan's fingerprint (the source shards, the settings, the
engine); a rerun with the same fingerprint keeps every finished chunk file and every shard already
written intact, and does the rest. Ctrl-C or SIGTERM stops the workers between positions (a position
being searched finishes first, at most --timeout), keeps the finished chunks and raises Interrupted;
a kill -9 loses at most the chunks in flight. A finished job's chunk files are removed.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import json
import logging
import os
import queue
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.annotate.output import (
    CHUNKS_DIR,
    OFF_PATH_PREFIX,
    REPORT_NAME,
    STATE_NAME,
    AnnotateReport,
    AnnotateState,
    write_output,
)
from shogi_dnn.annotate.plan import AnnotateSettings, Chunk, Plan, fingerprint, make_plan
from shogi_dnn.annotate.usi_client import DEFAULT_ENGINE, UsiEngine, find_engine
from shogi_dnn.annotate.worker import ChunkResult, Labeller, Stopped, label_chunk
from shogi_dnn.dataset import identity, shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.folders import locks, run_files
from shogi_dnn.wording import progress_bar

log = logging.getLogger(__name__)

_OURS = re.compile(rf"^((train|validation|test)-\d{{5}}|{OFF_PATH_PREFIX}\d{{5}})\.h5(\.tmp)?$")
_OUR_FILES = {shards.MANIFEST_NAME, STATE_NAME, REPORT_NAME, CHUNKS_DIR}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: `done` of `total` chunks are saved in the output folder."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"{done} of {total} chunks done")
        self.done, self.total = done, total


def run_annotate(source: str | os.PathLike[str], out: str | os.PathLike[str],
                 settings: AnnotateSettings | None = None, *, engine: str = DEFAULT_ENGINE, workers: int = 1,
                 overwrite: bool = False, progress: bool = False) -> AnnotateReport:
    """Annotate the dataset folder `source` into `out` (module docstring; output.py: the folder).

    Args:
        engine: a USI engine's path, or its name on PATH (or in /usr/games).
        workers: engine processes searching at once (the output does not depend on it).
    Raises:
        ConfigError: a bad setting, engine name or output folder; ShardFormatError: a bad source dataset;
        RunError: the engine does not work; locks.LockedError: another job writes `out` or `source`;
        Interrupted: Ctrl-C or SIGTERM (finished chunks are kept: rerun to continue).
    """
    settings = settings or AnnotateSettings()
    settings.check()
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {workers})")
    source, out = Path(source), Path(out)
    manifest = shards.read_manifest(source)
    if out.resolve() == source.resolve():
        raise ConfigError(f"{out}: the output folder must not be the source dataset")
    if settings.off_path and not manifest.split("train"):
        raise ConfigError(f"{source}: no train split to make off-path positions from")
    path = find_engine(engine)
    probe = UsiEngine(path, settings.options)           # a missing or broken engine fails here, at once
    name = probe.name
    probe.close()
    plan = make_plan(manifest, settings)
    report = AnnotateReport(engine=path, engine_name=name, nodes=settings.nodes, workers=workers,
                            chunks=len(plan.chunks))
    # one of the source's readers (a `convert --overwrite` of it is refused, naming us), `out`'s one writer
    with locks.read_dataset(source, "annotate"), \
            locks.acquire(out, locks.WRITER_LOCK, "annotate", instead="choose another --out"), \
            locks.replace_dataset(out, "annotate"):
        state = prepare_output(out, fingerprint(plan, path, name), overwrite)
        previous = _already_complete(out, state)
        if previous is not None:
            log.info("%s: already annotated (every shard checks); nothing to do", out)
            return previous
        _label_all(plan, out, path, report, progress)
        annotate = {**settings.to_dict(), "engine": path, "engine_name": name,
                    "source": identity.dataset_identity(manifest).to_dict()}
        with _deferred_signals() as between:
            write_output(plan, out, lambda chunk: load_chunk(out, chunk), state, report, annotate, between)
            state.complete = True
            state.save()
            shutil.rmtree(out / CHUNKS_DIR, ignore_errors=True)
    return report


def prepare_output(out: Path, print_: str, overwrite: bool) -> AnnotateState:
    """Create `out`, or pick up its unfinished (or finished) annotate with the same fingerprint.

    Raises:
        ConfigError: `out` holds something else and `overwrite` was not given, or a manifest.json that
            is not shogi-dnn's (overwrite or not).
    """
    out.mkdir(parents=True, exist_ok=True)
    state = AnnotateState.load(out, print_)
    if state is not None:
        return state
    problem = shards.foreign_manifest(out)
    if problem is not None:                 # its files are someone else's: never replaced
        raise ConfigError(f"{out}: its {shards.MANIFEST_NAME} is not a shogi-dnn dataset's ({problem}); "
                          "choose an empty or new --out")
    ours = [p for p in out.iterdir() if _OURS.match(p.name) or p.name.removesuffix(".tmp") in _OUR_FILES]
    others = [p for p in out.iterdir() if p not in ours and p.name not in locks.LOCK_FILES]
    if ours and not overwrite:
        raise ConfigError(f"{out}: holds a dataset (from another source, settings or engine); pass "
                          "--overwrite to replace it or choose another --out")
    if others and not overwrite:
        raise ConfigError(f"{out}: not empty ({others[0].name}, ...); choose an empty or new --out")
    for path in ours:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    state = AnnotateState(out / STATE_NAME, print_)
    state.save()
    return state


def _already_complete(out: Path, state: AnnotateState) -> AnnotateReport | None:
    if not state.complete or not all(state.intact(out, name) for name in state.shards):
        return None
    try:
        shards.read_manifest(out)
        data = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    except (shards.ShardFormatError, OSError, ValueError):
        return None
    fields = {f.name for f in dataclasses.fields(AnnotateReport)}
    report = AnnotateReport(**{k: v for k, v in data.items() if k in fields})
    report.counts = collections.Counter(report.counts)
    return report


def chunk_path(out: Path, chunk: Chunk) -> Path:
    return out / CHUNKS_DIR / f"{chunk.index:06d}.npz"


def load_chunk(out: Path, chunk: Chunk) -> ChunkResult:
    """A finished chunk's result. Raises OSError or ValueError when the file is missing or damaged."""
    with np.load(chunk_path(out, chunk), allow_pickle=False) as data:
        return ChunkResult.from_npz({key: data[key] for key in data.files})


def save_chunk(out: Path, chunk: Chunk, result: ChunkResult) -> None:
    """Write a chunk's result through run_files' atomic write: the file exists only when whole."""
    buffer = io.BytesIO()
    np.savez(buffer, **result.to_npz())
    path = chunk_path(out, chunk)
    run_files.write_atomic(path, buffer.getvalue(), tmp=path.with_name(path.name + ".tmp"))


def _finished(plan: Plan, out: Path, report: AnnotateReport) -> set[int]:
    """The chunks an earlier run finished (their files load), counted into the report."""
    done = set()
    for chunk in plan.chunks:
        if chunk_path(out, chunk).is_file():
            try:
                result = load_chunk(out, chunk)
            except (OSError, ValueError, KeyError):
                continue                      # damaged: done again
            report.add(result, chunk, plan)
            done.add(chunk.index)
    report.chunks_resumed = len(done)
    return done


def _label_all(plan: Plan, out: Path, engine: str, report: AnnotateReport, progress: bool) -> None:
    """Label every chunk not finished yet, `report.workers` engines at once."""
    (out / CHUNKS_DIR).mkdir(exist_ok=True)
    done = _finished(plan, out, report)
    todo = collections.deque(c for c in plan.chunks if c.index not in done)
    if done:
        log.info("%s: resuming: %d of %d chunks were done before", out, len(done), len(plan.chunks))
    bar = progress_bar(total=sum(c.size for c in plan.chunks),
                       initial=sum(c.size for c in plan.chunks if c.index in done), unit="position",
                       enabled=progress)
    started = time.perf_counter()
    stop, results = threading.Event(), queue.Queue()
    lock = threading.Lock()
    threads = [threading.Thread(target=_work, args=(plan, out, engine, todo, lock, stop, results),
                                daemon=True) for _ in range(min(report.workers, max(1, len(todo))))]
    error: BaseException | None = None
    remaining = len(todo)                 # counted before the workers take from it
    with _stop_on_signals(stop) as interrupted:
        for thread in threads:
            thread.start()
        while remaining and error is None and not interrupted:
            try:
                kind, chunk, value = results.get(timeout=0.2)
            except queue.Empty:
                if not any(thread.is_alive() for thread in threads) and results.empty():
                    break             # cannot happen: a worker reports its end, error or not; no hang if so
                continue
            if kind == "error":
                error = value
                break
            report.add(value, chunk, plan)
            report.positions_searched += sum(value.counts.get(k, 0) for k in ("searched", "crash", "timeout",
                                                                                "protocol"))
            done.add(chunk.index)
            remaining -= 1
            bar.update(chunk.size)
            bar.set_postfix(failed=report.failed, refresh=False)
        stop.set()
        for thread in threads:
            thread.join()
    bar.close()
    report.seconds = time.perf_counter() - started
    if error is not None:
        raise error
    if interrupted:
        finished = sum(1 for c in plan.chunks if chunk_path(out, c).is_file())
        raise Interrupted(finished, len(plan.chunks))


def _work(plan: Plan, out: Path, engine: str, todo: collections.deque, lock: threading.Lock,
          stop: threading.Event, results: queue.Queue) -> None:
    """One worker thread: the next chunk in plan order, labelled, saved, reported; until none is left."""
    labeller = Labeller(engine, plan, stop)
    try:
        while not stop.is_set():
            with lock:
                if not todo:
                    return
                chunk = todo.popleft()
            result = label_chunk(chunk, labeller)
            save_chunk(out, chunk, result)
            results.put(("done", chunk, result))
    except Stopped:
        return
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
        stop.set()
        results.put(("error", None, exc))
    finally:
        labeller.close(graceful=False)


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[list[int]]:
    """SIGINT and SIGTERM set `stop`; the yielded list holds the signals received (empty: none)."""
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        received.append(signum)
        stop.set()

    with _signals(handle):
        yield received


@contextlib.contextmanager
def _deferred_signals() -> Iterator[Any]:
    """While the shards are written: a signal is remembered and raised as KeyboardInterrupt between two
    shards (the yielded callable), never in the middle of an HDF5 write."""
    received: list[int] = []

    def between() -> None:
        if received:
            raise KeyboardInterrupt(f"signal {received[0]}")

    with _signals(lambda signum, frame: received.append(signum)):
        yield between


@contextlib.contextmanager
def _signals(handler: Any) -> Iterator[None]:
    saved = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            saved[signum] = signal.signal(signum, handler)
        except ValueError:              # not the main thread: leave signals alone
            break
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)
