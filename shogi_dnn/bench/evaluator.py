"""`shogi-dnn bench evaluator MODEL.onnx [MODEL.onnx ...] [--data DATA]`: what an exported evaluator costs
and, on held-out games, what it knows; for comparing networks (docs/accuracy.md, "Network frontier") and a
model against its int8 export (`shogi-dnn export --quantize int8`).

Speed: onnxruntime on one intra-op thread (as the engine runs it), the same positions for every model,
`--rounds` rounds that alternate the models (so load from other jobs falls on each alike); each round
evaluates `--positions` positions at each batch size and counts the process's CPU seconds (user + sys)
around the session runs alone. Prints one line per model and batch: the median over rounds of positions
per CPU-second, and each model's ratio to the first model's.

Accuracy (`--data DATA`): each model's win probability (the export's `win_probability`) and, where the
model has a policy output, the rank of the move played among the legal moves, on the positions of DATA's
`--split` (default test): accuracy on decisive positions, log loss and policy top-1 / top-5
(analysis/scoring.py), so that an int8 export is scored on the same positions as its float model.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import numpy as np

from shogi_dnn.errors import RunError


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    times = os.times()
    return times.user + times.system


def positions(data: Path | None, split: str, count: int) -> dict[str, np.ndarray]:
    """`count` positions: the first of DATA's split when given, else synthetic ones (bench/synthetic.py)."""
    from shogi_dnn.bench.synthetic import random_positions
    from shogi_dnn.dataset import shards
    if data is None:
        return random_positions(count, np.random.default_rng(0))
    rows = read_split(data, split, (shards.KEY_BOARD, shards.KEY_HANDS))
    return {k: v[:count] for k, v in rows.items()}


def read_split(data: Path, split: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The columns `keys` of every shard of DATA's `split`, concatenated in shard order."""
    from shogi_dnn.dataset import shards
    manifest = shards.read_manifest(data)
    infos = manifest.split(split)
    if not infos:
        raise RunError(f"{data}: the dataset has no '{split}' shards (--split)")
    parts = [shards.read_positions(manifest.shard_path(s), keys=keys).arrays for s in infos]
    return {k: np.concatenate([p[k] for p in parts]) for k in keys}


def session(path: Path):
    """An onnxruntime session on one intra-op thread, and its (value, policy or None) output names."""
    from shogi_dnn.engine.players import OnnxEvaluator
    evaluator = OnnxEvaluator(path, threads=1)
    evaluator.load()
    return evaluator


def speed(evaluators: list, rows: dict[str, np.ndarray], batch: int) -> list[float]:
    """Positions per CPU-second of each evaluator on all of `rows`, cut into batches of `batch`."""
    board, hands = rows["board"], rows["hands"]
    out = []
    for evaluator in evaluators:
        evaluator.evaluate_logits(board[:batch], hands[:batch])              # warm-up
        start = cpu_seconds()
        for s in range(0, len(board) - batch + 1, batch):
            evaluator.evaluate_logits(board[s:s + batch], hands[s:s + batch])
        used = cpu_seconds() - start
        out.append((len(board) // batch) * batch / max(used, 1e-9))
    return out


def accuracy(evaluator, data: Path, split: str) -> dict[str, float]:
    """Accuracy (decisive positions), log loss and, with a policy, top-1/top-5 over the legal moves."""
    from shogi_dnn.analysis import scoring
    from shogi_dnn.dataset import policy, shards
    rows = read_split(data, split, (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN, shards.KEY_PLY,
                                    shards.KEY_MOVE))
    win, ranks = [], []
    labels = policy.move_labels(rows[shards.KEY_MOVE])
    for s in range(0, len(labels), 4096):
        b, h = rows[shards.KEY_BOARD][s:s + 4096], rows[shards.KEY_HANDS][s:s + 4096]
        p, moves = evaluator.evaluate_logits(b, h)
        win.append(p)
        if moves is not None:
            have = labels[s:s + 4096] >= 0
            rank = np.full(len(b), -1, np.int32)
            if have.any():
                legal = policy.legal_label_masks(b[have], h[have])
                rank[have] = scoring.move_ranks(moves[have], labels[s:s + 4096][have], legal)
            ranks.append(rank)
    prob = np.clip(np.concatenate(win), 1e-7, 1 - 1e-7)
    scorer = scoring.Scorer()
    scorer.add(np.log(prob / (1 - prob)), rows[shards.KEY_WIN].astype(np.float64), rows[shards.KEY_PLY])
    summary = scorer.summary()
    out = {"accuracy": summary["accuracy"], "loss": summary["loss"]}
    if ranks:
        rank = np.concatenate(ranks)
        moved = rank >= 0
        out.update(top1=float((rank[moved] < 1).mean()), top5=float((rank[moved] < 5).mean()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shogi-dnn bench evaluator", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="ONNX exports (`shogi-dnn export`)")
    parser.add_argument("--data", type=Path, default=None,
                        help="a dataset: its positions for the speed runs, and accuracy on --split")
    parser.add_argument("--split", default="test", help="the split scored with --data (default test)")
    parser.add_argument("--batches", default="8,64", help="batch sizes, comma-separated (default 8,64)")
    parser.add_argument("--positions", type=int, default=4096, help="positions per round (default 4096)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    evaluators = [session(path) for path in args.models]
    rows = positions(args.data, args.split, args.positions)
    for batch in batches:
        rates = list(zip(*(speed(evaluators, rows, batch) for _ in range(args.rounds))))
        medians = [statistics.median(r) for r in rates]
        for path, rate, median in zip(args.models, rates, medians):
            print(f"model={path} batch={batch} positions_per_cpu_s={median:,.0f} "
                  f"(rounds {', '.join(f'{r:,.0f}' for r in rate)}) ratio={median / medians[0]:.2f}",
                  flush=True)
    if args.data is not None:
        for path, evaluator in zip(args.models, evaluators):
            scores = accuracy(evaluator, args.data, args.split)
            print(f"model={path} split={args.split} " + " ".join(f"{k}={v:.4f}" for k, v in scores.items()),
                  flush=True)
    return 0
