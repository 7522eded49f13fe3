"""`shogi-dnn selfplay --engine CMD --games N --out DIR`: games of a USI engine against itself (or of two
engines), CSA V2.2 with the score after every engine move, for convert (shogi_dnn.selfplay.job)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from shogi_dnn.annotate.usi_client import DEFAULT_ENGINE, parse_options
from shogi_dnn.errors import ConfigError
from shogi_dnn.folders import run_files
from shogi_dnn.selfplay import job
from shogi_dnn.selfplay.game import Settings, parse_opening

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    defaults = Settings(engines=("x",))
    parser = argparse.ArgumentParser(
        prog="shogi-dnn selfplay",
        description="Play games of a USI engine against itself (or two engines against each other), each "
                    "decided by its seed, into a folder of CSA files with the engine's score after every "
                    "engine move (convert reads them as evaluations).",
        epilog="Interrupted (Ctrl-C, SIGTERM, a kill), the same command continues where it stopped, to the "
               "same files. `--verify K --out DIR` replays K games of DIR and compares. Exit status: 0 done, "
               "1 verify found a difference, 2 on an error, 130 when interrupted.")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder of the games (new, or one to "
                                                                    "continue with the same settings)")
    parser.add_argument("--verify", type=int, default=0, metavar="K",
                        help="replay K games of --out from their seeds and compare (nothing is written)")
    parser.add_argument("--engine", action="append", default=[], metavar="CMD",
                        help="USI engine: a path, or a name on PATH or in /usr/games (default "
                             f"{DEFAULT_ENGINE}); twice: two engines, colours drawn per game")
    parser.add_argument("--games", type=int, default=100, help="games (slots) in all (default 100)")
    parser.add_argument("--seed", type=int, default=6_000_000,
                        help="seed of the first game; game i plays seed + i (default 6000000)")
    parser.add_argument("--nodes", default=",".join(map(str, defaults.nodes)), metavar="N[,N...]",
                        help="node budgets, one drawn per game for both sides (default %(default)s)")
    parser.add_argument("--random-plies", default="-".join(map(str, defaults.random_plies)), metavar="A-B",
                        help="random legal moves after the opening, drawn in A..B per game (default "
                             "%(default)s)")
    parser.add_argument("--openings", default=None, metavar="FILE",
                        help="start lines, one per line: 'startpos moves ...' or 'sfen SFEN moves ...' "
                             "(# comments); one drawn per game")
    parser.add_argument("--max-plies", type=int, default=defaults.max_plies,
                        help=f"a draw after this many plies (default {defaults.max_plies})")
    parser.add_argument("--workers", type=int, default=1, help="games played at once (default 1)")
    parser.add_argument("--timeout", type=float, default=defaults.move_timeout,
                        help="seconds one engine move may take; then the game is aborted "
                             "(default %(default)s)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a USI option for the engines (repeatable), after Threads 1, Hash 16, "
                             "Contempt 0")
    parser.add_argument("--no-progress", action="store_true", help="no progress line")
    return parser


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected whole numbers separated by commas") from None
    if not values:
        raise ConfigError(f"{flag} {text!r}: expected at least one number")
    return values


def _range(text: str, flag: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected A-B (e.g. 0-10) or one number") from None


def read_openings(path: str) -> tuple:
    """The openings of FILE, each checked (ConfigError names FILE:LINE)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--openings {path}: cannot read it ({exc})") from None
    openings = tuple(parse_opening(line, f"{path}:{number}") for number, line in enumerate(lines, 1)
                     if line.strip() and not line.lstrip().startswith("#"))
    if not openings:
        raise ConfigError(f"--openings {path}: no opening line in it")
    return openings


def settings_from_args(args: argparse.Namespace) -> Settings:
    if not args.timeout > 0:
        raise ConfigError(f"--timeout {args.timeout}: must be > 0 seconds")
    return Settings(engines=tuple(args.engine or [DEFAULT_ENGINE]), nodes=_int_list(args.nodes, "--nodes"),
                    random_plies=_range(args.random_plies, "--random-plies"),
                    openings=read_openings(args.openings) if args.openings else (),
                    options=parse_options(args.option),
                    max_plies=args.max_plies, move_timeout=args.timeout)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verify:
        problems = job.verify(args.out, args.verify)
        for line in problems:
            print(f"shogi-dnn selfplay: verify: {line}", file=sys.stderr)
        print(f"verify: {min(args.verify, args.verify)} games of {args.out} replayed; "
              f"{len(problems)} differ")
        return 1 if problems else 0
    settings = settings_from_args(args)
    run_files.check_writable(args.out, "--out")
    try:
        report = job.run_selfplay(args.out, settings, args.games, args.seed, workers=args.workers,
                                  progress=not args.no_progress)
    except job.Interrupted as exc:
        log.error("shogi-dnn selfplay: interrupted; %d games are in %s: rerun the same command to continue",
                  exc.done, args.out)
        return 130
    log.info("%s\nreport: %s", job.describe(report), Path(args.out) / job.REPORT_JSON)
    return 0
