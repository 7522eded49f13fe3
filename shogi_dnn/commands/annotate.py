"""`shogi-dnn annotate DATA --out DIR`: a USI engine's evaluations and off-path positions for a dataset
(see shogi_dnn.annotate.job and docs/annotate.md)."""

from __future__ import annotations

import argparse
import logging
import sys

from shogi_dnn.annotate.job import Interrupted, run_annotate
from shogi_dnn.annotate.output import REPORT_NAME
from shogi_dnn.annotate.plan import AnnotateSettings
from shogi_dnn.annotate.usi_client import DEFAULT_ENGINE, parse_options
from shogi_dnn.folders import run_files

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    defaults = AnnotateSettings()
    parser = argparse.ArgumentParser(
        prog="shogi-dnn annotate",
        description="Label a dataset with a USI engine at a node budget: fill the evaluations its positions "
                    "lack (every split), and make off-path positions (random legal moves off training games) "
                    "labelled with the engine's score and best move. Writes a dataset folder.",
        epilog="Interrupted (Ctrl-C, SIGTERM, a kill), the same command continues where it stopped. Exit "
               "status: 0 done, 2 on an error, 130 when interrupted.")
    parser.add_argument("data", metavar="DATA", help="dataset folder (with manifest.json), e.g. from convert")
    parser.add_argument("--out", required=True, metavar="DIR", help="dataset folder to write")
    parser.add_argument("--engine", default=DEFAULT_ENGINE,
                        help="USI engine: a path, or a name on PATH or in /usr/games "
                             f"(default {DEFAULT_ENGINE})")
    parser.add_argument("--nodes", type=int, default=defaults.nodes,
                        help=f"node budget of each search (go nodes N; default {defaults.nodes})")
    parser.add_argument("--evals", action=argparse.BooleanOptionalAction, default=defaults.evals,
                        help="evaluate the positions without an evaluation, in every split (default: on; "
                             "--no-evals copies the shards unchanged)")
    parser.add_argument("--off-path", type=int, default=defaults.off_path, metavar="N",
                        help="off-path positions to make from N training positions drawn with --seed "
                             f"(default {defaults.off_path})")
    parser.add_argument("--plies", type=int, default=defaults.plies,
                        help=f"random legal moves from the game position (default {defaults.plies})")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help=f"seed of the off-path draw and the random moves (default {defaults.seed})")
    parser.add_argument("--workers", type=int, default=1, help="engine processes at once (default 1)")
    parser.add_argument("--timeout", type=float, default=defaults.timeout,
                        help="seconds one position may take; then the engine is killed and restarted and the "
                             f"position left without a label (default {defaults.timeout:g})")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a USI option for the engine (repeatable), after Threads 1, Hash 16, Contempt 0")
    parser.add_argument("--chunk-size", type=int, default=defaults.chunk_positions, metavar="N",
                        help="positions of a chunk: one engine process each, saved when done, the unit of "
                             f"resume (default {defaults.chunk_positions})")
    parser.add_argument("--shard-size", type=int, default=defaults.shard_size,
                        help=f"positions per off-path shard (default {defaults.shard_size})")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset already in DIR")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def settings_from_args(args: argparse.Namespace) -> AnnotateSettings:
    """AnnotateSettings from parsed arguments. Raises ConfigError on a bad value."""
    settings = AnnotateSettings(nodes=args.nodes, evals=args.evals, off_path=args.off_path, plies=args.plies,
                                seed=args.seed, timeout=args.timeout, options=parse_options(args.option),
                                chunk_positions=args.chunk_size, shard_size=args.shard_size)
    settings.check()
    return settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = settings_from_args(args)
    run_files.check_writable(args.out, "--out")
    try:
        report = run_annotate(args.data, args.out, settings, engine=args.engine, workers=args.workers,
                              overwrite=args.overwrite, progress=not args.no_progress and sys.stderr.isatty())
    except Interrupted as exc:
        log.error("shogi-dnn annotate: interrupted; %d of %d chunks are done and kept in %s: rerun the same "
                  "command to continue", exc.done, exc.total, args.out)
        return 130
    except KeyboardInterrupt:
        log.error("shogi-dnn annotate: interrupted while writing the shards; rerun the same command to "
                  "finish")
        return 130
    log.info("%s\nreport: %s/%s", report.summary(), args.out, REPORT_NAME)
    return 0
