"""The annotated dataset folder: shards, manifest.json and annotate-report.json, from the chunks' results.

  DIR/<split>-NNNNN.h5      every source shard, same name, rows, games table and chunking, with `eval`
                            filled where the source had none and the engine gave one (--evals); a plain
                            copy of the file with --no-evals
  DIR/offpath-NNNNN.h5      the off-path positions (split train), in plan order, shard_size a shard:
                            `win` NaN (no game result), `move` the engine's best move, `eval` its score,
                            `game` the source game's id, `ply` the game position's ply + plies; its games
                            table repeats the source games' rows (same game_id), so a reader finds the game
                            each position left (the source dataset's games; `ply - plies` is where)
  DIR/manifest.json         the shards (an off-path shard's entry counts its positions in `no_result`);
                            settings: the source's, plus "annotate" (ANNOTATE_KEY: the settings, the
                            engine, its `id name`, the source dataset's identity, dataset/identity.py);
                            totals: the source's, plus "annotate" (the counts of AnnotateReport)
  DIR/annotate-report.json  AnnotateReport.to_dict(): counts and the first failures in words
  DIR/annotate-state.json   the plan's fingerprint, the shards written so far (ShardInfo) and `complete`
  DIR/annotate-chunks/      NNNNNN.npz per finished chunk (worker.py): removed once the shards are written
"""

from __future__ import annotations

import collections
import dataclasses
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.annotate.plan import EVAL_CHUNK, OFF_PATH_CHUNK, Chunk, Plan
from shogi_dnn.annotate.worker import OFF_PATH_KEYS, ChunkResult
from shogi_dnn.dataset import features, shards
from shogi_dnn.folders import run_files
from shogi_dnn.wording import plural

STATE_NAME = "annotate-state.json"
REPORT_NAME = "annotate-report.json"
CHUNKS_DIR = "annotate-chunks"
ANNOTATE_KEY = "annotate"
OFF_PATH_PREFIX = "offpath-"
MAX_LISTED_FAILURES = 1000
COUNT_WORDS = {"crash": "engine crashed", "timeout": "timed out", "protocol": "bad engine answer",
               "no_score": "no score", "no_legal_move": "walk ended (no legal move)",
               "illegal_bestmove": "best move not legal (move left out)"}


