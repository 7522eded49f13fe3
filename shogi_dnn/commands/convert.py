"""`shogi-dnn convert INPUT... --out DIR`: game records -> HDF5 shards (see shogi_dnn.convert.run)."""

from __future__ import annotations

import argparse
import logging
import sys

from shogi_dnn.convert.run import DRAWS, RATING_OF, REPORT_NAME, ConvertSettings, GameFilter, run_convert
from shogi_dnn.dataset import shards
from shogi_dnn.folders import run_files
from shogi_dnn.kifu.record import Ending

log = logging.getLogger(__name__)
SHOWN_ERRORS = 5          # skipped games printed on the console (all are in convert-report.json)


def build_parser() -> argparse.ArgumentParser:
    defaults = ConvertSettings()
    parser = argparse.ArgumentParser(
        prog="shogi-dnn convert",
        description="Convert game records (CSA, KIF, KI2; files, folders, .zip/.tar[.gz|.xz]/.7z archives) "
                    "into HDF5 shards. By default every finished game with a result is kept.",
        epilog="The first few skipped games are printed as file:line: reason (all of them in "
               "DIR/convert-report.json). Exit status: 0 when at least one game was converted, 1 when none "
               "was (no record, or every game skipped), 2 on a usage error, 130 when interrupted.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="record files, folders (recursive) or archives")
    parser.add_argument("--out", required=True, metavar="DIR", help="dataset folder to write")
    parser.add_argument("--min-rating", type=float, default=None, help="drop games below this rating")
    parser.add_argument("--rating-of", choices=RATING_OF, default="both",
                        help="--min-rating applies to both players or to the loser (default: both)")
    parser.add_argument("--min-moves", type=int, default=0, help="drop games with fewer moves")
    parser.add_argument("--endings", default=None, metavar="LIST",
                        help="comma-separated endings to keep: " + ",".join(e.value for e in Ending))
    parser.add_argument("--draws", choices=DRAWS, default="keep", help="keep draws (label 0.5) or drop them")
    parser.add_argument("--val-fraction", type=float, default=None,
                        help=f"share of games in validation (default {defaults.val_fraction}, at most what "
                             "--test-fraction leaves)")
    parser.add_argument("--test-fraction", type=float, default=defaults.test_fraction,
                        help=f"share of games in test (default {defaults.test_fraction}; 1: every game in "
                             "test, a held-out set for `evaluate --data`)")
    parser.add_argument("--shard-size", type=int, default=defaults.shard_size,
                        help=f"positions per shard (default {defaults.shard_size}; shards hold whole games)")
    parser.add_argument("--row-order", choices=("game", "shuffled"), default=defaults.row_order,
                        help="rows of a shard in game order (default: compresses 2.2x better; training "
                             "shuffles chunks and buffers) or shuffled with --seed")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="seed of the within-shard shuffle (--row-order shuffled)")
    parser.add_argument("--compression", choices=tuple(shards.COMPRESSIONS), default=defaults.compression,
                        help="the shards' chunk compression: zstd (default; level 1 with shuffle: ~12 bytes "
                             "a position; other HDF5 readers need hdf5plugin's filter), gzip (level 4 with "
                             "shuffle: ~13 bytes, 3x zstd's CPU time, any HDF5 reads it), lzf (~20 bytes; "
                             "only h5py reads it) or none (~64 bytes); every reader here reads all four")
    parser.add_argument("--dedup", action=argparse.BooleanOptionalAction, default=defaults.dedup,
                        help="drop a game whose start position and moves equal an earlier one's, across "
                             "files and formats (the CSA and KIF copies of a game, a file copied twice); "
                             "counted as skipped 'duplicate' (default: on; --no-dedup keeps every copy)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes; 1: in-process; more than the CPU cores: capped at the cores "
                             "(default: in-process on 1-2 cores or for inputs under 8 MB, else cores - 1)")
    parser.add_argument("--backend", default="auto", choices=("auto", "python-shogi", "cshogi"),
                        help="move-rules backend (default auto: cshogi when installed); same output")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset already in DIR")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--quiet", action="store_true",
                        help="do not print the skipped games (they stay in DIR/convert-report.json)")
    return parser


def settings_from_args(args: argparse.Namespace) -> ConvertSettings:
    """ConvertSettings from parsed arguments (raises ConfigError on bad values)."""
    endings = None
    if args.endings is not None:
        endings = frozenset(e.strip() for e in args.endings.split(",") if e.strip())
    filters = GameFilter(min_rating=args.min_rating, rating_of=args.rating_of, min_moves=args.min_moves,
                         endings=endings, draws=args.draws)
    return ConvertSettings(filters=filters, val_fraction=val_fraction(args.val_fraction, args.test_fraction),
                           test_fraction=args.test_fraction,
                           shard_size=args.shard_size, seed=args.seed,
                           row_order=args.row_order, dedup=args.dedup, compression=args.compression)


def val_fraction(given: float | None, test_fraction: float) -> float:
    """--val-fraction as given, else the default up to what --test-fraction leaves (--test-fraction 1: 0)."""
    if given is not None:
        return given
    return max(0.0, min(ConvertSettings.val_fraction, round(1 - test_fraction, 12)))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = settings_from_args(args)
    run_files.check_writable(args.out, "--out")
    try:
        report = run_convert(args.inputs, args.out, settings, workers=args.workers, backend=args.backend,
                             overwrite=args.overwrite, progress=not args.no_progress and sys.stderr.isatty())
    except KeyboardInterrupt:
        log.error("shogi-dnn convert: interrupted; finished shards are kept in %s: "
                  "rerun the same command to resume", args.out)
        return 130
    if not args.quiet:
        for line in report.first_errors(SHOWN_ERRORS):
            log.warning("%s", line)
    log.info("%s\nreport: %s/%s", report.summary(), args.out, REPORT_NAME)
    for line in report.warnings:          # a held-out split too small to compare models on
        log.warning("warning: %s", line)
    reason = report.nothing_converted()
    if reason:
        log.error("shogi-dnn convert: nothing converted: %s", reason)
        return 1
    return 0
