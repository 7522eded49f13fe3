"""What is in a dataset folder, a shard or a record: counts, splits, label balance, endings, a position dump.

Used by `shogi-dnn inspect`; reads shards chunk by chunk. Records and position arguments are summarised
game by game and dumped as `SFEN<TAB>label<TAB>game<TAB>ply`. Engine evaluations are counted, never put
in the dump. Positions without a result (annotate's off-path shards) are counted apart (`no_result`),
their repeated games table rows not counted again, and dumped with the label NO_LABEL ('-').
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from shogi_dnn import kifu
from shogi_dnn.convert.filters import (
    SKIP_DUPLICATE,
    SKIP_NO_RESULT,
    SKIP_PROBLEM,
    ConvertSettings,
    Deduplicator,
    game_key,
)
from shogi_dnn.convert.worker import TrainedGame, trained_game
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import (
    EVAL_NONE,
    LABEL_DRAW,
    LABEL_LOSS,
    LABEL_WIN,
    decode_position,
    game_labels,
)
from shogi_dnn.errors import KifuError, ShardFormatError
from shogi_dnn.kifu import names, repetition
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, Winner
from shogi_dnn.wording import plural


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
        raise ShardFormatError(f"{path}: no such dataset folder, shard or record file, "
                               "nor a 'startpos'/'sfen' position")
    with shards.open_shard(path) as f:
        split = str(f.attrs.get("split", "?"))
    return [ShardRef(split, path)]


def _split_rank(split: str) -> int:
    return shards.SPLITS.index(split) if split in shards.SPLITS else len(shards.SPLITS)


@dataclasses.dataclass
class SplitSummary:
    """Counts of one split: `labels` by 'win', 'loss', 'draw'; `evaluated` (with an engine evaluation);
    `no_result` (win NaN); `compressions`: shards by compression.
    """

    shards: int = 0
    games: int = 0
    positions: int = 0
    labels: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    endings: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    winners: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    moves_total: int = 0
    evaluated: int = 0
    no_result: int = 0
    compressions: collections.Counter = dataclasses.field(default_factory=collections.Counter)


def summarize(refs: list[ShardRef]) -> dict[str, SplitSummary]:
    """Per-split counts (the positions' labels are read in chunks; the games tables whole)."""
    result: dict[str, SplitSummary] = {}
    for ref in refs:
        split = result.setdefault(ref.split, SplitSummary())
        before = split.no_result
        with shards.open_shard(ref.path) as f:
            win = f[shards.KEY_WIN]
            for start in range(0, win.shape[0], shards.CHUNK_ROWS):
                rows = win[start:start + shards.CHUNK_ROWS]
                _count_labels(split.labels, rows)
                split.no_result += int(np.count_nonzero(np.isnan(rows)))
            split.positions += int(win.shape[0])
            split.compressions[shards.shard_compression(f)] += 1
            if shards.KEY_EVAL in f:
                evals = f[shards.KEY_EVAL]
                split.evaluated += sum(
                    int(np.count_nonzero(evals[start:start + shards.CHUNK_ROWS] != EVAL_NONE))
                    for start in range(0, evals.shape[0], shards.CHUNK_ROWS))
        split.shards += 1
        if split.no_result > before:     # off-path positions: their games are the source games, counted once
            continue
        table = shards.read_games(ref.path)
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
                        "mean_moves": round(s.moves_total / s.games, 1) if s.games else 0.0,
                        "positions_with_eval": s.evaluated, "positions_without_result": s.no_result}
    compressions: collections.Counter = collections.Counter()
    for s in summary.values():
        compressions.update(s.compressions)
    return {"games": sum(s.games for s in summary.values()),
            "positions": sum(s.positions for s in summary.values()),
            "positions_with_eval": sum(s.evaluated for s in summary.values()),
            "positions_without_result": sum(s.no_result for s in summary.values()),
            "shards": sum(s.shards for s in summary.values()),
            "compression": dict(sorted(compressions.items())), "splits": splits}


