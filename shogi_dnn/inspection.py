"""What is in a dataset folder or a shard: counts, splits, label balance, endings, and a position dump.

Used by `shogi-dnn inspect`. Reads shards chunk by chunk, so it works on datasets of any size.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn import shards
from shogi_dnn.errors import ShardFormatError
from shogi_dnn.features import LABEL_DRAW, LABEL_LOSS, LABEL_WIN, decode_position


@dataclasses.dataclass(frozen=True)
class ShardRef:
    """A shard to read: its split, its file and (from a manifest) its expected sha256."""

    split: str
    path: Path
    sha256: str = ""


def resolve(path: str | Path) -> list[ShardRef]:
    """The shards of a dataset folder (from manifest.json, in split order) or of one shard file.

    Raises:
        ShardFormatError: not a dataset folder or shard, or a listed shard is missing.
    """
    path = Path(path)
    if path.is_dir():
        manifest = shards.read_manifest(path)
        ordered = sorted(manifest.shards, key=lambda s: (_split_rank(s.split), s.path))
        refs = [ShardRef(s.split, manifest.shard_path(s), s.sha256) for s in ordered]
        missing = [r.path for r in refs if not r.path.is_file()]
        if missing:
            raise ShardFormatError(f"{missing[0]}: listed in {path / shards.MANIFEST_NAME} but missing")
        return refs
    if not path.exists():
        raise ShardFormatError(f"{path}: no such dataset folder or shard")
    with shards.open_shard(path) as f:
        split = str(f.attrs.get("split", "?"))
    return [ShardRef(split, path)]


def _split_rank(split: str) -> int:
    return shards.SPLITS.index(split) if split in shards.SPLITS else len(shards.SPLITS)


@dataclasses.dataclass
class SplitSummary:
    """Counts of one split. `labels` counts positions by label: 'win', 'loss', 'draw'."""

    shards: int = 0
    games: int = 0
    positions: int = 0
    labels: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    endings: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    winners: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    moves_total: int = 0


def summarize(refs: list[ShardRef]) -> dict[str, SplitSummary]:
    """Per-split counts (the positions' labels are read in chunks; the games tables whole)."""
    result: dict[str, SplitSummary] = {}
    for ref in refs:
        split = result.setdefault(ref.split, SplitSummary())
        with shards.open_shard(ref.path) as f:
            win = f[shards.KEY_WIN]
            for start in range(0, win.shape[0], shards.CHUNK_ROWS):
                _count_labels(split.labels, win[start:start + shards.CHUNK_ROWS])
            split.positions += int(win.shape[0])
        table = shards.read_games(ref.path)
        split.shards += 1
        split.games += len(table["game_id"])
        split.endings.update(table["ending"].tolist())
        split.winners.update(table["winner"].tolist())
        split.moves_total += int(np.sum(table["num_moves"], dtype=np.int64))
    return result


def _count_labels(counter: collections.Counter, win: np.ndarray) -> None:
    counter["win"] += int(np.count_nonzero(win == LABEL_WIN))
    counter["loss"] += int(np.count_nonzero(win == LABEL_LOSS))
    counter["draw"] += int(np.count_nonzero(win == LABEL_DRAW))


def summary_dict(summary: dict[str, SplitSummary]) -> dict[str, Any]:
    """JSON-able summary: totals and per split."""
    splits = {}
    for name, s in summary.items():
        splits[name] = {"shards": s.shards, "games": s.games, "positions": s.positions,
                        "labels": dict(sorted(s.labels.items())), "endings": dict(s.endings.most_common()),
                        "winners": dict(sorted(s.winners.items())),
                        "mean_moves": round(s.moves_total / s.games, 1) if s.games else 0.0}
    return {"games": sum(s.games for s in summary.values()),
            "positions": sum(s.positions for s in summary.values()),
            "shards": sum(s.shards for s in summary.values()), "splits": splits}


def format_summary(path: str | Path, summary: dict[str, SplitSummary]) -> str:
    """A readable table: one block per split, then the endings over all splits."""
    data = summary_dict(summary)
    lines = [f"{path}: {data['games']} games, {data['positions']} positions, {data['shards']} shards"]
    lines.append(f"{'split':<11}{'shards':>7}{'games':>9}{'positions':>11}{'win':>8}{'loss':>8}{'draw':>8}"
                 f"{'moves/game':>12}")
    for name, s in data["splits"].items():
        n = max(1, s["positions"])
        share = [f"{100 * s['labels'].get(k, 0) / n:7.1f}%" for k in ("win", "loss", "draw")]
        lines.append(f"{name:<11}{s['shards']:>7}{s['games']:>9}{s['positions']:>11}{''.join(share)}"
                     f"{s['mean_moves']:>12}")
    endings: collections.Counter = collections.Counter()
    winners: collections.Counter = collections.Counter()
    for s in summary.values():
        endings.update(s.endings)
        winners.update(s.winners)
    games = max(1, data["games"])
    lines.append("endings: " + ", ".join(f"{k} {v} ({100 * v / games:.1f}%)" for k, v in endings.most_common()))
    lines.append("winners: " + ", ".join(f"{k} {v} ({100 * v / games:.1f}%)" for k, v in sorted(winners.items())))
    return "\n".join(lines)


def verify(refs: list[ShardRef]) -> list[str]:
    """Shards whose sha256 differs from the manifest: one message each (empty when all match)."""
    return [f"{r.path}: sha256 differs from the manifest" for r in refs
            if r.sha256 and shards.file_sha256(r.path) != r.sha256]


def iter_sfen_lines(refs: list[ShardRef]) -> Iterator[str]:
    """`SFEN<TAB>label<TAB>game<TAB>ply` for every position, shard by shard, in stored order.

    SFEN is the real position (un-rotated, standard form, move number = ply + 1); the label is from
    its side to move (1 win, 0 loss, 0.5 draw).
    """
    keys = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_TURN, shards.KEY_PLY, shards.KEY_WIN, shards.KEY_GAME)
    for ref in refs:
        with shards.open_shard(ref.path) as f:
            total = f[shards.KEY_WIN].shape[0]
            for start in range(0, total, shards.CHUNK_ROWS):
                board, hands, turn, ply, win, game = (f[k][start:start + shards.CHUNK_ROWS] for k in keys)
                for i in range(len(win)):
                    sfen = decode_position(board[i], hands[i], int(turn[i]), int(ply[i]))
                    yield f"{sfen}\t{float(win[i]):g}\t{int(game[i])}\t{int(ply[i])}"
