"""The serial half of `convert`: game ids, per-split buffers, whole-game shards, resume state, report.

A shard holds whole games; it is closed once it holds at least `shard_size` positions and its rows are
stored in game order (settings.row_order "game", the default: consecutive positions of a game compress
2.2x better) or shuffled with a seed derived from (seed, split, shard number) ("shuffled"). After each shard,
DIR/convert-state.json records its sha256 and a digest of its contents: a rerun with the same inputs
and settings skips writing every shard whose file still matches (a shard cut off mid-write is only
ever a `.tmp` file: shards.write_shard renames it when complete).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.convert.filters import ConvertSettings
from shogi_dnn.convert.worker import ConvertedGame, Done, FileResult, Workers
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import EVAL_NONE
from shogi_dnn.folders import run_files
from shogi_dnn.kifu import RECORD_SUFFIXES
from shogi_dnn.wording import plural

REPORT_NAME = "convert-report.json"
STATE_NAME = "convert-state.json"
MAX_LISTED_ERRORS = 100_000        # errors beyond this are counted, not listed, in the report


TIMING_DECIMALS = 6      # seconds in convert-report.json's timings (the summary's rate uses the same)

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
    positions_with_eval: dict[str, int] = dataclasses.field(default_factory=dict)   # an engine evaluation
    games: dict[str, int] = dataclasses.field(default_factory=dict)
    shards: dict[str, int] = dataclasses.field(default_factory=dict)
    shards_reused: int = 0
    timings: dict[str, float] = dataclasses.field(default_factory=lambda: collections.defaultdict(float))
    backend: str = ""
    workers: int = 1                     # worker processes (0: in-process)
    worker_plan: str = ""                # in words (worker.describe_workers)
    peak_rss_worker_mib: float = 0.0     # largest peak memory of one worker (the parent when workers=1)
    worker_cpu: dict[int, float] = dataclasses.field(default_factory=dict, repr=False)   # pid -> CPU s
    # True for the report of a dataset an earlier run finished (convert had nothing to do): its counts and
    # timings are that run's, and the summary says so (not saved: the earlier run's report is the file).
    earlier_run: bool = dataclasses.field(default=False, repr=False)
    resumed: dict[str, int] = dataclasses.field(default_factory=dict)    # pieces, games, positions restored
    # Record fidelity by kind: `repaired:<kind>` (lines the reader repaired, e.g. repaired:csa_board_row),
    # `foul:<format>` (games ending in an illegal move), `repetition:<kind>` (kifu.repetition: games cut
    # at a fourfold repetition, relabelled, or whose claimed repetition did not happen); and the
    # repaired lines themselves (`file: <kind> <where>: <what>`, at most MAX_LISTED_ERRORS).
    fidelity: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    repaired: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)       # filters.small_split_warnings
    # Inputs and archive members not read (files_unreadable), by kind (sources.SKIP_*: nested_too_deep,
    # too_large, decompression_bomb, bad_symlink, unreadable); `errors` names each with its reason.
    inputs_skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConvertReport:
        """A report read back from to_dict()'s JSON (convert-report.json, a resume checkpoint)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        report = cls(**{k: v for k, v in data.items() if k in fields})
        report.skipped = collections.Counter(report.skipped)
        report.fidelity = collections.Counter(report.fidelity)
        report.inputs_skipped = collections.Counter(report.inputs_skipped)
        report.timings = collections.defaultdict(float, report.timings)
        return report

    def add_file(self, result: FileResult) -> None:
        """Count one worker result (its kept games are counted by the writer)."""
        self.files_read += int(result.readable and result.last)
        self.files_unreadable += int(not result.readable)
        if result.input_skipped:
            self.inputs_skipped[result.input_skipped] += 1
        self.games_found += result.found
        self.skipped.update(result.skipped)
        self.fidelity.update(result.fidelity)
        self.repaired.extend(result.repaired[:max(0, MAX_LISTED_ERRORS - len(self.repaired))])
        room = max(0, MAX_LISTED_ERRORS - len(self.errors))
        self.errors.extend(result.errors[:room])
        self.errors_not_listed += len(result.errors) - min(room, len(result.errors))
        self.peak_rss_worker_mib = max(self.peak_rss_worker_mib, round(result.peak_rss_mib, 1))
        if result.pid and result.pid != os.getpid():     # a worker process (its CPU time is cumulative)
            self.worker_cpu[result.pid] = max(self.worker_cpu.get(result.pid, 0.0), result.cpu_s)
            self.timings["worker_cpu_s"] = sum(self.worker_cpu.values())
        self.timings["parse_s"] += result.parse_s
        self.timings["encode_s"] += result.encode_s

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("worker_cpu", "earlier_run")}
        data["skipped"] = dict(sorted(self.skipped.items()))
        data["fidelity"] = dict(sorted(self.fidelity.items()))
        data["inputs_skipped"] = dict(sorted(self.inputs_skipped.items()))
        data["positions_total"] = sum(self.positions.values())
        data["timings"] = {k: round(v, TIMING_DECIMALS) for k, v in sorted(self.timings.items())}
        return data

    def summary(self) -> str:
        """The end summary, a few lines."""
        skipped = ", ".join(f"{k} {v:,}" for k, v in sorted(self.skipped.items())) or "none"
        splits = ", ".join(f"{s} {plural(self.games.get(s, 0), 'game')} / "
                           f"{plural(self.positions.get(s, 0), 'position')} / "
                           f"{plural(self.shards.get(s, 0), 'shard')}"
                           for s in shards.SPLITS if s in self.positions)
        total = round(self.timings.get("total_s", 0.0), TIMING_DECIMALS)   # as saved: a rerun prints the same
        rate = (sum(self.positions.values()) - self.resumed.get("positions", 0)) / total if total else 0.0
        resumed = (f"resumed after {plural(self.resumed['pieces'], 'input piece')} "
                   f"({plural(self.resumed['games'], 'game')} converted before the interruption, "
                   "not read again)\n"
                   if self.resumed else "")
        errors = len(self.errors) + self.errors_not_listed
        fidelity = ", ".join(f"{k} {v:,}" for k, v in sorted(self.fidelity.items()))
        first = f", the first {len(self.errors):,}" if self.errors_not_listed else ""
        workers = self.worker_plan or plural(self.workers, 'worker')
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(self.inputs_skipped.items()))
        unreadable = f"{self.files_unreadable:,} unreadable" + (f": {kinds}" if kinds else "")
        if self.earlier_run:    # nothing was done now: that run's figures, said to be that run's
            resumed = "nothing done now; the earlier run that converted it:\n"
        speed = f"{total:.1f} s, {rate:,.0f} positions/s"
        speed = f"earlier run's time {speed}" if self.earlier_run else speed
        return (resumed + f"{plural(self.files_read, 'file')} read ({unreadable}); "
                f"{plural(self.games_found, 'game')} found, {self.converted:,} converted, "
                f"skipped: {skipped}\n"
                f"{splits or 'no positions written'}\n"
                + (f"record fidelity: {fidelity}\n" if fidelity else "") +
                f"{plural(errors, 'error')}"
                + (f" (listed in {REPORT_NAME}{first})" if errors else "") + "; "
                f"{speed}, backend {self.backend}, {workers}")

    def first_errors(self, count: int = 5) -> list[str]:
        """The console's view of the errors: the first `count` as `file:line: reason`, then how many more."""
        total = len(self.errors) + self.errors_not_listed
        lines = [f"skipped {e}" for e in self.errors[:count]]
        if total > len(lines):
            lines.append(f"... and {plural(total - len(lines), 'more error')} in {REPORT_NAME}")
        return lines

    def nothing_converted(self) -> str | None:
        """Why no game was converted (the reason for a non-zero exit), or None when some were."""
        if self.converted:
            return None
        if not self.files_read and not self.files_unreadable and not self.games_found:
            return (f"no record files found in the inputs ({' '.join(RECORD_SUFFIXES)} files, "
                    "or archives of them)")
        if not self.games_found:
            return f"no game found in {plural(self.files_read + self.files_unreadable, 'file')}"
        if self.games_found == 1:
            return "the one game found was skipped (see the reason above)"
        return f"all {self.games_found:,} games found were skipped (see the reasons above)"


