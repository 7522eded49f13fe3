"""`shogi-dnn predict [--run-dir RUN] [--checkpoint NAME] [--game N] [--out PNG] [--data DIR]
[--no-mirror-average] [--search none|quiescence|nodes=N] [--notation kif|usi] POSITION|RECORD`: the win
probability of a USI/SFEN position for its side to move (named: Black or White), or of every position of
a game record: a table (the probability for the side to move and for Black) plus a PNG win-rate graph
from Black's view, each position valued through a short search (--search, engine/game_values.py; capture
quiescence by default, `none`: the network's own value), the biggest swings that survive the reply marked,
the moves in one notation in both (--notation: KIF by default), with the game's context: which game of
the file, its recorded result and ending, and whether the run trained on it (its split in the run's
dataset, or "not in the run's data"). The probability is the mean over the
position and its left-right mirror (--no-mirror-average: the model alone). Without --run-dir: the network
packaged with shogi-dnn (shogi_dnn/packaged; the graph goes to the working folder, and the note says
whether the game is one it trained on)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from shogi_dnn import packaged
from shogi_dnn.analysis import predict, run_model
from shogi_dnn.dataset import game_keys
from shogi_dnn.engine import game_values, players
from shogi_dnn.errors import ShogiDnnError
from shogi_dnn.folders import run_files


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn predict", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--run-dir", default=None,
                        help="the run directory written by `shogi-dnn train` (default: the network packaged "
                             "with shogi-dnn)")
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint of the run (default: the final model)")
    parser.add_argument("--game", type=int, default=1,
                        help="which game of a multi-game record file (1-based)")
    parser.add_argument("--out", default=None,
                        help="PNG of a record's graph (default: RUN/predict-<name>.png)")
    parser.add_argument("--data", default=None, help="the run's dataset folder, to say whether the game was "
                                                     "trained on (default: run.json's data_dir)")
    parser.add_argument("--mirror-average", action=argparse.BooleanOptionalAction,
                        default=run_model.MIRROR_AVERAGE,
                        help="the probability is the mean over the position and its left-right mirror "
                             "(on by default)")
    parser.add_argument("--search", default=game_values.DEFAULT, metavar="MODE",
                        help="how a game's positions are valued: 'quiescence' (the network's value after the "
                             "captures in reach, the default), 'nodes=N' (a PUCT search of N positions each, "
                             "slower) or 'none' (the network's value)")
    parser.add_argument("--notation", choices=predict.NOTATIONS, default="kif",
                        help="the moves of a game's table and graph: kif (▲７六歩(77), the default) or usi "
                             "(7g7f)")
    parser.add_argument("target", nargs="+",
                        help="'startpos moves ...', 'sfen ... [moves ...]', a bare SFEN, "
                             "or a record file (CSA, KIF, KI2, SFEN lines)")
    return parser.parse_args(argv)


def search_mode(text: str) -> game_values.SearchMode:
    """--search's value. Raises ShogiDnnError "--search: unknown search ..." for a bad one."""
    try:
        return game_values.parse_mode(text)
    except ValueError as exc:
        raise ShogiDnnError(f"--search: {exc}") from None


def is_record_argument(target: list[str]) -> bool:
    """One argument, other than `startpos`, that names an existing path (spaces included) or has no space
    (every position has one: `startpos moves ...`, `sfen ...`, a bare SFEN) names a record file."""
    if len(target) != 1 or target[0].strip() in ("startpos", "sfen"):
        return False
    return os.path.exists(target[0]) or not target[0].split()[1:]     # exists: False for a too-long name


def dataset_notes(run_dir: Path, data: str | None, record, positions) -> tuple[str, str]:
    """Whether the run trained on the game (its split in the run's dataset, or why that is unknown): the
    table's line and the graph's short one."""
    try:
        match = predict.find_in_dataset(run_files.data_dir(run_dir, data), record, positions)
        return match.describe(), match.short()
    except (ShogiDnnError, OSError) as exc:
        return f"split unknown ({exc})", "split unknown"


def packaged_notes(record, positions) -> tuple[str, str]:
    """Whether the packaged network trained on the game (its trained-games keys, dataset/game_keys.py):
    the table's line and the graph's short one."""
    try:
        trained = game_keys.read_trained_games(packaged.model_dir())
    except ShogiDnnError as exc:
        return f"training games unknown ({exc})", "training games unknown"
    if trained is None:
        return "training games unknown (no trained-games.npz)", "training games unknown"
    key = game_keys.record_key(record.start_sfen, positions.moves[1:], positions.turn)
    if np.isin(np.uint64(key), trained.keys):
        return (f"one of the {trained.games:,} games {packaged.NAME} trained on", "a training game")
    return (f"not one of the {trained.games:,} games {packaged.NAME} trained on", "not a training game")


def searcher(model, name: str, own: bool, args: argparse.Namespace) -> players.Evaluator:
    """The evaluator a game's search asks: for the packaged network what players.open_network picks (its
    ONNX export where onnxruntime is installed: the same values, several times faster a call), else the
    loaded model."""
    if not own:
        network = players.open_network(mirror_average=args.mirror_average)
        if isinstance(network, players.OnnxEvaluator):
            return network
    return game_values.ModelEvaluator(model, name)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    mode = search_mode(args.search)
    own = args.run_dir is not None
    run_dir = run_files.check_run_dir(args.run_dir) if own else packaged.model_file("keras").parent
    text = " ".join(args.target)
    is_record = is_record_argument(args.target)
    choice = predict.choose_game(text, args.game) if is_record else None   # "no such file: X" before TF
    record = choice.record if choice else predict.read_position(text)
    if choice:                                      # the graph's folder, before TensorFlow starts
        # The packaged network's folder is the installation's: its graph goes to the working folder.
        folder = run_dir if own else Path.cwd()
        out = Path(args.out) if args.out else folder / f"predict-{choice.path.stem}.png"
        run_files.check_writable(out.parent, "--out" if args.out else "--run-dir" if own else "the working "
                                 "folder", out)
    what = f"{len(record.moves) + 1} positions of {choice.describe()}" if choice else "the position"
    name = run_model.model_name(run_dir, args.checkpoint) if own else packaged.describe()
    print(f"predict: loading {name} "
          f"(TensorFlow starts, a few seconds), then {what}", file=sys.stderr, flush=True)
    # TensorFlow only once the input is known good
    model = run_model.load_predictor(run_dir, args.checkpoint, args.mirror_average)
    if choice is None:
        sfen, p = predict.predict_position(model, text)
        averaged = " (mirror-averaged)" if args.mirror_average else ""
        side = predict.side_name(predict.position_side(sfen))
        print(f"{sfen}\nwin probability for the side to move ({side}){averaged}: {p:.3f}")
        return 0
    values = None if mode.kind == "none" else game_values.curve_values(searcher(model, name, own, args), mode)
    curve = predict.game_curve(model, record, values, mode.describe())
    split, split_short = (dataset_notes(run_dir, args.data, record, curve.positions) if own
                          else packaged_notes(record, curve.positions))
    warnings = predict.caveats(record, run_dir if own else None, "" if own else packaged.TRAINED_ON)
    print(predict.format_curve(curve, record, [choice.describe(), split, *warnings], args.notation))
    names = f"{record.black or 'Black'} vs {record.white or 'White'}"
    predict.plot_curve(curve, out, f"{names} ({choice.path.name}, game {choice.index} of {choice.total})",
                       record, [split_short, mode.short(), *warnings], args.notation)
    print(f"\nwrote {out}")
    return 0