def format_summary(path: str | Path, summary: dict[str, SplitSummary]) -> str:
    """A readable table: one block per split, then the endings over all splits."""
    data = summary_dict(summary)
    lines = [(f"{path}: {plural(data['games'], 'game')}, {plural(data['positions'], 'position')}, "
             f"{plural(data['shards'], 'shard')}")]
    lines.append(f"{'split':<11}{'shards':>7}{'games':>9}{'positions':>11}{'win':>8}{'loss':>8}{'draw':>8}"
                 f"{'moves/game':>12}")
    for name, s in data["splits"].items():
        n = max(1, s["positions"])
        share = [f"{100 * s['labels'].get(k, 0) / n:7.1f}%" for k in ("win", "loss", "draw")]
        lines.append(f"{name:<11}{s['shards']:>7}{s['games']:>9,}{s['positions']:>11,}{''.join(share)}"
                     f"{s['mean_moves']:>12}")
    endings: collections.Counter = collections.Counter()
    winners: collections.Counter = collections.Counter()
    for s in summary.values():
        endings.update(s.endings)
        winners.update(s.winners)
    games = max(1, data["games"])
    lines.append("endings: " + ", ".join(f"{k} {v:,} ({100 * v / games:.1f}%)"
                                         for k, v in endings.most_common()))
    lines.append("winners: " + ", ".join(f"{k} {v:,} ({100 * v / games:.1f}%)"
                                         for k, v in sorted(winners.items())))
    share = 100 * data["positions_with_eval"] / max(1, data["positions"])
    lines.append(f"engine evaluations: {data['positions_with_eval']:,} positions ({share:.1f}%)"
                 + "".join(f", {name} {s['positions_with_eval']:,}" for name, s in data["splits"].items()))
    lines.append("shard compression: " + ", ".join(f"{name} ({plural(count, 'shard')})"
                                                   for name, count in data["compression"].items()))
    if data["positions_without_result"]:
        lines.append(f"positions without a game result (annotate's off-path positions): "
                     f"{data['positions_without_result']}"
                     + "".join(f", {name} {s['positions_without_result']}"
                               for name, s in data["splits"].items() if s["positions_without_result"]))
    return "\n".join(lines)


def verify(refs: list[ShardRef]) -> list[str]:
    """Shards whose sha256 differs from the manifest: one message each (empty when all match)."""
    return [f"{r.path}: sha256 differs from the manifest" for r in refs
            if r.sha256 and shards.file_sha256(r.path) != r.sha256]


def iter_sfen_lines(refs: list[ShardRef]) -> Iterator[str]:
    """`SFEN<TAB>label<TAB>game<TAB>ply` for every position, shard by shard, in stored order.

    SFEN is the real position (un-rotated, standard form, move number = ply + 1); the label is from
    its side to move (1 win, 0 loss, 0.5 draw; NO_LABEL '-' for a position without a game result).
    """
    keys = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_TURN, shards.KEY_PLY, shards.KEY_WIN,
            shards.KEY_GAME)
    for ref in refs:
        with shards.open_shard(ref.path) as f:
            total = f[shards.KEY_WIN].shape[0]
            for start in range(0, total, shards.CHUNK_ROWS):
                rows = shards.read_rows(f, start, start + shards.CHUNK_ROWS, keys)
                board, hands, turn, ply, win, game = (rows[k] for k in keys)
                for i in range(len(win)):
                    sfen = decode_position(board[i], hands[i], int(turn[i]), int(ply[i]))
                    label = NO_LABEL if np.isnan(win[i]) else f"{float(win[i]):g}"
                    yield f"{sfen}\t{label}\t{int(game[i])}\t{int(ply[i])}"


# --- game records and position arguments -------------------------------------------------------------

NO_LABEL = "-"          # the label of a position whose game has no known result
SHARD_SUFFIXES = (".h5", ".hdf5")
_POSITION_WORDS = ("startpos", "sfen", "position")


def looks_like_position(text: str) -> bool:
    """True for `[position] startpos ...`, `[position] sfen ...` or a bare SFEN (a board of 9 ranks)."""
    tokens = text.split()
    return bool(tokens) and (tokens[0] in _POSITION_WORDS or tokens[0].count("/") == 8)


def read_records(target: str) -> list[GameRecord | KifuError] | None:
    """The games of a record file or of a position argument, in order (bad games as KifuErrors); None when
    `target` is a dataset folder, a shard or nothing.

    Raises:
        KifuError: a position argument that cannot be read.
    """
    path = Path(target)
    if path.is_dir():
        return None
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in SHARD_SUFFIXES or (suffix not in kifu.RECORD_SUFFIXES and h5py.is_hdf5(path)):
            return None
        return list(kifu.read_record_file(path))
    if not looks_like_position(target):
        return None
    from shogi_dnn.analysis.predict import (
        read_position,  # the parser `predict` uses for its position argument
    )

    return [read_position(target)]


