"""`shogi-dnn train --config train/X.toml --data DIR --run-dir RUN [--set k=v ...] [--simulate-devices N]
[--devices LIST] [--resume]`: staged multi-GPU training (see shogi_dnn.trainer)."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
from pathlib import Path

from shogi_dnn.config import load_config

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shogi-dnn train",
        description="Train the value network on a dataset written by `shogi-dnn convert`, on every local GPU "
                    "(or --devices / --simulate-devices). Ctrl-C or SIGTERM saves a checkpoint and exits 0; "
                    "--resume continues exactly where the run stopped.")
    parser.add_argument("--config", required=True, metavar="TOML", help="preset, e.g. train/home-1gpu.toml")
    parser.add_argument("--data", required=True, metavar="DIR", help="dataset folder (with manifest.json)")
    parser.add_argument("--run-dir", required=True, metavar="RUN", help="where checkpoints, metrics and the model go")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value (repeatable), e.g. --set train.seed=3")
    parser.add_argument("--simulate-devices", type=int, default=None, metavar="N",
                        help="split the CPU into N logical devices and train on them as N towers")
    parser.add_argument("--devices", default=None, metavar="LIST",
                        help="comma-separated devices to use, e.g. /gpu:0,/gpu:1 (default: every GPU)")
    parser.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    return parser


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run (printed when it stops on a signal)."""
    parts = ["shogi-dnn", "train", "--config", args.config, "--data", args.data, "--run-dir", args.run_dir]
    for item in args.set:
        parts += ["--set", item]
    if args.simulate_devices is not None:
        parts += ["--simulate-devices", str(args.simulate_devices)]
    if args.devices:
        parts += ["--devices", args.devices]
    return shlex.join(parts + ["--resume"])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = load_config(Path(args.config), args.set)      # config errors before TensorFlow starts
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")         # before TensorFlow loads: no C++ INFO lines
    logging.getLogger("tensorflow").setLevel(logging.WARNING)   # nor its per-step Python INFO lines
    from shogi_dnn import towers                           # TensorFlow is imported only from here on
    from shogi_dnn.trainer import Trainer

    devices = [d for d in args.devices.split(",") if d.strip()] if args.devices else None
    strategy = towers.make_strategy(simulate_devices=args.simulate_devices, devices=devices)
    trainer = Trainer(config, Path(args.data), Path(args.run_dir), strategy, resume=args.resume,
                      resume_command=resume_command(args))
    trainer.run()
    return 0
