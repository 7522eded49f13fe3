"""`shogi-dnn` command line: a thin dispatcher to one module per subcommand.

Every subcommand module in `shogi_dnn.commands` has `main(argv) -> int`. Errors a user can cause
(ShogiDnnError, OSError) are printed as one line, never a traceback.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from shogi_dnn.errors import ShogiDnnError

COMMANDS = {
    "convert": "convert game records into HDF5 shards",
    "inspect": "summarise a dataset, shard, record file or position; --sfen dumps positions",
    "train": "staged multi-GPU training",
    "evaluate": "score a trained run on a split",
    "report": "plots and report.md for a run",
    "predict": "win probability of a position or every move of a game",
    "bench": "throughput benchmarks: convert | train | scaling",
    "plan": "time and cost of an epoch and a run on 1, 2, 4, 8 GPUs, before renting",
    "export": "the model as ONNX or a TensorFlow SavedModel (compact inputs -> win probability)",
}


def _usage() -> str:
    lines = ["usage: shogi-dnn COMMAND [options]   (shogi-dnn COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, text in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `shogi-dnn` console script and `python -m shogi_dnn`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from shogi_dnn import __version__
        print(f"shogi-dnn {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"shogi-dnn: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # TensorFlow's C++ start-up chatter (oneDNN, CUDA probing) drowns the progress lines; set
    # TF_CPP_MIN_LOG_LEVEL=0 yourself to see it when debugging a GPU set-up.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        module = importlib.import_module(f"shogi_dnn.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("shogi_dnn.commands"):
            print(f"shogi-dnn {name}: not available in this version", file=sys.stderr)
            return 2
        raise
    try:
        return int(module.main(rest))
    except ShogiDnnError as exc:
        print(f"shogi-dnn {name}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"shogi-dnn {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"shogi-dnn {name}: interrupted", file=sys.stderr)
        return 130
