"""`shogi-dnn evaluate --run-dir RUN [--data DIR] [--split validation|test|train|all] [--checkpoint NAME]
[--simulate-devices N] [--no-mirror-average] [--verify-shards] [--allow-trained-games]`: score a run on a
split of its dataset or another one, write RUN/eval-<split>.json (another dataset's:
RUN/eval-<split>@<folder>-<hash>.json, which report does not read) and print a table."""

from __future__ import annotations

import argparse
import logging

from shogi_dnn.analysis import data_check, run_model
from shogi_dnn.errors import ConfigError

log = logging.getLogger(__name__)

EVAL_SPLITS = data_check.SPLITS


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn evaluate", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--run-dir", required=True, help="the run directory written by `shogi-dnn train`")
    parser.add_argument("--data", default=None, help="dataset folder (default: the run's data_dir)")
    parser.add_argument("--split", default=None,
                        help="validation (default; a dataset without it: its only split, e.g. a test-only "
                             "set's test), test, train or all")
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint of the run (default: the final model)")
    parser.add_argument("--simulate-devices", type=int, default=None, metavar="N",
                        help="split the CPU into N logical devices and evaluate on N towers")
    parser.add_argument("--mirror-average", action=argparse.BooleanOptionalAction,
                        default=run_model.MIRROR_AVERAGE,
                        help="the model's probability is the mean over each position and its left-right "
                             "mirror (two model runs per position; on by default: lower log loss and Brier "
                             "on every run measured, docs/accuracy.md)")
    parser.add_argument("--verify-shards", action="store_true",
                        help="check every shard's sha256 against the manifest first (always checked: size, "
                             "schema, split, row and game counts, shapes)")
    parser.add_argument("--allow-trained-games", "--allow-changed-data", dest="allow_trained_games",
                        action="store_true",
                        help="score even though the split holds games the run trained on (--data: the "
                             "folder converted again with another split, or records it was trained on); the "
                             "output is labelled TRAINED GAMES with their count. Another dataset without "
                             "such games needs no flag. A run trained before runs recorded their games: "
                             "score data other than its own (labelled DATA CHANGED)")
    args = parser.parse_args(argv)
    if args.split is not None and args.split not in EVAL_SPLITS:   # checked before TensorFlow is imported
        raise ConfigError(f"--split {args.split!r}: must be one of {', '.join(EVAL_SPLITS)}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # The run, its model and the data are checked (and the data held as a reader) before TensorFlow loads.
    with data_check.checked_split(args.run_dir, args.data, args.split, args.checkpoint, args.verify_shards,
                                  args.allow_trained_games) as checked:
        log.info("evaluate: %s and its data checked; loading TensorFlow and the model (10-20 s), fitting the "
                 "baselines (once per run) and scoring the %s split", args.run_dir, checked.split)
        from shogi_dnn.analysis import evaluate

        result = evaluate.evaluate_checked(checked, checked.split, args.checkpoint, args.simulate_devices,
                                           mirror_average=args.mirror_average)
    print(evaluate.format_table(result))
    print(f"\nwrote {checked.result_path()}")
    return 0