@dataclasses.dataclass
class ConvertState:
    """DIR/convert-state.json: the finished shards of a (possibly interrupted) conversion."""

    path: Path
    fingerprint: str
    shards: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    complete: bool = False
    checkpoint: dict[str, Any] | None = None     # the last resume checkpoint (convert/resume.py)

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
        checkpoint = data.get("checkpoint")
        return cls(path, fingerprint, dict(data.get("shards", {})), bool(data.get("complete")),
                   checkpoint if isinstance(checkpoint, dict) else None)

    def save(self) -> None:
        text = json.dumps({"fingerprint": self.fingerprint, "complete": self.complete, "shards": self.shards,
                           "checkpoint": self.checkpoint}, indent=1) + "\n"
        run_files.write_atomic(self.path, text)

    def matches(self, out: Path, name: str, content: str) -> bool:
        """True when shard `name` was finished with this content and its file is intact."""
        entry = self.shards.get(name)
        path = out / name
        return (entry is not None and entry.get("content") == content and path.is_file()
                and shards.file_sha256(path) == entry.get("sha256"))


@dataclasses.dataclass
class _ShardJob:
    """A shard handed to a worker (or found intact), recorded once its write completes, in order."""

    name: str
    split: str
    positions: int
    games: int
    game_ids: list[int]
    job: Any                   # Workers.submit's handle: (the file's sha256, the content digest)
    reused: bool


