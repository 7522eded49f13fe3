"""Score a trained run on a dataset split with the same towers as training, next to two baselines.

Each tower predicts its share of every global batch (strategy.run); the logits come back per tower
(experimental_local_results) with the labels, plies and game ratings of the same rows, and feed one
scoring.Scorer per tower. The total is the merge of the towers' scorers, so per-GPU numbers and the
total are consistent by construction (the total loss is the positions-weighted mean of the towers').

RUN/eval-<split>.json (written atomically) holds: split, data_dir, model, positions, loss, accuracy
(decisive positions), decisive, draws {positions, loss, mean_prob}, brier, ece, reliability, by_ply,
by_rating, per_gpu [{device, positions, loss, accuracy}], per_gpu_spread {loss, accuracy},
baselines {side_to_move, material, train_positions, fitted_on}, mirror_average (whether the model's
probability was the mean over the position and its left-right mirror, model.value_logits), seconds,
positions_per_s.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from shogi_dnn import config, run_files, shards
from shogi_dnn.analysis import baselines, scoring
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.training import cluster, pipeline, schedule, towers
from shogi_dnn.training import model as model_lib

log = logging.getLogger(__name__)

SPLITS = (*shards.SPLITS, "all")
MIN_EVAL_BATCH = 1024        # positions per global batch at least: fewer Python steps than a training batch


def split_paths(data_dir: Path, split: str, verify_full: bool = False) -> list[Path]:
    """Shard paths of a split of a dataset folder ("all": every shard), checked against the manifest
    (shards.verify_shards; `verify_full`: with their sha256).

    Raises:
        ConfigError: unknown split. RunError: the dataset has no shard in that split.
        ShardFormatError: a shard differs from its manifest entry.
    """
    if split not in SPLITS:
        raise ConfigError(f"--split {split!r}: must be one of {', '.join(SPLITS)}")
    manifest = shards.read_manifest(data_dir)
    infos = manifest.shards if split == "all" else manifest.split(split)
    if not infos:
        raise RunError(f"{data_dir}: the dataset has no {split!r} shards")
    shards.verify_shards(manifest, infos, full=verify_full)
    return [manifest.shard_path(s) for s in infos]


def run_strategy(run_dir: Path, simulate_devices: int | None) -> tf.distribute.Strategy:
    """The towers of the run: --simulate-devices N if given; else the run's devices (a run trained on
    N simulated CPU devices is re-simulated with N); else the default devices."""
    if simulate_devices is not None:
        return towers.make_strategy(simulate_devices=simulate_devices)
    devices = [str(d) for d in run_files.read_run_json(run_dir).get("devices", [])]
    local = this_machine_devices(devices)
    if local != devices:      # a multi-worker run: this machine's devices of the same kind
        strategy = _cluster_run_strategy(devices, local)
        log.info("the run was trained on %d towers of a cluster (%s ...); evaluating on this machine's %s",
                 len(devices), devices[0], ", ".join(cluster.device_names(strategy)))
        return strategy
    if len(devices) > 1 and all("CPU" in d.upper() for d in devices):
        return towers.make_strategy(simulate_devices=len(devices))
    if devices:
        try:
            return towers.make_strategy(devices=devices)
        except RunError as exc:
            raise RunError(f"{exc}; the run was trained on {', '.join(devices)}: "
                           "pass --simulate-devices N to evaluate on this machine") from exc
    return towers.make_strategy()


_WORKER_PREFIX = re.compile(r"^[^/]*@[^/]*/")      # 'worker1@10.0.0.2:2222/' (cluster.device_names)


def this_machine_devices(devices: Sequence[str]) -> list[str]:
    """The run.json devices without a cluster's 'workerN@host:port/' prefix, deduplicated in order:
    ['worker0@a:1/GPU:0', 'worker0@a:1/GPU:1', 'worker1@b:1/GPU:0', ...] -> ['GPU:0', 'GPU:1']."""
    local = [_WORKER_PREFIX.sub("", d) for d in devices]
    if local == list(devices):
        return local
    return list(dict.fromkeys(local))


def _cluster_run_strategy(devices: Sequence[str], local: Sequence[str]) -> tf.distribute.Strategy:
    """Towers for a multi-worker run on this one machine: its devices of the run's kind (N logical CPUs
    for N CPU devices a worker); those of them that exist, else the default devices."""
    if all("CPU" in d.upper() for d in local):
        return towers.make_strategy(simulate_devices=len(local)) if len(local) > 1 else \
            towers.make_strategy(devices=local)
    try:
        return towers.make_strategy(devices=local)
    except RunError:
        known = {d.name.rsplit("device:", 1)[-1].upper() for d in tf.config.list_logical_devices()}
        present = [d for d in local if d.upper() in known]
        log.warning("this machine lacks some of the run's devices (%s); using %s", ", ".join(local),
                    ", ".join(present) or "the default devices")
        return towers.make_strategy(devices=present) if present else towers.make_strategy()


def load_run_model(run_dir: Path, checkpoint: str | None = None) -> keras.Model:
    """The run's model: a checkpoint if named, else RUN/model.keras, else the latest checkpoint (run_model.py).

    Call inside strategy.scope() to place the weights on every tower. Raises RunError (one line).
    """
    from shogi_dnn.analysis import run_model

    return run_model.load_run_model(run_dir, checkpoint)


def model_source(run_dir: Path, checkpoint: str | None = None) -> str:
    """What load_run_model loads: "model.keras" or the checkpoint's name."""
    if checkpoint is None and (Path(run_dir) / run_files.MODEL_FILE).is_file():
        return run_files.MODEL_FILE
    from shogi_dnn.training import checkpoints

    return checkpoints.find_checkpoint(Path(run_dir), checkpoint).name


