"""`shogi-dnn report --run-dir RUN [--summary [SPLIT]] [--scaling-fit FIT] [--allow-changed-data]`: PNG plots
(RUN/plots/) and RUN/report.md from metrics.jsonl and the eval-*.json files; flags an unbalanced tower and an
evaluation of data other than the run's."""

from __future__ import annotations

import argparse

from shogi_dnn.analysis import report, report_checks, summary, tower_diagnosis
from shogi_dnn.folders import run_files
from shogi_dnn.training import throughput


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="shogi-dnn report", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--run-dir", required=True, help="the run directory written by `shogi-dnn train`")
    parser.add_argument("--summary", nargs="?", const="validation", default=None, metavar="SPLIT",
                        help="end with one table: model vs material vs side to move on an evaluated split "
                             "(default validation): accuracy, log loss, ECE, positions, games")
    parser.add_argument("--scaling-fit", default=None, metavar="FILE|v0=..,t=..",
                        help="the throughput fit `shogi-dnn plan` used (`bench scaling` JSON or inline): "
                             "report.md then compares its predicted positions/s with what the run measured")
    parser.add_argument(run_files.ALLOW_CHANGED_DATA, action="store_true",
                        help="report an evaluation of data other than what the run now trains on (it was "
                             "resumed on other data since); labelled DATA CHANGED")
    args = parser.parse_args(argv)
    fits = throughput.load_fits(args.scaling_fit) if args.scaling_fit else None
    run_files.check_writable(run_files.check_run_dir(args.run_dir), "--run-dir")   # report.md, plots/
    path = report.write_report(args.run_dir, fits, allow_changed_data=args.allow_changed_data)
    if fits and (check := report_checks.plan_check(args.run_dir, fits)) is not None:
        print(check.text())
    unfinished = report.unfinished_line(run_files.check_run_dir(args.run_dir))
    if unfinished:
        print(unfinished)
    for flag in tower_diagnosis.find_unbalanced_towers(run_files.read_metrics(args.run_dir)):
        print(f"UNBALANCED TOWER: {flag.message}")
    print(f"wrote {path} and plots in {path.parent / run_files.PLOTS_DIR}")
    if args.summary:
        print("\n" + summary.summary_table(args.run_dir, args.summary, args.allow_changed_data))
    return 0