def good_games(items: list[GameRecord | KifuError]) -> list[tuple[int, GameRecord]]:
    """(game number, record) of the readable games; numbers are 1-based over all games, bad ones too,
    as `predict --game N` counts them.

    Raises:
        KifuError: no game can be read (the first error, with the count of bad games when several).
    """
    good = [(n, item) for n, item in enumerate(items, start=1) if isinstance(item, GameRecord)]
    if good:
        return good
    errors = [item for item in items if isinstance(item, KifuError)]
    if not errors:
        raise KifuError("<input>", 0, "no game in the input")
    first = errors[0]
    if len(errors) == 1:
        raise first
    ply = f" (ply {first.ply})" if first.ply else ""
    raise KifuError(first.path, first.line, f"{first.reason}{ply}; no readable game ({len(errors)} bad)")


def record_start(record: GameRecord) -> str:
    """`startpos`, or `sfen <SFEN>` (preceded by the 手合割 name of a handicap start)."""
    if record.start_sfen == STANDARD_START_SFEN:
        return "startpos"
    return (f"{record.handicap}: " if record.handicap else "") + f"sfen {record.start_sfen}"


@dataclasses.dataclass(frozen=True)
class ShownGame:
    """One readable game of a record input: its number (as predict --game counts), the record as written,
    and what convert makes of it (convert.worker.TrainedGame; None with --raw)."""

    number: int
    raw: GameRecord
    trained: TrainedGame | None

    @property
    def record(self) -> GameRecord:
        """The game shown: as convert trains it when convert keeps it, else as written."""
        return self.trained.record if self.trained and self.trained.record else self.raw


def shown_games(items: list[GameRecord | KifuError], *, raw: bool = False,
                settings: ConvertSettings | None = None) -> list[ShownGame]:
    """The readable games, each with what convert (default settings) makes of it: the same filters,
    repetition rule and --dedup (within this input) as `shogi-dnn convert`. `raw`: the records only.

    Raises:
        KifuError: no game can be read (good_games).
    """
    games = good_games(items)
    if raw:
        return [ShownGame(number, record, None) for number, record in games]
    settings = settings or ConvertSettings()
    dedup = Deduplicator(settings.dedup)
    shown = []
    for number, record in games:
        trained = trained_game(record, settings)
        if trained.record is not None and dedup.is_duplicate(game_key(record)):
            trained = TrainedGame(None, SKIP_DUPLICATE)
        shown.append(ShownGame(number, record, trained))
    return shown


def convert_note(game: ShownGame) -> str:
    """What convert does to a game and why, in words ('' when it trains the record as written)."""
    trained, raw = game.trained, game.raw
    if trained is None:
        return ""
    if trained.record is None:
        unfinished = raw.ending is Ending.NONE and raw.format != "sfen" and raw.moves
        no_mate = " (and the last position is not checkmate)" if unfinished else ""
        why = {SKIP_NO_RESULT: f"no result{no_mate}",
               SKIP_PROBLEM: "a mate problem (the start position has one king), not a game",
               SKIP_DUPLICATE: "the same start and moves as an earlier game "
               "(--dedup)"}.get(trained.skip, trained.skip)
        return f"skipped: {trained.detail or why}"
    if trained.repetition in ("", repetition.ENDED_SENNICHITE, repetition.ENDED_OUTE_SENNICHITE):
        return ""
    new = trained.record
    result = "a draw" if new.winner is Winner.DRAW else f"{new.winner.value} won"
    recorded = f"the record says {_result_words(raw)}"
    if trained.plies_cut:
        rule = "perpetual check" if new.ending is Ending.OUTE_SENNICHITE else "fourfold repetition"
        return (f"cut at move {len(new.moves)} of {len(raw.moves)}: {rule} (千日手) there, {result}; "
                f"{recorded}")
    return f"relabelled: fourfold repetition (千日手) at the last move, {result}; {recorded}"


def _result_words(record: GameRecord) -> str:
    if record.winner is Winner.DRAW:
        return f"a draw ({record.ending.value})"
    return f"{record.winner.value} won ({record.ending.value}) after {len(record.moves)} moves"