def position_extras(paths: Sequence[Path]) -> dict[str, np.ndarray]:
    """[N] rating (float32, NaN unknown) and ply (int16) of every row of the shards, in file order."""
    ratings = [baselines.position_ratings(p).astype(np.float32) for p in paths]
    plies = [shards.read_positions(p, keys=[shards.KEY_PLY]).arrays[shards.KEY_PLY] for p in paths]
    return {"rating": np.concatenate(ratings), "ply_check": np.concatenate(plies)}


def eval_dataset(paths: Sequence[Path], global_batch: int) -> tf.data.Dataset:
    """pipeline.make_eval_dataset with each row's game rating zipped in (same file order)."""
    extras = tf.data.Dataset.from_tensor_slices(position_extras(paths)).batch(global_batch)
    return tf.data.Dataset.zip((pipeline.make_eval_dataset(paths, global_batch=global_batch), extras)).map(
        _merge_columns)


@tf.autograph.experimental.do_not_convert      # plain tensor code: nothing for AutoGraph to convert
def _merge_columns(rows: dict[str, tf.Tensor], more: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {**rows, **more}


def make_predict_step(strategy: tf.distribute.Strategy, model: keras.Model, mirror_average: bool = False):
    """step(dist_batch) -> per-replica {logit [b] float32, win, ply, ply_check, rating} of each tower's rows
    (mirror_average: the logit of the mean probability over each board and its mirror, model.value_logits)."""

    @tf.autograph.experimental.do_not_convert
    def replica_predict(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        logits = model_lib.value_logits(model, batch["board"], batch["hands"], mirror_average=mirror_average)
        return {"logit": logits, "win": batch["win"], "ply": batch["ply"],
                "ply_check": batch["ply_check"], "rating": batch["rating"]}

    @tf.function
    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return strategy.run(replica_predict, args=(batch,))

    return step


def score_towers(strategy: tf.distribute.Strategy, model: keras.Model, paths: Sequence[Path],
                 global_batch: int, mirror_average: bool = False) -> list[scoring.Scorer]:
    """One Scorer per tower over every row of the shards (progress bar over global batches)."""
    step = make_predict_step(strategy, model, mirror_average)
    scorers = [scoring.Scorer() for _ in range(strategy.num_replicas_in_sync)]
    dist = strategy.experimental_distribute_dataset(eval_dataset(paths, global_batch))
    total = -(-schedule.count_positions(paths) // global_batch)     # the last batch may be partial
    pipeline.take_read_error()            # clear: only this pass's errors count
    try:
        for batch in tqdm(dist, total=total, desc="evaluate", unit="batch", leave=False):
            _score_batch(strategy, step, batch, scorers)
    except tf.errors.OpError:      # a damaged chunk: the pipeline's one-line error, not TensorFlow's
        error = pipeline.take_read_error()
        if error is None:
            raise
        raise error from None
    error = pipeline.take_read_error()    # the pipeline ended early on a damaged chunk: never a partial score
    if error is not None:
        raise error
    return scorers


def _score_batch(strategy: tf.distribute.Strategy, step, batch, scorers: list[scoring.Scorer]) -> None:
    """Add one distributed batch's predictions to the per-tower scorers."""
    out = step(batch)
    local = {k: [t.numpy() for t in strategy.experimental_local_results(v)] for k, v in out.items()}
    for i, scorer in enumerate(scorers):
        if not np.array_equal(local["ply"][i], local["ply_check"][i]):
            raise RunError("evaluation rows and their game ratings went out of step (a pipeline bug)")
        scorer.add(local["logit"][i], local["win"][i], local["ply"][i], local["rating"][i])


def _baseline_sources(run_dir: Path, data_dir: Path) -> list[Path]:
    recorded = run_files.read_run_json(run_dir).get("data_dir")
    return [Path(recorded), data_dir] if recorded else [data_dir]


def evaluate_run(run_dir: str | Path, data: str | Path | None = None, split: str = "validation",
                 checkpoint: str | None = None, simulate_devices: int | None = None,
                 global_batch: int | None = None, mirror_average: bool = False,
                 verify_shards: bool = False) -> dict[str, Any]:
    """Evaluate a run on a split and write RUN/eval-<split>.json. Returns the JSON as a dict.

    global_batch: positions per step over all towers (default eval_global_batch; rounded up to the towers).
    mirror_average: score the mean probability over each position and its left-right mirror (the model
    runs twice per position); recorded as the result's "mirror_average".
    verify_shards: check the split's shards against the manifest with their full sha256 (a cheap check of
    size, counts, schema and shapes is always made before the model is loaded).
    """
    run_dir = run_files.check_run_dir(run_dir)
    data_dir = run_files.data_dir(run_dir, data)
    paths = split_paths(data_dir, split, verify_full=verify_shards)
    strategy = run_strategy(run_dir, simulate_devices)
    with strategy.scope():
        model = load_run_model(run_dir, checkpoint)
    towers_count = strategy.num_replicas_in_sync
    global_batch = (-(-global_batch // towers_count) * towers_count if global_batch
                    else eval_global_batch(run_files.read_config(run_dir), towers_count))
    start = time.perf_counter()
    scorers = score_towers(strategy, model, paths, global_batch, mirror_average)
    seconds = time.perf_counter() - start
    result = summarise(scorers, list(strategy.extended.worker_devices))
    fitted, source = baselines.fitted_baselines(run_dir, data_dir)
    result["baselines"] = {**baselines.score_baselines(fitted, paths), "fitted_on": f"{source} (train split)"}
    result.update(split=split, data_dir=str(data_dir), model=model_source(run_dir, checkpoint),
                  global_batch=global_batch, mirror_average=bool(mirror_average), seconds=round(seconds, 3),
                  positions_per_s=round(result["positions"] / seconds, 1) if seconds > 0 else None)
    run_files.write_json_atomic(run_files.eval_path(run_dir, split), result, allow_nan=False)
    return result


def eval_global_batch(cfg: config.Config, towers_count: int, minimum: int = MIN_EVAL_BATCH) -> int:
    """The training batch, at least `minimum`, rounded up to a multiple of the evaluating towers (any
    tower count works: evaluation does not update, so the batch size does not change the scores)."""
    batch = max(minimum, cfg.train.global_batch or cfg.train.per_replica_batch * towers_count)
    return -(-batch // towers_count) * towers_count


def summarise(scorers: Sequence[scoring.Scorer], devices: Sequence[str]) -> dict[str, Any]:
    """Total scores (the merge of the towers') plus per_gpu rows and their spread."""
    total = scoring.Scorer()
    per_gpu = []
    for device, scorer in zip(devices, scorers):
        total.merge(scorer)
        s = scorer.summary(with_buckets=False)
        per_gpu.append({"device": device, "positions": s["positions"], "loss": s["loss"],
                        "accuracy": s["accuracy"]})
    result = total.summary()
    result["per_gpu"] = per_gpu
    result["per_gpu_spread"] = {k: scoring.spread([g[k] for g in per_gpu]) for k in ("loss", "accuracy")}
    return result


def format_table(result: dict[str, Any]) -> str:
    """A readable summary of an evaluation: model vs baselines, per GPU, by ply, by rating, calibration."""
    b = result["baselines"]
    averaged = ", model mirror-averaged" if result.get("mirror_average") else ""
    lines = [(f"split {result['split']}: {result['positions']} positions ({result['decisive']} decisive, "
             f"{result['draws']['positions']} draws{averaged})"), "",
             f"{'':14}{'loss':>8}{'accuracy':>10}{'brier':>8}{'ece':>8}"]
    for name, row in (("model", result), ("material", b["material"]), ("side to move", b["side_to_move"])):
        lines.append(f"{name:14}{_f(row['loss'])}{_f(row['accuracy'], 10)}{_f(row['brier'])}{_f(row['ece'])}")
    lines += ["", f"{'per GPU':40}{'positions':>10}{'loss':>8}{'accuracy':>10}"]
    lines += [f"{g['device'].split('device:')[-1]:40}{g['positions']:>10}{_f(g['loss'])}{_f(g['accuracy'], 10)}"
              for g in result["per_gpu"]]
    spread = result["per_gpu_spread"]
    lines.append(f"{'spread (max - min)':40}{'':>10}{_f(spread['loss'])}{_f(spread['accuracy'], 10)}")
    for title, rows in (("ply", result["by_ply"]), ("rating", result["by_rating"])):
        if rows:
            lines += ["", f"{'by ' + title:16}{'positions':>10}{'loss':>8}{'accuracy':>10}"]
            lines += [f"{_range(r):16}{r['positions']:>10}{_f(r['loss'])}{_f(r['accuracy'], 10)}" for r in rows]
    lines += ["", f"{'calibration':16}{'positions':>10}{'mean p':>8}{'observed':>10}"]
    lines += [f"{r['lo']:.1f}-{r['hi']:.1f}{'':9}{r['positions']:>10}{_f(r['mean_prob'])}{_f(r['mean_label'], 10)}"
              for r in result["reliability"]]
    return "\n".join(lines)


def _f(value: float | None, width: int = 8) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.4f}"


def _range(row: dict[str, Any]) -> str:
    lo = "" if row["lo"] is None else f"{row['lo']:g}"
    hi = "" if row["hi"] is None else f"{row['hi']:g}"
    return f"{lo}-{hi}" if hi else f"{lo}+"
