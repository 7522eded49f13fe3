"""`shogi-dnn inspect PATH... [--sfen] [--json] [--verify] [--raw]`: summarise a dataset folder or one shard,
or the games of a record file (CSA, KIF, KI2, SFEN/USI lines) or of a position (`startpos moves ...`):
a record's games as `convert` trains them (cut at a fourfold repetition, skipped without a result), with
the reason, or as written (--raw)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from shogi_dnn.analysis import inspect
from shogi_dnn.convert.sources import is_archive, list_files
from shogi_dnn.dataset.shards import MANIFEST_NAME
from shogi_dnn.errors import ConfigError, KifuError, ShardFormatError, ShogiDnnError, printable


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shogi-dnn inspect",
        description="Games, positions, splits, label balance and endings of a dataset folder or one "
                    "shard; or each game (moves, winner, ending, start, file:line) of a game record file "
                    "or a position.")
    parser.add_argument("path", metavar="PATH", nargs="+",
                        help="dataset folder (with manifest.json), one .h5 shard, a record file (CSA, KIF, "
                             "KI2, SFEN/USI lines), or a position: 'startpos [moves ...]', "
                             "'sfen ... [moves ...]' or a bare SFEN; several paths: each in turn")
    parser.add_argument("--sfen", action="store_true",
                        help="print SFEN<TAB>label<TAB>game<TAB>ply for every position of every split (of a "
                             "record: of every readable game, numbered from 1 in the file; the label is "
                             f"'{inspect.NO_LABEL}' when the game's result is unknown, e.g. SFEN lines)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--verify", action="store_true",
                        help="check every shard's sha256 against the manifest")
    parser.add_argument("--raw", action="store_true",
                        help="a record's games as written; by default as `convert` trains them (a game "
                             "played on past a fourfold repetition is cut there, a draw; games convert "
                             "skips are shown as written, with the reason)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    words, code = args.path, 0
    if len(words) == 1 and _record_folder(words[0]):     # a folder of records, not a dataset: each file
        words = [str(p) for p in list_files(words) if not is_archive(p.name)]
        if not words:
            raise ShardFormatError(f"{args.path[0]}: neither a dataset folder (no manifest.json) nor a "
                                   "folder of record files")
        if len(words) == 1:
            args.path = words[0]
            return _inspect_one(args)
    if len(words) == 1 or inspect.looks_like_position(" ".join(words)) \
            or not any(os.path.exists(w) for w in words):
        args.path = " ".join(words)          # one path, or a position written without quotes
        return _inspect_one(args)
    missing = [w for w in words if not os.path.exists(w)]
    if missing:
        raise ShardFormatError(f"{missing[0]}: no such dataset folder, shard or record file (one of "
                               f"{len(words)} paths)")
    if args.json:
        raise ConfigError(f"--json takes one PATH ({len(words)} given): inspect each on its own")
    failed = 0
    for number, path in enumerate(words):
        if number:
            print()
        args.path = path
        try:
            code = max(code, _inspect_one(args))
        except (ShogiDnnError, OSError) as exc:    # one unreadable path among several: said, the rest shown
            print(f"shogi-dnn inspect: error: {printable(str(exc))}", file=sys.stderr)
            failed += 1
    if failed:
        print(f"shogi-dnn inspect: {failed} of {len(words)} paths could not be inspected", file=sys.stderr)
        return 2
    return code


def _record_folder(path: str) -> bool:
    """A folder without a dataset's manifest.json: its record files are inspected one by one."""
    return os.path.isdir(path) and not os.path.exists(os.path.join(path, MANIFEST_NAME))


def _inspect_one(args: argparse.Namespace) -> int:
    """Inspect args.path: a record file or position, else a dataset folder or a shard."""
    records = inspect.read_records(args.path)
    if records is not None:
        return _inspect_records(args, records)
    refs = inspect.resolve(args.path)
    if args.verify:
        bad = inspect.verify(refs)
        if bad:
            raise ShardFormatError(f"{bad[0]} ({len(bad)} of {len(refs)} shards differ)")
    try:
        if args.sfen:
            for line in inspect.iter_sfen_lines(refs):
                sys.stdout.write(line + "\n")
            return 0
        summary = inspect.summarize(refs)
        if args.json:
            print(json.dumps(inspect.summary_dict(summary), indent=2, ensure_ascii=False))
        else:
            print(inspect.format_summary(args.path, summary))
            if args.verify:
                print(f"verified: {len(refs)} shards match the manifest")
    except BrokenPipeError:          # `inspect --sfen | head`: the reader went away; not an error
        _quiet_stdout()
    return 0


def _quiet_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())   # so the exit-time flush does not complain either


def _inspect_records(args: argparse.Namespace, items: list) -> int:
    """A record file or position: bad games as `file:line: reason` on stderr, the good ones shown."""
    if args.verify:
        raise ShardFormatError(f"{args.path}: --verify needs a dataset folder (a record has no manifest)")
    games = inspect.shown_games(items, raw=args.raw)          # raises when no game is readable
    for item in items:
        if isinstance(item, KifuError):
            print(item, file=sys.stderr)
    try:
        if args.sfen:
            for game in games:
                for line in inspect.record_sfen_lines(game.number, game.record):
                    sys.stdout.write(line + "\n")
        elif args.json:
            summary = inspect.records_summary_dict(args.path, items, raw=args.raw)
            print(json.dumps(summary, indent=2, ensure_ascii=False))
        else:
            print(inspect.format_records_summary(args.path, items, raw=args.raw))
    except BrokenPipeError:
        _quiet_stdout()
    return 0