@dataclasses.dataclass
class AnnotateState:
    """DIR/annotate-state.json: what a rerun with the same fingerprint keeps."""

    path: Path
    fingerprint: str
    shards: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    complete: bool = False

    @classmethod
    def load(cls, out: Path, fingerprint: str) -> AnnotateState | None:
        """The state of an earlier run with this fingerprint, if there is one."""
        try:
            data = json.loads((out / STATE_NAME).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
            return None
        return cls(out / STATE_NAME, fingerprint, dict(data.get("shards", {})), bool(data.get("complete")))

    def save(self) -> None:
        run_files.write_json_atomic(self.path, {"fingerprint": self.fingerprint, "complete": self.complete,
                                                "shards": self.shards})

    def intact(self, out: Path, name: str) -> shards.ShardInfo | None:
        """The recorded entry of shard `name` when its file is still the one written."""
        entry = self.shards.get(name)
        if entry is None or not (out / name).is_file() or shards.file_sha256(out / name) != entry["sha256"]:
            return None
        return shards.ShardInfo(**entry)


@dataclasses.dataclass
class AnnotateReport:
    """Counts for the manifest, annotate-report.json and the end summary."""

    engine: str = ""
    engine_name: str = ""
    nodes: int = 0
    workers: int = 1
    chunks: int = 0
    chunks_resumed: int = 0                  # finished by an earlier, interrupted run
    positions_searched: int = 0              # this run's searches (the speed figure)
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    evaluated: dict[str, int] = dataclasses.field(default_factory=dict)     # evals added, per split
    off_path: int = 0                        # off-path positions written
    failures: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def add(self, result: ChunkResult, chunk: Chunk, plan: Plan) -> None:
        """Count one chunk's result (this run's or a resumed one)."""
        self.counts.update(result.counts)
        self.failures.extend(result.failures[:max(0, MAX_LISTED_FAILURES - len(self.failures))])
        if chunk.kind == EVAL_CHUNK:
            split = plan.manifest.shards[chunk.shard].split
            added = int(np.count_nonzero(result.arrays[shards.KEY_EVAL] != features.EVAL_NONE))
            self.evaluated[split] = self.evaluated.get(split, 0) + added
        else:
            self.off_path += len(result.arrays["source"])

    @property
    def failed(self) -> int:
        return sum(self.counts.get(k, 0) for k in ("crash", "timeout", "protocol", "no_score"))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["counts"] = dict(sorted(self.counts.items()))
        data["failed"] = self.failed
        data["seconds"] = round(self.seconds, 3)
        return data

    def summary(self) -> str:
        """The end summary, a few lines."""
        evals = ", ".join(f"{s} {n:,}" for s, n in self.evaluated.items()) or "none"
        counts = ", ".join(f"{COUNT_WORDS.get(k, k)} {v:,}" for k, v in sorted(self.counts.items())
                           if k in COUNT_WORDS) or "none"
        rate = self.positions_searched / self.seconds if self.seconds else 0.0
        resumed = (f"resumed: {plural(self.chunks_resumed, 'chunk')} of {self.chunks:,} done before\n"
                   if self.chunks_resumed else "")
        return (resumed + f"evaluations added: {evals}; off-path positions: {self.off_path:,}\n"
                f"positions left without a label: {self.failed:,} ({counts})\n"
                f"{self.positions_searched:,} positions searched in {self.seconds:.1f} s, "
                f"{rate:,.1f} positions/s, {plural(self.workers, 'worker')}, "
                f"{self.engine_name or self.engine} at {self.nodes:,} nodes")


def write_output(plan: Plan, out: Path, load: Callable[[Chunk], ChunkResult], state: AnnotateState,
                 report: AnnotateReport, annotate: dict[str, Any],
                 between: Callable[[], None] = lambda: None) -> list[shards.ShardInfo]:
    """Write every shard (those the state records intact are kept), the manifest and the report.

    Args:
        load: a finished chunk's result.
        annotate: the manifest's settings["annotate"] (settings, engine, source identity).
        between: called after each shard (it raises KeyboardInterrupt when the job is to stop).
    """
    written = []
    for index in range(len(plan.manifest.shards)):
        written.append(_copy_shard(plan, out, index, load, state))
        between()
    written += _off_path_shards(plan, out, load, state, between)
    settings = {**plan.manifest.settings, ANNOTATE_KEY: annotate}
    totals = {**plan.manifest.totals, ANNOTATE_KEY: report.to_dict()["counts"]
              | {"evaluated": report.evaluated, "off_path": report.off_path, "failed": report.failed}}
    shards.write_manifest(out, written, settings, totals)
    run_files.write_json_atomic(out / REPORT_NAME, report.to_dict())
    return written


def _record(state: AnnotateState, info: shards.ShardInfo) -> shards.ShardInfo:
    state.shards[info.path] = dataclasses.asdict(info)
    state.save()
    return info


def _copy_shard(plan: Plan, out: Path, index: int, load: Callable[[Chunk], ChunkResult],
                state: AnnotateState) -> shards.ShardInfo:
    """Source shard `index` with its evaluations filled (a plain copy without --evals)."""
    info = plan.manifest.shards[index]
    kept = state.intact(out, info.path)
    if kept is not None:
        return kept
    source = plan.manifest.shard_path(info)
    target = out / info.path
    if not plan.settings.evals:
        shutil.copyfile(source, target)
        return _record(state, dataclasses.replace(info, sha256=shards.file_sha256(target)))
    with shards.open_shard(source) as f:
        chunk_rows = int(f[shards.KEY_WIN].chunks[0]) if f[shards.KEY_WIN].chunks else shards.CHUNK_ROWS
        compression = shards.shard_compression(f)      # kept (a filter no writer here uses: the default)
        compression = compression if compression in shards.COMPRESSIONS else shards.DEFAULT_COMPRESSION
        positions = {key: shards.read_stored(f, key, 0, None)
                     for key in (*shards.STORED_SCHEMA, shards.KEY_EVAL)}
    for chunk in plan.chunks:
        if chunk.kind == EVAL_CHUNK and chunk.shard == index:
            result = load(chunk)
            positions[shards.KEY_EVAL][result.arrays["rows"]] = result.arrays[shards.KEY_EVAL]
    games = shards.read_games(source)
    digest = shards.write_shard(target, info.split, positions, games, chunk_rows, compression)
    return _record(state, shards.shard_info(target, info.split, info.positions, info.games, digest,
                                            games["game_id"]))


def _off_path_shards(plan: Plan, out: Path, load: Callable[[Chunk], ChunkResult], state: AnnotateState,
                     between: Callable[[], None]) -> list[shards.ShardInfo]:
    """The off-path positions in plan order, plan.settings.shard_size positions a shard."""
    games = _train_games(plan) if len(plan.off_path_rows) else {}
    written = []
    for number, rows in enumerate(_off_path_batches(plan, load)):
        name = f"{OFF_PATH_PREFIX}{number:05d}.h5"
        kept = state.intact(out, name)
        if kept is not None:
            written.append(kept)
            continue
        n = len(rows[shards.KEY_GAME])
        positions = {**{key: rows[key] for key in OFF_PATH_KEYS},
                     shards.KEY_WIN: np.full(n, np.nan, np.float32)}
        ids = np.unique(rows[shards.KEY_GAME])
        table = {key: [games[int(i)][key] for i in ids] for key in shards.GAME_SCHEMA}
        for key in shards.OPTIONAL_GAME_SCHEMA:         # kept where some game has one (source_raw)
            column = [games[int(i)].get(key, "") for i in ids]
            if any(column):
                table[key] = column
        digest = shards.write_shard(out / name, "train", positions, table,
                                    compression=plan.manifest.compression)
        info = shards.shard_info(out / name, "train", n, len(ids), digest, ids.tolist())
        written.append(_record(state, dataclasses.replace(info, no_result=n)))
        between()
    return written


def _off_path_batches(plan: Plan, load: Callable[[Chunk], ChunkResult]) -> Iterator[dict[str, np.ndarray]]:
    """The off-path chunks' positions, concatenated and cut in runs of shard_size rows."""
    size = plan.settings.shard_size
    pending: list[dict[str, np.ndarray]] = []
    held = 0
    for chunk in plan.chunks:
        if chunk.kind != OFF_PATH_CHUNK:
            continue
        result = load(chunk)
        pending.append(result.arrays)
        held += len(result.arrays["source"])
        while held >= size:
            joined = {key: np.concatenate([p[key] for p in pending]) for key in pending[0]}
            yield {key: value[:size] for key, value in joined.items()}
            pending, held = [{key: value[size:] for key, value in joined.items()}], held - size
    if held:
        yield {key: np.concatenate([p[key] for p in pending]) for key in pending[0]}


def _train_games(plan: Plan) -> dict[int, dict[str, Any]]:
    """game id -> its games-table row (GAME_SCHEMA keys, and the OPTIONAL_GAME_SCHEMA ones its shard
    has), for every game of the source's train split."""
    games: dict[int, dict[str, Any]] = {}
    for info in plan.train_shards:
        table = shards.read_games(plan.manifest.shard_path(info))
        for i, game_id in enumerate(table["game_id"].tolist()):
            games[int(game_id)] = {key: table[key][i] for key in table}    # optional columns too
    return games