def write_and_digest(path: Path, split: str, positions: dict[str, np.ndarray], table: dict[str, list],
                     compression: str = shards.DEFAULT_COMPRESSION) -> tuple[str, str]:
    """Write one shard (`compression`: a shards.COMPRESSIONS name); its file's sha256 and its content
    digest (in a worker process when there is a pool)."""
    return (shards.write_shard(path, split, positions, table, compression=compression),
            _content_digest(positions, table))


class DatasetWriter:
    """Buffers kept games per split and writes whole-game shards in a deterministic order.

    With a worker pool, the parent only assembles each shard (rows, games table, content digest) and a
    worker packs, compresses and writes it, while the others go on parsing: at most `pool.count` shards
    in flight, each recorded (state, manifest entry, on_shard) in order once written. `drain()` waits for
    them all (before a resume checkpoint and at the end).
    """

    def __init__(self, out: Path, settings: ConvertSettings, state: ConvertState, report: ConvertReport,
                 on_shard: Callable[[shards.ShardInfo], None] | None = None,
                 critical: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
                 pool: Workers | None = None) -> None:
        """`critical()` wraps each shard write (the caller defers interrupts out of it); `pool` writes
        the shards (None: here, at once)."""
        self.out, self.settings, self.state, self.report = out, settings, state, report
        self.on_shard = on_shard
        self.critical, self.pool = critical, pool or Workers(0)
        self.buffers: dict[str, list[tuple[int, ConvertedGame]]] = {s: [] for s in shards.SPLITS}
        self.buffered: dict[str, int] = {s: 0 for s in shards.SPLITS}
        self.written: list[shards.ShardInfo] = []
        self.in_flight: collections.deque[_ShardJob] = collections.deque()
        self.next_game_id = 0
        self.flushed = 0               # shards handed out by this run (written or in flight)

    def add(self, game: ConvertedGame) -> None:
        """Give the game the next id; write its split's shard once it is full."""
        self.buffers[game.split].append((self.next_game_id, game))
        self.buffered[game.split] += len(game.positions)
        self.next_game_id += 1
        self.report.converted += 1
        if self.buffered[game.split] >= self.settings.shard_size:
            with self.critical():
                self._flush(game.split)

    def pending(self) -> list[tuple[int, ConvertedGame]]:
        """The kept games not yet in a shard (every split's buffer), in game-id order."""
        return sorted((item for split in shards.SPLITS for item in self.buffers[split]),
                      key=lambda item: item[0])

    def restore(self, next_game_id: int, pending: list[tuple[int, ConvertedGame]],
                written: list[shards.ShardInfo]) -> None:
        """Continue from a resume checkpoint: its buffered games, next game id and finished shards
        (the report's counters are restored by the caller)."""
        self.next_game_id, self.written = next_game_id, list(written)
        self.buffers = {s: [] for s in shards.SPLITS}
        self.buffered = {s: 0 for s in shards.SPLITS}
        for game_id, game in pending:
            self.buffers[game.split].append((game_id, game))
            self.buffered[game.split] += len(game.positions)

    def finish(self) -> list[shards.ShardInfo]:
        """Write the last, partly filled shard of each split; the shards in manifest order."""
        for split in shards.SPLITS:
            if self.buffers[split]:
                with self.critical():
                    self._flush(split)
        self.drain()
        return sorted(self.written, key=lambda s: (shards.SPLITS.index(s.split), s.path))

    def drain(self) -> None:
        """Wait for every shard in flight and record it."""
        with self.critical():
            self._record(wait_all=True)

    def _flush(self, split: str) -> None:
        games, self.buffers[split], self.buffered[split] = self.buffers[split], [], 0
        index = self.report.shards.get(split, 0)
        name = f"{split}-{index:05d}.h5"
        seed = ([self.settings.seed, shards.SPLITS.index(split), index]
                if self.settings.row_order == "shuffled" else None)
        start = time.perf_counter()
        positions, table = _shard_arrays(games, seed)
        reused = False
        if name in self.state.shards:       # a rerun without a usable checkpoint: the same shard again?
            content = _content_digest(positions, table)
            reused = self.state.matches(self.out, name, content)
        job = (Done((self.state.shards[name]["sha256"], content)) if reused
               else self.pool.submit(write_and_digest, self.out / name, split, positions, table,
                                     self.settings.compression))
        self.report.timings["write_s"] += time.perf_counter() - start
        rows = sum(len(g.positions) for _, g in games)
        self.in_flight.append(_ShardJob(name, split, rows, len(games), [i for i, _ in games], job, reused))
        self.flushed += 1
        self.report.shards[split] = index + 1
        self.report.positions[split] = self.report.positions.get(split, 0) + rows
        evaluated = sum(int(np.count_nonzero(g.positions.eval != EVAL_NONE)) for _, g in games)
        self.report.positions_with_eval[split] = self.report.positions_with_eval.get(split, 0) + evaluated
        self.report.games[split] = self.report.games.get(split, 0) + len(games)
        self._record(wait_all=False)

    def _record(self, wait_all: bool) -> None:
        """Record the shards whose writes completed, oldest first (all of them with `wait_all`, and
        the oldest while more than pool.count are in flight)."""
        while self.in_flight and (wait_all or self.in_flight[0].job.ready()
                                  or len(self.in_flight) > max(1, self.pool.count)):
            shard = self.in_flight[0]
            start = time.perf_counter()
            digest, content = self.pool.wait(shard.name, shard.job)
            self.report.timings["write_s"] += time.perf_counter() - start
            self.in_flight.popleft()
            if shard.reused:
                self.report.shards_reused += 1
            else:
                self.state.shards[shard.name] = {"sha256": digest, "content": content}
                self.state.save()
            info = shards.shard_info(self.out / shard.name, shard.split, shard.positions, shard.games, digest,
                                     shard.game_ids)
            self.written.append(info)
            if self.on_shard is not None:
                self.on_shard(info)


