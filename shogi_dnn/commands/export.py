"""`shogi-dnn export --run-dir RUN --format onnx|savedmodel [--out PATH] [--checkpoint NAME] [--batch N]
[--quantize none|int8] [--data DIR] [--no-mirror-average]`: the run's model as ONNX or a TensorFlow
SavedModel taking the compact inputs
(board [B, 81] and hands [B, 14] uint8, side to move's view) and giving the side to move's win probability
(mean over the position and its left-right mirror unless --no-mirror-average), with <PATH>.json describing
the inputs and output (layout: shogi_dnn/training/export.py). An --out that is a symlink is written where
it points (the link stays)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from shogi_dnn.analysis import run_model
from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files

FORMATS = ("onnx", "savedmodel")     # training.export.FORMATS (not imported: that module starts TensorFlow)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn export", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--run-dir", required=True, help="the run directory written by `shogi-dnn train`")
    parser.add_argument("--format", required=True, choices=FORMATS, help="onnx (onnxruntime) or savedmodel")
    parser.add_argument("--out", default=None, help="output file (onnx) or directory (savedmodel); default "
                                                    "RUN/export/model.onnx or RUN/export/saved_model")
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint of the run (default: the final model)")
    parser.add_argument("--batch", type=int, default=None,
                        help="a fixed batch size (default: dynamic, any batch)")
    parser.add_argument("--quantize", default="none", choices=("none", "int8"),
                        help="int8: an ONNX export with int8 convolutions (onnxruntime "
                             "static quantization, calibrated on the dataset's validation positions; "
                             "docs/engine.md has its speed and accuracy)")
    parser.add_argument("--data", default=None,
                        help="the dataset whose positions calibrate --quantize int8 (default: the run's)")
    parser.add_argument("--mirror-average", action=argparse.BooleanOptionalAction,
                        default=run_model.MIRROR_AVERAGE,
                        help="output the mean over the position and its left-right mirror, as evaluate and "
                             "predict do (on by default; --no-mirror-average: the model alone)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.batch is not None and args.batch < 1:
        raise RunError(f"--batch {args.batch}: must be at least 1 (omit it for a dynamic batch)")
    if args.quantize != "none" and args.format != "onnx":
        raise RunError(f"--quantize {args.quantize}: only with --format onnx")
    run_dir = run_files.check_run_dir(args.run_dir)
    cfg = run_files.read_config(run_dir)
    data_dir = run_files.data_dir(run_dir, args.data) if args.quantize != "none" else None
    out = Path(args.out) if args.out is not None else run_files.export_path(run_dir, args.format)
    out = Path(os.path.realpath(out))       # a symlink (to a folder, to a file): written where it points
    run_files.check_writable(out.parent, "--out" if args.out is not None else "--run-dir", out)   # before TF
    from shogi_dnn.analysis.evaluate import load_run_model, model_source  # TensorFlow from here
    from shogi_dnn.training import export

    model = load_run_model(run_dir, args.checkpoint)
    source = f"{run_dir} {model_source(run_dir, args.checkpoint)}"
    calibration = export.calibration_positions(data_dir) if data_dir is not None else None
    path, sidecar = export.export_model(model, cfg.model, args.format, out, batch=args.batch,
                                        mirror_average=args.mirror_average, source=source,
                                        calibration=calibration)
    batch = f"batch {args.batch}" if args.batch is not None else "dynamic batch"
    averaged = "mirror-averaged" if args.mirror_average else "no mirror averaging"
    quantized = ", int8" if calibration is not None else ""
    print(f"wrote {path} ({args.format}{quantized}, {batch}, {averaged}) and {sidecar}")
    return 0
