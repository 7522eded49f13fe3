"""One chunk labelled by one engine: the positions read from the source shards, searched, the labels kept.

Each chunk gets a fresh engine process, `usinewgame` once, then the chunk's positions in order (hash:
usi_client.sized_options): a chunk's labels do not depend on which worker ran it. A position the engine
crashes or hangs on costs that position (counted by kind, left without a label) and a fresh engine
continues the chunk (its labels may then differ from an uninterrupted run's);
MAX_CONSECUTIVE_FAILURES failures in a row stop the job (an engine that cannot search at all).

A chunk's result, as job.py saves it (ChunkResult.arrays; numpy .npz):

  eval chunk       rows [k] int64 (rows of the source shard searched), eval [k] int16 (EVAL_NONE:
                   the search failed)
  off-path chunk   source [k] int64 (global train row the walk started from), board [k, 81] uint8,
                   hands [k, 14] uint8, turn [k] uint8, ply [k] int16, move [k] uint16 (the engine's
                   best move, features.encode_move; MOVE_NONE when mated or the move is not legal
                   here), eval [k] int16, game [k] int32 (the source game id): the positions made
  both             counts (JSON: searched, crash, timeout, protocol, no_score, no_legal_move,
                   mated, illegal_bestmove), failures (JSON: the first MAX_LISTED failures, in words)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from shogi_dnn.annotate.plan import EVAL_CHUNK, Chunk, Plan, random_walk
from shogi_dnn.annotate.usi_client import EngineFailure, SearchResult, UsiEngine, sized_options
from shogi_dnn.dataset import features, shards
from shogi_dnn.errors import RunError
from shogi_dnn.kifu.evals import MATE_EVAL

MAX_CONSECUTIVE_FAILURES = 8
MAX_LISTED = 20           # failures described per chunk
_SOURCE_KEYS = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_TURN, shards.KEY_PLY, shards.KEY_GAME,
                shards.KEY_EVAL)
OFF_PATH_KEYS = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_TURN, shards.KEY_PLY, shards.KEY_MOVE,
                 shards.KEY_EVAL, shards.KEY_GAME)


class Stopped(Exception):
    """The job is stopping (Ctrl-C, SIGTERM, another worker's error): the chunk is left unfinished."""


@dataclasses.dataclass
class ChunkResult:
    """What one chunk produced (module docstring): arrays, counts and the first failures in words."""

    arrays: dict[str, np.ndarray]
    counts: collections.Counter
    failures: list[str]

    def to_npz(self) -> dict[str, np.ndarray]:
        return {**self.arrays, "counts": _json_array(dict(self.counts)),
                "failures": _json_array(self.failures)}

    @classmethod
    def from_npz(cls, data: dict[str, np.ndarray]) -> ChunkResult:
        arrays = {k: v for k, v in data.items() if k not in ("counts", "failures")}
        return cls(arrays, collections.Counter(json.loads(data["counts"].tobytes())),
                   list(json.loads(data["failures"].tobytes())))


def _json_array(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode("utf-8"), np.uint8)


class Labeller:
    """A worker's engine: a fresh process per chunk, restarted after a failure."""

    def __init__(self, engine: str, plan: Plan, stop: threading.Event) -> None:
        self.path, self.plan, self.stop = engine, plan, stop
        self.engine: UsiEngine | None = None
        self.new_game = True
        self.consecutive = 0

    def fresh(self) -> None:
        self.close()
        settings = self.plan.settings
        self.engine = UsiEngine(self.path, settings.options, sized_options(settings.nodes))
        self.new_game = True            # `usinewgame` before the process's first search only

    def close(self, graceful: bool = True) -> None:
        if self.engine is not None:
            self.engine.close(graceful)
            self.engine = None

    def search(self, sfen: str, counts: collections.Counter, failures: list[str], where: str
               ) -> SearchResult | None:
        """The engine's search of one position, or None when it failed (counted, engine restarted)."""
        if self.stop.is_set():
            raise Stopped
        if self.engine is None:
            self.fresh()
        try:
            result = self.engine.go(f"sfen {sfen}", self.plan.settings.nodes, self.plan.settings.timeout,
                                    new_game=self.new_game)
            self.new_game = False
        except EngineFailure as exc:
            counts[exc.kind] += 1
            if len(failures) < MAX_LISTED:
                failures.append(f"{where}: {exc.kind}: {exc} (sfen {sfen})")
            self.close(graceful=False)
            self.consecutive += 1
            if self.consecutive >= MAX_CONSECUTIVE_FAILURES:
                raise RunError(f"engine {self.path} failed on {self.consecutive} positions in a row "
                               f"(last: {exc.kind}: {exc}); is it a shogi USI engine?") from None
            return None
        self.consecutive = 0
        counts["searched"] += 1
        counts["no_score"] += int(result.score is None)      # left without a label, like a failure
        return result


def label_chunk(chunk: Chunk, labeller: Labeller, on_position: Callable[[], None] = lambda: None
                ) -> ChunkResult:
    """Label one chunk with a fresh engine (module docstring).

    Raises:
        Stopped: the job is stopping; RunError: the engine cannot search (see Labeller.search).
    """
    labeller.fresh()
    try:
        if chunk.kind == EVAL_CHUNK:
            return _eval_chunk(chunk, labeller, on_position)
        return _off_path_chunk(chunk, labeller, on_position)
    finally:
        labeller.close()


def _eval_chunk(chunk: Chunk, labeller: Labeller, on_position: Callable[[], None]) -> ChunkResult:
    info = labeller.plan.manifest.shards[chunk.shard]
    with shards.open_shard(labeller.plan.manifest.shard_path(info)) as f:
        rows = shards.read_rows(f, chunk.start, chunk.stop, _SOURCE_KEYS)
    todo = np.flatnonzero(rows[shards.KEY_EVAL] == features.EVAL_NONE)
    counts: collections.Counter = collections.Counter()
    failures: list[str] = []
    evals = np.full(len(todo), features.EVAL_NONE, np.int16)
    for k, i in enumerate(todo):
        sfen = features.decode_position(rows[shards.KEY_BOARD][i], rows[shards.KEY_HANDS][i],
                                        int(rows[shards.KEY_TURN][i]), int(rows[shards.KEY_PLY][i]))
        result = labeller.search(sfen, counts, failures, f"{info.path} row {chunk.start + i}")
        if result is not None and result.score is not None:
            evals[k] = result.score
        on_position()
    return ChunkResult({"rows": (todo + chunk.start).astype(np.int64), "eval": evals}, counts, failures)


def _off_path_chunk(chunk: Chunk, labeller: Labeller, on_position: Callable[[], None]) -> ChunkResult:
    plan = labeller.plan
    starts = plan.off_path_rows[chunk.start:chunk.stop]
    counts: collections.Counter = collections.Counter()
    failures: list[str] = []
    out: dict[str, list] = {key: [] for key in ("source", *OFF_PATH_KEYS)}
    for info, rows in plan.locate(starts):
        with shards.open_shard(plan.manifest.shard_path(info)) as f:
            stored = {key: f[key][rows] if key in f else shards.read_stored(f, key, 0, None)[rows]
                      for key in shards.stored_keys(_SOURCE_KEYS)}
        source = shards.unpack_rows(stored, _SOURCE_KEYS)
        first = int(plan.train_offsets[plan.train_shards.index(info)])
        for i, row in enumerate(rows):
            made = _off_path_position(source, i, first + int(row), labeller, counts, failures,
                                      f"off-path from {info.path} row {int(row)}")
            if made is not None:
                for key, value in made.items():
                    out[key].append(value)
            on_position()
    arrays = {key: np.asarray(values, dtype=np.int64 if key == "source" else shards.POSITION_SCHEMA[key][1])
              for key, values in out.items()}
    arrays[shards.KEY_BOARD] = arrays[shards.KEY_BOARD].reshape(-1, 81)
    arrays[shards.KEY_HANDS] = arrays[shards.KEY_HANDS].reshape(-1, features.HAND_SIZE)
    return ChunkResult(arrays, counts, failures)


def _off_path_position(source: dict[str, np.ndarray], i: int, row: int, labeller: Labeller,
                       counts: collections.Counter, failures: list[str], where: str) -> dict[str, Any] | None:
    """The off-path position of one start (its row's walk) labelled by the engine, or None: no legal
    move on the way, or the search failed."""
    settings = labeller.plan.settings
    sfen = features.decode_position(source[shards.KEY_BOARD][i], source[shards.KEY_HANDS][i],
                                    int(source[shards.KEY_TURN][i]), int(source[shards.KEY_PLY][i]))
    position = random_walk(sfen, settings.plies, settings.seed, row)
    if position is None:
        counts["no_legal_move"] += 1
        return None
    legal = set(position.legal_usi())
    if not legal:                       # mated: no search needed, and no move to learn
        counts["mated"] += 1
        score, move = -MATE_EVAL, int(features.MOVE_NONE)
    else:
        result = labeller.search(position.sfen(), counts, failures, where)
        if result is None or result.score is None:
            return None
        score, move = result.score, int(features.MOVE_NONE)
        if result.bestmove in legal:
            move = features.encode_move(result.bestmove, position.turn)
        else:
            counts["illegal_bestmove"] += 1
    board, hands = features.encode_position(position)
    return {"source": row, shards.KEY_BOARD: board, shards.KEY_HANDS: hands, shards.KEY_TURN: position.turn,
            shards.KEY_PLY: int(source[shards.KEY_PLY][i]) + settings.plies, shards.KEY_MOVE: move,
            shards.KEY_EVAL: score, shards.KEY_GAME: int(source[shards.KEY_GAME][i])}
