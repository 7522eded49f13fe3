"""`shogi-dnn` command line: a thin dispatcher to one module per subcommand.

Every subcommand module in `shogi_dnn.commands` has `main(argv) -> int`. Errors a user can cause
(ShogiDnnError, OSError, and running out of memory: MemoryError, TensorFlow's ResourceExhaustedError,
errors.is_out_of_memory) are printed as one line (errors.printable: a name's line break shown escaped),
never a traceback; nor is a closed output pipe (`shogi-dnn --help | head -2`). `--verbose` anywhere on the
line shows TensorFlow's start-up lines (once; tf_quiet.py), which are off otherwise.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys

from shogi_dnn.commands import tf_quiet
from shogi_dnn.errors import ShogiDnnError, is_out_of_memory, out_of_memory_message, printable

COMMANDS = {
    "convert": "convert game records into HDF5 shards",
    "annotate": "a USI engine's evaluations and off-path positions for a dataset",
    "selfplay": "games of a USI engine against itself (or two engines), CSA with its scores",
    "inspect": "summarise a dataset, shard, record file or position; --sfen dumps positions",
    "train": "staged multi-GPU training",
    "evaluate": "score a trained run on a split",
    "report": "plots and report.md for a run",
    "predict": "win probability of a position or every move of a game",
    "bench": "benchmarks: convert | train | scaling | planes | games (engine strength) | startup",
    "plan": "time and cost of an epoch and a run on 1, 2, 4, 8 GPUs, before renting",
    "export": "the model as ONNX or a TensorFlow SavedModel (compact inputs -> win probability)",
    "usi": "play as a USI engine (shogi GUIs, tournament runners) with the run's network",
}


def _usage() -> str:
    lines = ["usage: shogi-dnn COMMAND [options] [--verbose]   (shogi-dnn COMMAND --help for its options)",
             "",
             "commands:"]
    lines += [f"  {name:<9} {text}" for name, text in COMMANDS.items()]
    lines += ["", "--verbose: also show TensorFlow's start-up messages (devices, CPU features)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `shogi-dnn` console script and `python -m shogi_dnn`."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly. Python would report the failed flush of
        # stdout at exit, so stdout points at /dev/null from here on.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141                      # as a shell reports a process killed by SIGPIPE


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv[:argv.index("--")] if "--" in argv else "--verbose" in argv
    if verbose:
        argv.remove("--verbose")
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
    # TensorFlow's C++ start-up chatter (oneDNN, CUDA probing) drowns the progress lines: off unless
    # --verbose (then printed once), whichever module imports TensorFlow first.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "3")
    tf_quiet.install(verbose)
    try:                                   # a Ctrl-C while the command's modules load is one line too
        try:
            module = importlib.import_module(f"shogi_dnn.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("shogi_dnn.commands"):
                print(f"shogi-dnn {name}: not available in this version", file=sys.stderr)
                return 2
            raise
        return int(module.main(rest))
    except BrokenPipeError:                # an OSError too, but not an error: main() ends quietly
        raise
    except (ShogiDnnError, OSError) as exc:
        print(f"shogi-dnn {name}: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"shogi-dnn {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:               # only a memory failure is translated; the rest propagates
        if not is_out_of_memory(exc):
            raise
        print(f"shogi-dnn {name}: error: {out_of_memory_message(name, exc)}", file=sys.stderr)
        return 2
    finally:           # commands that catch Ctrl-C themselves (convert, annotate) return 130 too
        _forget_unhandled_interrupt()


def _forget_unhandled_interrupt() -> None:
    """Exit with the status returned, wherever a Ctrl-C landed. A KeyboardInterrupt raised inside
    `exec(<string>)` (as can happen during `import tensorflow`) sets CPython's "unhandled
    KeyboardInterrupt" flag although we caught it, and `python -m` then kills itself with SIGINT after
    exiting (status -2, not 130). Every `exec` of a string clears that flag before it runs (and this one
    raises nothing)."""
    exec("pass")  # noqa: S102 (a constant: only its side effect on the flag is wanted)
