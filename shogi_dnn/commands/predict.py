"""`shogi-dnn predict --run-dir RUN [--checkpoint NAME] [--game N] [--out PNG] [--no-mirror-average]
POSITION|RECORD`: the win probability for the side to move of a USI/SFEN position, or of every position of a
game record (a table plus a PNG win-rate graph from Black's view, the biggest swings marked); with
the mean over the position and its left-right mirror (--no-mirror-average: the model alone)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shogi_dnn import run_files
from shogi_dnn.analysis import predict, run_model


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn predict", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--run-dir", required=True, help="the run directory written by `shogi-dnn train`")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint of the run (default: the final model)")
    parser.add_argument("--game", type=int, default=1, help="which game of a multi-game record file (1-based)")
    parser.add_argument("--out", default=None, help="PNG of a record's graph (default: RUN/predict-<name>.png)")
    parser.add_argument("--mirror-average", action=argparse.BooleanOptionalAction, default=True,
                        help="the probability is the mean over the position and its left-right mirror "
                             "(on by default)")
    parser.add_argument("target", nargs="+", help="'startpos moves ...', 'sfen ... [moves ...]', a bare SFEN, "
                                                  "or a record file (CSA, KIF, KI2, SFEN lines)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    run_dir = run_files.check_run_dir(args.run_dir)
    text = " ".join(args.target)
    is_record = len(args.target) == 1 and Path(text).is_file()
    record = predict.read_game(text, args.game) if is_record else predict.read_position(text)
    if is_record:                                   # the graph's folder, before TensorFlow starts
        out = Path(args.out) if args.out else run_dir / f"predict-{Path(text).stem}.png"
        run_files.check_writable(out.parent, "--out" if args.out else "--run-dir", out)
    what = f"{len(record.moves) + 1} positions of {Path(text).name}" if is_record else "the position"
    print(f"predict: loading {run_model.model_name(run_dir, args.checkpoint)} (TensorFlow starts, a few seconds), "
          f"then {what}", file=sys.stderr, flush=True)
    model = run_model.load_run_model(run_dir, args.checkpoint)  # TensorFlow only once the input is known good
    if args.mirror_average:
        from shogi_dnn.training.model import mirror_averaged

        model = mirror_averaged(model)
    if not is_record:
        sfen, p = predict.predict_position(model, text)
        averaged = " (mirror-averaged)" if args.mirror_average else ""
        print(f"{sfen}\nwin probability for the side to move{averaged}: {p:.3f}")
        return 0
    curve = predict.game_curve(model, record)
    print(predict.format_curve(curve))
    names = f"{record.black or 'Black'} vs {record.white or 'White'}"
    predict.plot_curve(curve, out, f"{names} ({Path(text).name}, game {args.game})")
    print(f"\nwrote {out}")
    return 0
