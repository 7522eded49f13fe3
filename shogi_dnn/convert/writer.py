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

from shogi_dnn import shards
from shogi_dnn.convert.filters import ConvertSettings
from shogi_dnn.convert.worker import ConvertedGame, FileResult
from shogi_dnn.errors import disk_full, is_disk_full
from shogi_dnn.features import EVAL_NONE
from shogi_dnn.kifu import RECORD_SUFFIXES
from shogi_dnn.wording import plural

REPORT_NAME = "convert-report.json"
STATE_NAME = "convert-state.json"
MAX_LISTED_ERRORS = 100_000        # errors beyond this are counted, not listed, in the report


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
    workers: int = 1
    peak_rss_worker_mib: float = 0.0     # largest peak memory of one worker (the parent when workers=1)
    worker_cpu: dict[int, float] = dataclasses.field(default_factory=dict, repr=False)   # pid -> CPU s

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
        if result.pid and result.pid != os.getpid():     # a worker process (its CPU time is cumulative)
            self.worker_cpu[result.pid] = max(self.worker_cpu.get(result.pid, 0.0), result.cpu_s)
            self.timings["worker_cpu_s"] = sum(self.worker_cpu.values())
        self.timings["parse_s"] += result.parse_s
        self.timings["encode_s"] += result.encode_s

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "worker_cpu"}
        data["skipped"] = dict(sorted(self.skipped.items()))
        data["positions_total"] = sum(self.positions.values())
        data["timings"] = {k: round(v, 3) for k, v in sorted(self.timings.items())}
        return data

    def summary(self) -> str:
        """The end summary, a few lines."""
        skipped = ", ".join(f"{k} {v:,}" for k, v in sorted(self.skipped.items())) or "none"
        splits = ", ".join(f"{s} {plural(self.games.get(s, 0), 'game')} / "
                           f"{plural(self.positions.get(s, 0), 'position')} / {plural(self.shards.get(s, 0), 'shard')}"
                           for s in shards.SPLITS if s in self.positions)
        total = self.timings.get("total_s", 0.0)
        rate = sum(self.positions.values()) / total if total else 0.0
        errors = len(self.errors) + self.errors_not_listed
        return (f"{plural(self.files_read, 'file')} read ({self.files_unreadable:,} unreadable); "
                f"{plural(self.games_found, 'game')} found, {self.converted:,} converted, skipped: {skipped}\n"
                f"{splits or 'no positions written'}\n"
                f"{plural(errors, 'error')}"
                + (f" (listed in {REPORT_NAME}{', the first ' + format(len(self.errors), ',') if self.errors_not_listed else ''})"
                   if errors else "") + "; "
                f"{total:.1f} s, {rate:,.0f} positions/s, backend {self.backend}, {plural(self.workers, 'worker')}")

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
            return f"no record files found in the inputs ({' '.join(RECORD_SUFFIXES)} files, or archives of them)"
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
        text = json.dumps({"fingerprint": self.fingerprint, "complete": self.complete, "shards": self.shards},
                          indent=1) + "\n"
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if is_disk_full(exc):
                raise disk_full(self.path, len(text)) from None
            raise

    def matches(self, out: Path, name: str, content: str) -> bool:
        """True when shard `name` was finished with this content and its file is intact."""
        entry = self.shards.get(name)
        path = out / name
        return (entry is not None and entry.get("content") == content and path.is_file()
                and shards.file_sha256(path) == entry.get("sha256"))


class DatasetWriter:
    """Buffers kept games per split and writes whole-game shards in a deterministic order."""

    def __init__(self, out: Path, settings: ConvertSettings, state: ConvertState, report: ConvertReport,
                 on_shard: Callable[[shards.ShardInfo], None] | None = None,
                 critical: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext) -> None:
        """`critical()` wraps each shard write (the caller defers interrupts out of it)."""
        self.out, self.settings, self.state, self.report, self.on_shard = out, settings, state, report, on_shard
        self.critical = critical
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
            with self.critical():
                self._flush(game.split)

    def finish(self) -> list[shards.ShardInfo]:
        """Write the last, partly filled shard of each split; the shards in manifest order."""
        for split in shards.SPLITS:
            if self.buffers[split]:
                with self.critical():
                    self._flush(split)
        return sorted(self.written, key=lambda s: (shards.SPLITS.index(s.split), s.path))

    def _flush(self, split: str) -> None:
        games, self.buffers[split], self.buffered[split] = self.buffers[split], [], 0
        index = self.report.shards.get(split, 0)
        name = f"{split}-{index:05d}.h5"
        rng = (np.random.default_rng([self.settings.seed, shards.SPLITS.index(split), index])
               if self.settings.row_order == "shuffled" else None)
        positions, table = _shard_arrays(games, rng)
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
        info = shards.shard_info(self.out / name, split, len(positions[shards.KEY_WIN]), len(games), digest,
                                 table["game_id"])
        self.written.append(info)
        self.report.shards[split] = index + 1
        self.report.positions[split] = self.report.positions.get(split, 0) + info.positions
        evals = positions.get(shards.KEY_EVAL)
        evaluated = 0 if evals is None else int(np.count_nonzero(evals != EVAL_NONE))
        self.report.positions_with_eval[split] = self.report.positions_with_eval.get(split, 0) + evaluated
        self.report.games[split] = self.report.games.get(split, 0) + info.games
        if self.on_shard is not None:
            self.on_shard(info)


def _shard_arrays(games: list[tuple[int, ConvertedGame]], rng: np.random.Generator | None
                  ) -> tuple[dict[str, np.ndarray], dict[str, list]]:
    """Position arrays as the shard stores them (board and hands packed: `pieces`, `promoted`; in
    game order, or rows shuffled by `rng`) and the games table of one shard.
    `eval` is among the arrays only when some position has an evaluation (the shard then stores it;
    without, the arrays, their content digest and the shard are what they were before evaluations)."""
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
    if rng is not None:
        order = rng.permutation(len(positions[shards.KEY_GAME]))
        positions = {key: value[order] for key, value in positions.items()}
    columns = [c for c in shards.GAME_SCHEMA if c != "game_id"]
    table: dict[str, list] = {"game_id": [game_id for game_id, _ in games]}
    for i, column in enumerate(columns):
        table[column] = [g.row[i] for _, g in games]
    return positions, table


def _content_digest(positions: dict[str, np.ndarray], table: dict[str, list]) -> str:
    """sha256 of every stored byte of the shard's positions (the packed arrays, as _shard_arrays gives
    them) and of its games table; only ever compared with itself (resume)."""
    digest = hashlib.sha256()
    for key in sorted(positions):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(positions[key]).reshape(-1).view(np.uint8))   # no copy
    digest.update(repr(sorted(table.items())).encode("utf-8"))
    return digest.hexdigest()
