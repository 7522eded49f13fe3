#!/usr/bin/env python3
"""Train a preset under several option sets and seeds, then tabulate held-out scores (docs/accuracy.md).

  python scripts/accuracy_sweep.py run --data DATA --test-data TEST --out SWEEP --name lam0.33 \
      --seeds 1,2,3 -- --config train/cpu-small.toml --set train.eval_weight=0.33
  python scripts/accuracy_sweep.py table SWEEP --data DATA --test-data TEST [--split test]

`run` trains one run per seed (`shogi-dnn train ... --set train.seed=S`, skipped when SWEEP/NAME-sS/model.keras
exists), then writes each run's mirror-averaged logits on the validation split of DATA and on every shard
of TEST (games drawn the same way with other seeds) as SWEEP/NAME-sS/pred-<split>.npz (logit [N] float32, in
shard order). `table` scores every run and the baselines on the same positions: the test games that repeat
a training game move for move are removed first (the engine replays itself), accuracy is over decisive
positions, and the intervals are 95% bootstrap intervals over games (scoring.bootstrap_games).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from shogi_dnn.analysis import scoring, tactics
from shogi_dnn.dataset import shards
from shogi_dnn.folders import run_files

KEYS = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_WIN, shards.KEY_PLY, shards.KEY_EVAL, shards.KEY_GAME,
        shards.KEY_MOVE)
PHASES = ((0, 40), (40, 80), (80, 10**6))


def split_paths(data: Path, split: str) -> list[Path]:
    manifest = shards.read_manifest(data)
    infos = manifest.shards if split == "all" else manifest.split(split)
    return [manifest.shard_path(s) for s in infos]


def read_split(paths: list[Path]) -> dict[str, np.ndarray]:
    parts = [shards.read_positions(p, keys=KEYS).arrays for p in paths]
    return {k: np.concatenate([p[k] for p in parts]) for k in KEYS}


def game_signatures(data: dict[str, np.ndarray]) -> dict[int, bytes]:
    """game id -> sha1 of its positions (board + hands, in order): equal games have equal signatures."""
    out: dict[int, bytes] = {}
    games = data[shards.KEY_GAME]
    starts = np.flatnonzero(np.r_[True, games[1:] != games[:-1]])
    ends = np.r_[starts[1:], len(games)]
    for s, e in zip(starts, ends):
        h = hashlib.sha1(data[shards.KEY_BOARD][s:e].tobytes())
        h.update(data[shards.KEY_HANDS][s:e].tobytes())
        out[int(games[s])] = h.digest()
    return out


def predict(run_dir: Path, paths: list[Path], out: Path, checkpoint: str | None = None) -> None:
    """RUN's mirror-averaged value logits ([N] float32) and, for a model with a policy head, the rank of the
    move played among the legal moves ([N] int32, -1 where no move follows; scoring.move_ranks); of
    RUN/model.keras, or of a checkpoint when named."""
    from shogi_dnn.analysis.run_model import load_run_model
    from shogi_dnn.dataset import policy
    from shogi_dnn.training import model as model_lib
    model = load_run_model(run_dir, checkpoint)
    has_policy = model_lib.has_policy_head(model) if hasattr(model_lib, "has_policy_head") else False
    logits, ranks = [], []
    for p in paths:
        arr = shards.read_positions(p, keys=(shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_MOVE)).arrays
        for s in range(0, len(arr[shards.KEY_BOARD]), 8192):
            b, h = arr[shards.KEY_BOARD][s:s + 8192], arr[shards.KEY_HANDS][s:s + 8192]
            if not has_policy:
                logits.append(np.asarray(model_lib.value_logits(model, b, h, mirror_average=True)))
                continue
            value, moves = model_lib.value_and_policy_logits(model, b, h, mirror_average=True)   # one pass
            logits.append(np.asarray(value))
            labels = policy.move_labels(arr[shards.KEY_MOVE][s:s + 8192])
            rank = np.full(len(labels), -1, np.int32)
            have = labels >= 0
            if have.any():
                legal = policy.legal_label_masks(b[have], h[have])
                rank[have] = scoring.move_ranks(np.asarray(moves)[have], labels[have], legal)
            ranks.append(rank)
    arrays = {"logit": np.concatenate(logits).astype(np.float32)}
    if has_policy:
        arrays["rank"] = np.concatenate(ranks)
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(out)


def cmd_run(args: argparse.Namespace) -> int:
    for seed in [int(s) for s in args.seeds.split(",")]:
        run = args.out / f"{args.name}-s{seed}"
        if not (run / "model.keras").is_file():
            cmd = ["shogi-dnn", "train", "--data", str(args.data), "--run-dir", str(run), *args.train_args,
                   "--set", f"train.seed={seed}"]
            if run.exists():
                cmd.append("--resume")
            print(" ".join(cmd), flush=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            with open(args.out / f"{args.name}-s{seed}.log", "a") as log:
                if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode:
                    print(f"{run}: training failed (see the log)", file=sys.stderr)
                    return 1
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            # CPU seconds (user + sys) of this training process; a resumed run adds its parts.
            timing = run / "sweep-train-cpu.json"
            done = json.loads(timing.read_text()) if timing.is_file() else {"cpu_s": 0.0, "wall_s": 0.0}
            timing.write_text(json.dumps({"cpu_s": done["cpu_s"] + cpu,
                                          "wall_s": done["wall_s"] + time.monotonic() - start}))
        # A run with a weight average (optim.ema) is also scored on its trained weights (the last
        # checkpoint; model.keras holds the average): the row "NAME raw".
        ema = json.loads((run / "config.json").read_text())["optim"].get("ema", 0) > 0
        for split, data in (("validation", args.data), ("test", args.test_data)):
            paths = None if data is None else split_paths(
                data, "validation" if split == "validation" else args.test_split)
            for suffix, checkpoint in (("", None), *((("-raw", "latest"),) if ema else ())):
                out = run / f"pred-{split}{suffix}.npz"
                if paths is not None and not out.is_file():
                    predict(run, paths, out, None if checkpoint is None else
                            run_files.find_checkpoint(run).name)
    return 0


def scores(logits: np.ndarray, win: np.ndarray, ply: np.ndarray) -> dict[str, float]:
    """accuracy (decisive positions), loss, ece and accuracy by phase (acc0, acc40, acc80): scoring.Scorer."""
    scorer = scoring.Scorer(ply_edges=(*(lo for lo, _ in PHASES), PHASES[-1][1]))
    scorer.add(logits, win, ply)
    summary = scorer.summary()
    out = {k: summary[k] for k in ("accuracy", "loss", "ece")}
    phases = {row["lo"]: row["accuracy"] for row in summary["by_ply"]}
    out.update({f"acc{lo}": phases.get(float(lo), float("nan")) for lo, _ in PHASES})
    return out


def material_interval(model: np.ndarray, material: np.ndarray, win: np.ndarray,
                      games: np.ndarray) -> dict[str, scoring.Interval]:
    """95% intervals over games (scoring.bootstrap_games, paired) of model minus material: accuracy, loss."""
    sums = {"model": scoring.GameSums(), "material": scoring.GameSums()}
    sums["model"].add(games, model, win)
    sums["material"].add(games, material, win)
    return scoring.bootstrap_games(sums, [("model", "material")]).differences[("model", "material")]


def cmd_table(args: argparse.Namespace) -> int:
    from shogi_dnn.analysis import baselines as bl
    train_paths = split_paths(args.data, "train")
    if args.split == "test":
        data = read_split(split_paths(args.test_data, args.test_split))
        seen = set(game_signatures(read_split(train_paths)).values())
        sig = game_signatures(data)
        keep_games = np.array([g for g, s in sig.items() if s not in seen])
        keep = np.isin(data[shards.KEY_GAME], keep_games)
        print(f"test: {len(sig)} games, {len(sig) - len(keep_games)} repeat a training game and are removed")
    else:
        data = read_split(split_paths(args.data, "validation"))
        keep = np.ones(len(data[shards.KEY_WIN]), bool)
    win = data[shards.KEY_WIN].astype(np.float64)[keep]
    ply = data[shards.KEY_PLY][keep]
    games = data[shards.KEY_GAME][keep]
    rows: dict[str, list[dict[str, float]]] = {}
    probs: dict[str, list[np.ndarray]] = {}
    free, _ = tactics.free_captures(data[shards.KEY_BOARD][keep])
    for pred in sorted([*args.sweep.glob(f"*/pred-{args.split}.npz"), *args.sweep.glob(f"*/pred-{args.split}-raw.npz")]):
        name = pred.parent.name.rsplit("-s", 1)[0] + (" raw" if pred.stem.endswith("-raw") else "")
        with np.load(pred) as saved:
            logits = saved["logit"].astype(np.float64)[keep]
            rank = saved["rank"][keep] if "rank" in saved.files else None
        row = scores(logits, win, ply)
        row["free_p"] = float(scoring.sigmoid(logits[free]).mean()) if free.any() else float("nan")
        if rank is not None:
            moved = rank >= 0
            row["top1"], row["top5"] = float((rank[moved] < 1).mean()), float((rank[moved] < 5).mean())
        timing = pred.parent / "sweep-train-cpu.json"
        if timing.is_file():
            row["cpu_min"] = json.loads(timing.read_text())["cpu_s"] / 60
        rows.setdefault(name, []).append(row)
        probs.setdefault(name, []).append(scoring.sigmoid(logits))
    base = bl.fit_baselines(train_paths)             # material, piece-square and the engine's a, fitted once
    board, hands = data[shards.KEY_BOARD][keep], data[shards.KEY_HANDS][keep]
    baselines = {"material baseline": base.material_logits(board, hands)}
    if base.engine is not None:
        baselines["engine evaluation (fitted a)"] = base.engine_logits(data[shards.KEY_EVAL][keep])
    baselines["piece-square baseline"] = base.piece_square.logits(board, hands)
    print(f"{args.split}: {len(np.unique(games))} games, {len(win)} positions ({int((win != 0.5).sum())} decisive)")
    print(f"free capture (analysis/tactics.py): {int(free.sum())} positions ({free.mean():.1%}), result rate "
          f"there {win[free].mean():.4f}" + (f", engine {scoring.sigmoid(baselines['engine evaluation (fitted a)'][free]).mean():.4f}"
                                              if "engine evaluation (fitted a)" in baselines else ""))
    print("| option | runs | accuracy | log loss | ECE | acc. ply 0-40 | 40-80 | 80+ | acc. - material (games 95%) "
          "| loss - material | P(win) at a free capture | policy top-1 | top-5 | train CPU-min |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    def fmt(vals: list[float]) -> str:
        return f"{np.mean(vals):.4f}" + (f" ({min(vals):.4f}-{max(vals):.4f})" if len(vals) > 1 else "")
    for name, rs in list(rows.items()) + [(k, [scores(v, win, ply)]) for k, v in baselines.items()]:
        cells = [fmt([r[k] for r in rs]) for k in ("accuracy", "loss", "ece")]
        cells += [f"{np.mean([r[f'acc{lo}'] for r in rs]):.3f}" for lo, _ in PHASES]
        if name in probs:                            # the seeds' mean probability against material
            mean = np.clip(np.mean(probs[name], axis=0), 1e-12, 1 - 1e-12)
            diff = material_interval(np.log(mean / (1 - mean)), baselines["material baseline"], win, games)
            cells += [f"{diff['accuracy'].lo:+.3f}..{diff['accuracy'].hi:+.3f}",
                      f"{diff['loss'].lo:+.3f}..{diff['loss'].hi:+.3f}"]
        else:
            cells += ["", ""]
        free_p = [r["free_p"] if "free_p" in r else float(scoring.sigmoid(baselines[name][free]).mean())
                  for r in rs]
        cells.append(fmt(free_p))
        cells += [fmt([r[k] for r in rs]) if all(k in r for r in rs) else "" for k in ("top1", "top5")]
        cells.append(f"{np.mean([r['cpu_min'] for r in rs]):.1f}" if all("cpu_min" in r for r in rs) else "")
        print(f"| {name} | {len(rs)} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def cmd_subset(args: argparse.Namespace) -> int:
    """A dataset folder holding the first `fraction` of DATA's training shards (by games) and all its other
    shards: symbolic links and a manifest, nothing copied (the learning curve's smaller training sets)."""
    manifest = json.loads((args.data / shards.MANIFEST_NAME).read_text())
    train = [s for s in manifest["shards"] if s["split"] == "train"]
    want, kept, games = args.fraction * sum(s["games"] for s in train), [], 0
    for s in train:
        if games >= want - 1e-9:
            break
        kept.append(s)
        games += s["games"]
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = kept + [s for s in manifest["shards"] if s["split"] != "train"]
    for s in chosen:
        link = args.out / s["path"]
        if not link.exists():
            link.symlink_to((args.data / s["path"]).resolve())
    manifest["shards"] = chosen
    manifest["totals"]["subset_of"] = str(args.data)
    (args.out / shards.MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
    print(f"{args.out}: {len(kept)} of {len(train)} training shards, {games} games")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--data", type=Path, required=True)
    run.add_argument("--test-data", type=Path)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--name", required=True)
    run.add_argument("--seeds", default="1,2,3")
    run.add_argument("--test-split", default="all", choices=("all", "test"),
                     help="the shards of --test-data to score: all (a dataset of other games) or its test split")
    run.add_argument("train_args", nargs=argparse.REMAINDER)
    table = sub.add_parser("table")
    table.add_argument("sweep", type=Path)
    table.add_argument("--data", type=Path, required=True)
    table.add_argument("--test-data", type=Path)
    table.add_argument("--split", default="test", choices=("test", "validation"))
    table.add_argument("--test-split", default="all", choices=("all", "test"))
    table.add_argument("--json")
    subset = sub.add_parser("subset")
    subset.add_argument("--data", type=Path, required=True)
    subset.add_argument("--out", type=Path, required=True)
    subset.add_argument("--fraction", type=float, required=True)
    args = parser.parse_args(argv)
    if args.command == "subset":
        return cmd_subset(args)
    if args.command == "run":
        args.train_args = [a for a in args.train_args if a != "--"]
        args.out.mkdir(parents=True, exist_ok=True)
        return cmd_run(args)
    return cmd_table(args)


if __name__ == "__main__":
    sys.exit(main())