def record_dict(game: ShownGame) -> dict[str, Any]:
    """JSON-able description of one game of a record input, as convert trains it (unless --raw or
    skipped); `recorded` is the record as written, `convert` what convert does to it."""
    number, record = game.number, game.record
    data = {"game": number, "source": str(record.source), "format": record.format,
            "moves": len(record.moves), "positions": len(record.moves) + 1,
            "positions_with_eval": sum(value is not None for value in record.evals),
            "evals": list(record.evals) or None,    # side to move's view per position, None where none
            "winner": record.winner.value, "ending": record.ending.value, "has_result": record.has_result,
            "start_sfen": record.start_sfen, "handicap": record.handicap,
            "black": record.black, "white": record.white, "event": record.event}
    if game.trained is not None:
        trained = game.trained
        data["recorded"] = {"moves": len(game.raw.moves), "winner": game.raw.winner.value,
                            "ending": game.raw.ending.value}
        data["convert"] = {"kept": trained.record is not None, "skip": trained.skip or None,
                           "repetition": trained.repetition or None, "moves_cut": trained.plies_cut,
                           "note": convert_note(game) or None}
    return data


def records_summary_dict(name: str, items: list[GameRecord | KifuError], *,
                         raw: bool = False) -> dict[str, Any]:
    """JSON-able summary of a record input: totals, each readable game (as convert trains it, unless
    `raw`), and the bad games' errors."""
    games = [record_dict(game) for game in shown_games(items, raw=raw)]
    # the input's name readable (kifu/names.py): a name that is not UTF-8 cannot be printed as it is
    data = {"input": names.from_str(name).text, "games": len(games),
            "positions": sum(g["positions"] for g in games),
            "positions_with_eval": sum(g["positions_with_eval"] for g in games),
            "with_result": sum(g["has_result"] for g in games),
            "winners": dict(sorted(collections.Counter(g["winner"] for g in games).items())),
            "endings": dict(collections.Counter(g["ending"] for g in games).most_common()),
            "records": games, "errors": [str(e) for e in items if isinstance(e, KifuError)]}
    if not raw:
        data["kept_by_convert"] = sum(g["convert"]["kept"] for g in games)
    return data


def format_records_summary(name: str, items: list[GameRecord | KifuError], *, raw: bool = False) -> str:
    """A readable table of a record input: one line per readable game (bad games are in `errors`), as
    convert trains it unless `raw`; then one line per game convert changes and per skip reason."""
    shown = shown_games(items, raw=raw)
    data = records_summary_dict(name, items, raw=raw)
    bad = f", {len(data['errors'])} unreadable" if data["errors"] else ""
    games = f"{plural(data['games'], 'game')} ({data['with_result']} with a result{bad})"
    form = "as written (--raw)" if raw else f"as convert trains them ({data['kept_by_convert']} kept)"
    lines = [f"{data['input']}: {games}, {plural(data['positions'], 'position')}, {form}"]
    width = max(len("source"), *(len(g["source"]) for g in data["records"]))
    lines.append(f"{'game':>5}{'moves':>7}{'evals':>7}  {'winner':<9}{'ending':<16}{'source':<{width}}"
                 "  start")
    for game, shown_game in zip(data["records"], shown):
        lines.append(f"{game['game']:>5}{game['moves']:>7}{game['positions_with_eval']:>7}  "
                     f"{game['winner']:<9}"
                     f"{game['ending']:<16}{game['source']:<{width}}  {record_start(shown_game.record)}")
    skipped: dict[str, list[int]] = {}
    for game in shown:
        note = convert_note(game)
        if note.startswith("skipped: "):
            skipped.setdefault(note.removeprefix("skipped: "), []).append(game.number)
        elif note:
            lines.append(f"game {game.number}: {note}")
    for reason, numbers in skipped.items():
        lines.append(f"convert skips {'game' if len(numbers) == 1 else 'games'} "
                     f"{', '.join(map(str, numbers))}: {reason}")
    return "\n".join(lines)


def record_sfen_lines(number: int, record: GameRecord) -> Iterator[str]:
    """`SFEN<TAB>label<TAB>game<TAB>ply` for every position of one game, as iter_sfen_lines gives them
    for a dataset (same SFEN form, ply and label from the side to move); the label is NO_LABEL ('-')
    when the game has no known result."""
    from shogi_dnn.analysis.predict import game_positions

    positions = game_positions(record)
    count = len(positions.turn)
    fields = record.start_sfen.split()
    start_ply = int(fields[3]) - 1 if len(fields) > 3 else 0
    labels = game_labels(record.winner, int(positions.turn[0]), count) if record.has_result else None
    for i in range(count):
        ply = start_ply + i
        sfen = decode_position(positions.board[i], positions.hands[i], int(positions.turn[i]), ply)
        label = f"{float(labels[i]):g}" if labels is not None else NO_LABEL
        yield f"{sfen}\t{label}\t{number}\t{ply}"
