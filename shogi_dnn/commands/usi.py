"""`shogi-dnn usi [--run-dir RUN | --model FILE.onnx] [--player network|material] [--checkpoint NAME]
[--data DIR] [--backend auto|python-shogi|cshogi] [--name NAME] [--no-mirror-average]`: speak USI on
stdin/stdout (register this command line in a shogi GUI; docs/engine.md); without --run-dir or --model,
with the network packaged with shogi-dnn (shogi_dnn/packaged). The network player searches
with PUCT (the policy as priors when the model has a policy head, else a capture quiescence search at the
leaves; `go depth D`: best-first minimax); the material player is the same engine on the material
baseline fitted on the run's training split. Before anything is read from stdin, players.check finds the
faults it can without TensorFlow (no model file or checkpoint, an ONNX file onnxruntime cannot read or of
another signature, a missing onnxruntime): one line on stderr, exit status 2. The model loads from the
start, `isready` waits for it (shogi_dnn/engine/protocol.py: a load that fails there is answered with
the material player's moves, exit status 1); after `quit` the process exits at once (os._exit: no
interpreter or TensorFlow teardown, which took 4-7 s)."""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

from shogi_dnn.analysis import run_model
from shogi_dnn.engine import players, protocol
from shogi_dnn.errors import RunError
from shogi_dnn.rules import BACKENDS, resolve_backend


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn usi", description=__doc__.split(":", 1)[1].strip())
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--run-dir", default=None, help="the run directory written by `shogi-dnn train` "
                                                        "(neither this nor --model: the packaged network)")
    source.add_argument("--model", default=None,
                        help="an exported ONNX model (`shogi-dnn export --format onnx`): "
                             "no TensorFlow at all")
    parser.add_argument("--player", default="network", choices=players.KINDS,
                        help="network (default) or material: the material baseline as evaluation "
                             "(needs --run-dir)")
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint of the run (default: the final model)")
    parser.add_argument("--data", default=None, help="dataset folder for the material player's fit "
                                                     "(default: the run's data_dir)")
    parser.add_argument("--backend", default="auto", choices=("auto", *BACKENDS), help="move generator")
    parser.add_argument("--name", default=None, help="the engine's `id name` (default: shogi-dnn <player>)")
    parser.add_argument("--mirror-average", action=argparse.BooleanOptionalAction,
                        default=run_model.MIRROR_AVERAGE,
                        help="a Keras model's probability is the mean over the position and its mirror "
                             "(an ONNX export has it baked in)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.player == "material" and args.run_dir is None:
        raise RunError("--player material needs --run-dir "
                       "(the baseline is fitted on the run's training split)")
    backend = resolve_backend(args.backend)
    source = Path(args.run_dir or args.model) if args.run_dir or args.model else None   # None: packaged
    evaluator = players.make_evaluator(args.player, source, args.checkpoint,
                                       args.mirror_average, Path(args.data) if args.data else None)
    players.check(evaluator)                  # RunError: one line on stderr (cli), before `usiok`
    name = args.name or f"shogi-dnn {args.player}"
    # Bytes that are not UTF-8 become U+FFFD (an unknown command), never a UnicodeDecodeError.
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    status = protocol.run_usi(evaluator, stdin, sys.stdout, name=name, backend=backend, stderr=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)            # the engine's work is done and written: skip the slow teardown