def _shard_arrays(games: list[tuple[int, ConvertedGame]], seed: list[int] | None
                  ) -> tuple[dict[str, np.ndarray], dict[str, list]]:
    """Position arrays as the shard stores them (board and hands packed: `pieces`, `promoted`; in
    game order, or rows shuffled by default_rng(seed)) and the games table of one shard.
    `eval` is among the arrays only when some position has an evaluation."""
    encoded = [g.positions for _, g in games]
    fields = ["turn", "ply", "move", "win"]
    if all(e.pieces is not None and e.promoted is not None for e in encoded):
        fields += [shards.KEY_PIECES, shards.KEY_PROMOTED]     # packed by the encoder (the compiled path)
    else:
        fields += [shards.KEY_BOARD, shards.KEY_HANDS]
    positions = {key: np.concatenate([getattr(e, key) for e in encoded]) for key in fields}
    evals = np.concatenate([e.eval for e in encoded])
    if np.any(evals != EVAL_NONE):
        positions[shards.KEY_EVAL] = evals
    positions[shards.KEY_GAME] = np.repeat(np.array([game_id for game_id, _ in games], np.int32),
                                           [len(e) for e in encoded])
    positions = shards.pack_stored(positions)
    positions.pop(shards.KEY_BOARD, None)
    positions.pop(shards.KEY_HANDS, None)
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(positions[shards.KEY_GAME]))
        positions = {key: value[order] for key, value in positions.items()}
    columns = [c for c in shards.GAME_SCHEMA if c != "game_id"]
    table: dict[str, list] = {"game_id": [game_id for game_id, _ in games]}
    for i, column in enumerate(columns):
        table[column] = [g.row[i] for _, g in games]
    # source_raw only when some game's file name is not UTF-8
    raw = [g.row[len(columns)] if len(g.row) > len(columns) else "" for _, g in games]
    if any(raw):
        table[shards.KEY_SOURCE_RAW] = raw
    return positions, table


def _content_digest(positions: dict[str, np.ndarray], table: dict[str, list]) -> str:
    """sha256 of every stored byte of the shard's positions (the packed arrays, as _shard_arrays gives
    them) and of its games table; only ever compared with itself (resume)."""
    digest = hashlib.sha256()
    for key in sorted(positions):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(positions[key]).reshape(-1).view(np.uint8).data)   # no copy
    digest.update(repr(sorted(table.items())).encode("utf-8"))
    return digest.hexdigest()
