"""Score a trained run on a dataset split with the same towers as training, next to the baselines.

Each tower scores its share of every global batch into its own scoring.Scorer; the total is their merge.

RUN/eval-<split>.json (written atomically; another dataset's: run_files.eval_path) holds: split, data_dir,
model, positions, loss, accuracy (decisive positions), decisive, draws {positions, loss, mean_prob}, brier,
ece, reliability, by_ply, by_rating, per_gpu [{device, positions, loss, accuracy}], per_gpu_spread {loss,
accuracy}, free_capture (the model's calibration on the positions where the side to move can take a piece that
cannot be taken back, and on the others: analysis/tactics.py, free_capture_block), baselines {side_to_move,
material, piece_square, engine (when evaluations exist), train_positions, fitted_on} (baselines.py),
mirror_average (whether the model's probability was the mean over the position and its left-right mirror,
model.value_logits), seconds, positions_per_s, games (in the split), dataset (the scored data's identity,
identity.py), data_check {status: same | foreign | overlap | unknown | changed, detail, games} (below),
checkpoint (a checkpoint scored: run_files.CheckpointProgress, finished false for an unfinished run),
warnings (a list of lines: e.g. fewer than MIN_EVAL_GAMES games), and the uncertainty:

  intervals     {accuracy: [lo, hi], loss: [lo, hi]}: 95% bootstrap interval over games (scoring.py), in
                the model's row and in every baseline's row (and in
                baselines.engine.evaluated.{engine, model})
  comparisons   {material, piece_square, side_to_move, engine, engine_evaluated}: model minus that baseline,
                paired, {accuracy: {estimate, lo, hi, resolved}, loss: {...}}; engine_evaluated is the
                comparison on the evaluated positions only (baselines.engine.evaluated.model holds the model's
                scores there); resolved: the interval excludes 0
  bootstrap     {unit: "game", games, resamples, seed, level}

With a policy head, `policy` {positions, games, top1, top5, intervals {top1: [lo, hi], top5: [lo, hi]},
bootstrap}: how often the move played is the model's first choice, and among its first 5, over the LEGAL
moves of each position (final positions skipped). Which data may be scored: analysis/data_check.py.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from shogi_dnn import config
from shogi_dnn.analysis import baselines, data_check, eval_rows, run_model, scoring, tactics
from shogi_dnn.analysis.tower_diagnosis import device_kind
from shogi_dnn.dataset import policy, shards
from shogi_dnn.dataset.features import EVAL_NONE
from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files
from shogi_dnn.training import cluster, pipeline, schedule
from shogi_dnn.training import model as model_lib
from shogi_dnn.training.devices import fix_cpu_threads, make_strategy
from shogi_dnn.wording import progress_bar

log = logging.getLogger(__name__)

MIN_EVAL_BATCH = 1024        # positions per global batch at least: fewer Python steps than a training batch
MIN_EVAL_GAMES = 50          # fewer games in the scored split: a warning beside the table and in the JSON


def small_data_warnings(split: str, games: int) -> list[str]:
    """The evaluation's warnings about its size: fewer than MIN_EVAL_GAMES games in the split."""
    if games >= MIN_EVAL_GAMES:
        return []
    return [(f"only {games:,} games in {split}: too few to compare models (want >= {MIN_EVAL_GAMES}; "
             "differences between runs of a few points are noise here)")]


def run_strategy(run_dir: Path, simulate_devices: int | None) -> tf.distribute.Strategy:
    """The towers of the run: --simulate-devices N if given; else the run's devices (a run trained on
    N simulated CPU devices is re-simulated with N); else the default devices."""
    if simulate_devices is not None:
        return make_strategy(simulate_devices=simulate_devices)
    devices = [str(d) for d in run_files.read_run_json(run_dir).get("devices", [])]
    local = this_machine_devices(devices)
    if local != devices:      # a multi-worker run: this machine's devices of the same kind
        strategy = _cluster_run_strategy(devices, local)
        log.info("the run was trained on %d towers of a cluster (%s ...); evaluating on this machine's %s",
                 len(devices), devices[0], ", ".join(cluster.device_names(strategy)))
        return strategy
    if len(devices) > 1 and all("CPU" in d.upper() for d in devices):
        return make_strategy(simulate_devices=len(devices))
    if devices:
        try:
            return make_strategy(devices=devices)
        except RunError as exc:
            raise RunError(f"{exc}; the run was trained on {', '.join(devices)}: "
                           "pass --simulate-devices N to evaluate on this machine") from exc
    return make_strategy()


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
        return make_strategy(simulate_devices=len(local)) if len(local) > 1 else \
            make_strategy(devices=local)
    try:
        return make_strategy(devices=local)
    except RunError:
        known = {d.name.rsplit("device:", 1)[-1].upper() for d in tf.config.list_logical_devices()}
        present = [d for d in local if d.upper() in known]
        log.warning("this machine lacks some of the run's devices (%s); using %s", ", ".join(local),
                    ", ".join(present) or "the default devices")
        return make_strategy(devices=present) if present else make_strategy()


def load_run_model(run_dir: Path, checkpoint: str | None = None) -> keras.Model:
    """The run's model: a checkpoint if named, else RUN/model.keras, else the latest checkpoint
    (run_model.py).

    Call inside strategy.scope() to place the weights on every tower. Raises RunError (one line).
    """
    from shogi_dnn.analysis import run_model

    return run_model.load_run_model(run_dir, checkpoint)


def model_source(run_dir: Path, checkpoint: str | None = None) -> str:
    """What load_run_model loads: "model.keras" or the checkpoint's name."""
    if checkpoint is None and (Path(run_dir) / run_files.MODEL_FILE).is_file():
        return run_files.MODEL_FILE
    return run_files.find_checkpoint(Path(run_dir), checkpoint).name


def position_extras(paths: Sequence[Path], free: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """[N] rating (float32, NaN unknown), ply (int16), game id (int32), eval (int16, EVAL_NONE none) and
    free_capture (bool: `free`, or all False) of every row of the shards, in file order."""
    ratings = [baselines.position_ratings(p).astype(np.float32) for p in paths]
    rows = [shards.read_positions(p, keys=[shards.KEY_PLY, shards.KEY_GAME, shards.KEY_EVAL]).arrays
            for p in paths]
    game = np.concatenate([r[shards.KEY_GAME] for r in rows])
    return {"rating": np.concatenate(ratings), "ply_check": np.concatenate([r[shards.KEY_PLY] for r in rows]),
            "game": game, "eval": np.concatenate([r[shards.KEY_EVAL] for r in rows]),
            "free_capture": np.zeros(game.size, bool) if free is None else np.asarray(free, bool)}


def free_capture_rows(paths: Sequence[Path], fitted: baselines.Baselines) -> tuple[np.ndarray, np.ndarray]:
    """tactics.free_captures of every row of the shards in file order: (free [N] bool, best [N] float64,
    the best free capture's value from the material baseline's piece values, logits).

    Raises:
        ShardFormatError: a chunk cannot be read (one line naming the shard, rows and dataset).
    """
    values = tactics.capture_values_from_material(fitted.piece_values())
    parts = [tactics.free_captures(board, values) for path in paths for board in _shard_boards(path)]
    if not parts:
        return np.zeros(0, bool), np.zeros(0)
    return np.concatenate([f for f, _ in parts]), np.concatenate([b for _, b in parts])


def _shard_boards(path: Path) -> Iterator[np.ndarray]:
    """[n, 81] uint8 boards of a shard, one stored chunk at a time; a damaged chunk is shards.read_error."""
    keys = shards.stored_keys([shards.KEY_BOARD])
    with shards.open_shard(path) as f:
        total = int(f[shards.KEY_WIN].shape[0])
        step = max(int((f[keys[0]].chunks or (total,))[0]), 1)
        for start in range(0, total, step):
            stop = min(total, start + step)
            stored = {}
            for key in keys:
                try:
                    stored[key] = shards.read_stored(f, key, start, stop)
                except (OSError, RuntimeError, ValueError, KeyError) as exc:   # a chunk's checksum or filter
                    raise shards.read_error(path, key, start, stop, exc, step) from None
            yield shards.unpack_rows(stored, [shards.KEY_BOARD])[shards.KEY_BOARD]


def add_engine_sums(sums: tactics.CalibrationSums, paths: Sequence[Path], fitted: baselines.Baselines,
                    free: np.ndarray, best: np.ndarray) -> None:
    """The engine baseline's probabilities (evaluated rows only) and the best capture values, by group."""
    start = 0
    for batch in baselines.iter_batches(paths, (shards.KEY_GAME, shards.KEY_EVAL)):
        evals = batch[shards.KEY_EVAL]
        rows = slice(start, start + evals.size)
        start += evals.size
        logits = fitted.engine_logits(evals) if fitted.engine is not None else np.zeros(evals.size)
        evaluated = (evals != EVAL_NONE) & (fitted.engine is not None)
        sums.add_engine(batch[shards.KEY_GAME], logits, evaluated, free[rows], best[rows])


def eval_dataset(paths: Sequence[Path], global_batch: int, free: np.ndarray | None = None,
                 policy_labels: bool = False, errors: pipeline.ReadErrors | None = None) -> tf.data.Dataset:
    """pipeline.make_eval_dataset with each row's game rating (and position_extras' other columns) zipped in
    (same file order); policy_labels: with the moves' labels; errors: its read errors (pipeline)."""
    extras = tf.data.Dataset.from_tensor_slices(position_extras(paths, free)).batch(global_batch)
    rows = pipeline.make_eval_dataset(paths, global_batch=global_batch, policy_labels=policy_labels,
                                      errors=errors)
    return tf.data.Dataset.zip((rows, extras)).map(_merge_columns)


@tf.autograph.experimental.do_not_convert      # plain tensor code: nothing for AutoGraph to convert
def _merge_columns(rows: dict[str, tf.Tensor], more: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {**rows, **more}


def make_predict_step(strategy: tf.distribute.Strategy, model: keras.Model, mirror_average: bool):
    """step(dist_batch) -> per-replica {logit [b] float32, win, ply, ply_check, rating, game, eval,
    free_capture}; with a policy head also policy_logit [b, 2187] float32, policy labels, board and hands.
    """
    with_policy = model_lib.has_policy_head(model)

    @tf.autograph.experimental.do_not_convert
    def replica_predict(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        extra = {}
        if with_policy:
            logits, policy_logits = model_lib.value_and_policy_logits(model, batch["board"], batch["hands"],
                                                                      mirror_average=mirror_average)
            extra = {"policy_logit": policy_logits, **{k: batch[k] for k in ("policy", "board", "hands")}}
        else:
            logits = model_lib.value_logits(model, batch["board"], batch["hands"],
                                            mirror_average=mirror_average)
        return {"logit": logits, **{k: batch[k] for k in ("win", "ply", "ply_check", "rating", "game", "eval",
                                                          "free_capture")}, **extra}

    @tf.function
    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return strategy.run(replica_predict, args=(batch,))

    return step


@dataclasses.dataclass
class ModelScores:
    """The model's scores over a split: one Scorer per tower, and its sums per game (scoring.GameSums) over
    every position and over the positions that carry an engine evaluation; free_capture: the model's
    probabilities and the results by free-capture group (tactics.CalibrationSums)."""

    scorers: list[scoring.Scorer]
    games: scoring.GameSums
    evaluated_games: scoring.GameSums
    free_capture: tactics.CalibrationSums = dataclasses.field(default_factory=tactics.CalibrationSums)
    policy: scoring.PolicySums | None = None        # a model with a policy head: its hits per game


def score_towers(strategy: tf.distribute.Strategy, model: keras.Model, paths: Sequence[Path],
                 global_batch: int, mirror_average: bool,
                 free: np.ndarray | None = None) -> ModelScores:
    """One Scorer per tower over every row of the shards, and the sums per game (progress bar over global
    batches); free: [N] bool free-capture flags of the rows in file order (free_capture_rows)."""
    step = make_predict_step(strategy, model, mirror_average)
    with_policy = model_lib.has_policy_head(model)
    scores = ModelScores([scoring.Scorer() for _ in range(strategy.num_replicas_in_sync)], scoring.GameSums(),
                         scoring.GameSums(), policy=scoring.PolicySums() if with_policy else None)
    if with_policy:
        log.info("policy: top-1/top-5 over the legal moves of %s positions, found on the host (about 3,000 "
                 "positions/s a core)", f"{schedule.count_positions(paths):,}")
    errors = pipeline.ReadErrors()
    dataset = eval_dataset(paths, global_batch, free, with_policy, errors)
    dist = strategy.experimental_distribute_dataset(dataset)
    total = -(-schedule.count_positions(paths) // global_batch)     # the last batch may be partial
    try:
        for batch in progress_bar(dist, total=total, desc="evaluate", unit="batch"):
            _score_batch(strategy, step, batch, scores)
    except tf.errors.OpError:      # a damaged chunk: the pipeline's one-line error, not TensorFlow's
        error = errors.take()
        if error is None:
            raise
        raise error from None
    error = errors.take()                 # the pipeline ended early on a damaged chunk: never a partial score
    if error is not None:
        raise error
    return scores


def _score_batch(strategy: tf.distribute.Strategy, step, batch, scores: ModelScores) -> None:
    """Add one distributed batch's predictions to the per-tower scorers and the per-game sums."""
    out = step(batch)
    local = {k: [t.numpy() for t in strategy.experimental_local_results(v)] for k, v in out.items()}
    for i, scorer in enumerate(scores.scorers):
        if not np.array_equal(local["ply"][i], local["ply_check"][i]):
            raise RunError("evaluation rows and their game ratings went out of step (a pipeline bug)")
        scorer.add(local["logit"][i], local["win"][i], local["ply"][i], local["rating"][i])
        scores.games.add(local["game"][i], local["logit"][i], local["win"][i])
        scores.evaluated_games.add(local["game"][i], local["logit"][i], local["win"][i],
                                   local["eval"][i] != EVAL_NONE)
        scores.free_capture.add_model(local["game"][i], local["logit"][i], local["win"][i],
                                      local["free_capture"][i])
        if scores.policy is not None:
            legal = policy.legal_label_masks(local["board"][i], local["hands"][i])
            scores.policy.add(local["game"][i], local["policy_logit"][i], local["policy"][i], legal)


def evaluate_run(run_dir: str | Path, data: str | Path | None = None, split: str = "validation",
                 checkpoint: str | None = None, simulate_devices: int | None = None,
                 global_batch: int | None = None, mirror_average: bool = run_model.MIRROR_AVERAGE,
                 verify_shards: bool = False, allow_changed_data: bool = False,
                 out: str | Path | None = None) -> dict[str, Any]:
    """Evaluate a run on a split and write RUN/eval-<split>.json (or `out`). Returns the JSON as a dict.

    global_batch: positions per step over all towers (default eval_global_batch). mirror_average: score the
    mean probability over each position and its mirror. verify_shards: also check the shards' sha256.
    allow_changed_data: score data check_data refuses, labelled.
    """
    with data_check.checked_split(run_dir, data, split, checkpoint, verify_shards,
                                  allow_changed_data) as checked:
        return evaluate_checked(checked, split, checkpoint, simulate_devices, global_batch, mirror_average,
                                out)


def evaluate_checked(checked: data_check.CheckedSplit, split: str, checkpoint: str | None = None,
                     simulate_devices: int | None = None, global_batch: int | None = None,
                     mirror_average: bool = run_model.MIRROR_AVERAGE,
                     out: str | Path | None = None) -> dict[str, Any]:
    """evaluate_run on a split that data_check.checked_split has checked (and holds as a reader)."""
    run_dir, data_dir, paths, check = checked.run_dir, checked.data_dir, checked.paths, checked.check
    fix_cpu_threads(run_files.read_config(run_dir).train.cpu_threads)      # the run's, as it trained
    strategy = run_strategy(run_dir, simulate_devices)
    with strategy.scope():
        model = load_run_model(run_dir, checkpoint)
    towers_count = strategy.num_replicas_in_sync
    global_batch = (-(-global_batch // towers_count) * towers_count if global_batch
                    else eval_global_batch(run_files.read_config(run_dir), towers_count))
    fitted, source = baselines.fitted_baselines(run_dir, data_dir)
    free, best = free_capture_rows(paths, fitted)
    start = time.perf_counter()
    scores = score_towers(strategy, model, paths, global_batch, mirror_average, free)
    seconds = time.perf_counter() - start
    result = summarise(scores.scorers, list(strategy.extended.worker_devices))
    add_engine_sums(scores.free_capture, paths, fitted, free, best)
    result["free_capture"] = scores.free_capture.block()
    if scores.policy is not None:
        result["policy"] = scoring.policy_block(scores.policy)
    baseline_scores, baseline_games = baselines.score_baselines_by_game(fitted, paths)
    result["baselines"] = {**baseline_scores, "fitted_on": f"{source} (train split)"}
    add_intervals(result, scores, baseline_games)
    result.update(split=split, data_dir=str(data_dir), model=model_source(run_dir, checkpoint),
                  global_batch=global_batch, mirror_average=bool(mirror_average), seconds=round(seconds, 3),
                  positions_per_s=round(result["positions"] / seconds, 1) if seconds > 0 else None)
    games = sum(s.games for s in check.current.splits.values())
    result.update(games=games, dataset=check.current.to_dict(),
                  data_check={"status": check.status, "detail": check.detail,
                              **({"games": check.games} if check.games else {})},
                  warnings=small_data_warnings(split, games))
    if result["model"] != run_files.MODEL_FILE:       # a checkpoint: how far the run had got there
        progress = run_files.checkpoint_progress(run_dir, run_files.find_checkpoint(run_dir, checkpoint))
        result["checkpoint"] = progress.to_dict()
    run_files.write_json_atomic(Path(out) if out else checked.result_path(split), result, allow_nan=False)
    return result


BASELINE_NAMES = ("material", "piece_square", "side_to_move", "engine")     # the order of the comparisons


def add_intervals(result: dict[str, Any], scores: ModelScores,
                  baseline_games: dict[str, scoring.GameSums]) -> None:
    """Add the bootstrap intervals over games to an evaluation result (module docstring: intervals,
    comparisons, bootstrap), pairing the model with each baseline on the same positions."""
    names = [n for n in BASELINE_NAMES if n in baseline_games]
    boot = scoring.bootstrap_games({"model": scores.games, **{n: baseline_games[n] for n in names}},
                                   [("model", n) for n in names])
    rows = {"model": result, **{n: result["baselines"][n] for n in names}}
    for name, row in rows.items():
        row["intervals"] = _interval_pairs(boot.intervals[name])
    result["comparisons"] = {n: _difference(boot.differences[("model", n)]) for n in names}
    result["bootstrap"] = boot.describe()
    if "engine" in names:
        evaluated = result["baselines"]["engine"]["evaluated"]
        pair = scoring.bootstrap_games({"model": scores.evaluated_games,
                                        "engine": baseline_games["engine_evaluated"]}, [("model", "engine")])
        evaluated["model"] = {**scores.evaluated_games.summary(),
                              "intervals": _interval_pairs(pair.intervals["model"])}
        evaluated["engine"]["intervals"] = _interval_pairs(pair.intervals["engine"])
        result["comparisons"]["engine_evaluated"] = _difference(pair.differences[("model", "engine")])


def _interval_pairs(intervals: dict[str, scoring.Interval]) -> dict[str, list[float]]:
    return {metric: [i.lo, i.hi] for metric, i in intervals.items()}


def _difference(intervals: dict[str, scoring.Interval]) -> dict[str, dict[str, Any]]:
    return {metric: {**i.to_dict(), "resolved": i.resolved} for metric, i in intervals.items()}


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


BASELINE_LABELS = {"material": "material", "piece_square": "piece-square", "side_to_move": "side to move",
                   "engine": "engine"}


def format_table(result: dict[str, Any]) -> str:
    """A readable summary of an evaluation: model vs baselines (with 95% intervals over games and the paired
    comparisons), per tower (headed by the device kind: GPU, CPU), by ply, by rating, calibration."""
    b = result["baselines"]
    averaged = ", model mirror-averaged" if result.get("mirror_average") else ""
    lines = [f"WARNING: {line}" for line in run_files.eval_labels(result)]
    lines += [(f"split {result['split']}: {result['positions']:,} positions "
               f"({result['decisive']:,} decisive, {result['draws']['positions']:,} draws{averaged})"),
              eval_rows.data_line(result), "",
             f"{'':20}{'loss':>8}{'accuracy':>10}{'brier':>8}{'ece':>8}   "
             f"{'loss 95%':<16}{'accuracy 95%':<16}"]
    rows = [("model", result)] + [(BASELINE_LABELS[n], b[n]) for n in BASELINE_NAMES if n in b]
    engine = b.get("engine")
    if engine:
        evaluated = engine["evaluated"]
        rows += [("model, evaluated", evaluated["model"]), ("engine, evaluated", evaluated["engine"])]
    for name, row in rows:
        lines.append(f"{name:20}{_f(row['loss'])}{_f(row['accuracy'], 10)}{_f(row.get('brier'))}"
                     f"{_f(row.get('ece'))}   {_span(row, 'loss'):<16}{_span(row, 'accuracy'):<16}")
    if engine:
        lines.append(f"\nengine: sigmoid(eval / a), a = {engine['scale']:.0f} cp/logit fitted on the "
                     f"training split ({engine['train_coverage']:.1%} of its positions evaluated); "
                     f"evaluations on {engine['coverage']:.1%} of these positions "
                     f"({evaluated['positions']:,} positions, "
                     f"{evaluated['games']:,} games: the 'evaluated' rows), p = 0.5 elsewhere")
    boot = result.get("bootstrap")
    if boot:
        lines.append("")
        lines += [scoring.comparison_text(_comparison_label(n), c, boot["level"])
                  for n, c in result["comparisons"].items()]
        lines.append(f"(intervals: {boot['level']:.0%}, bootstrap over {boot['games']:,} games, "
                     f"{boot['resamples']} resamples, seed {boot['seed']}; "
                     "'not resolved': the interval contains 0)")
    if "free_capture" in result:
        lines += ["", tactics.free_capture_text(result["free_capture"])]
    if "policy" in result:
        lines += ["", scoring.policy_text(result["policy"]) + " (legal moves"
                  + (", mirror-averaged)" if result.get("mirror_average") else ")")]
    kind = device_kind([g["device"] for g in result["per_gpu"]])     # GPU, CPU, or device when mixed
    lines += ["", f"{'per ' + ('tower' if kind == 'device' else kind):40}{'positions':>10}{'loss':>8}"
              f"{'accuracy':>10}"]
    lines += [f"{g['device'].split('device:')[-1]:40}{g['positions']:>10,}{_f(g['loss'])}"
              f"{_f(g['accuracy'], 10)}" for g in result["per_gpu"]]
    spread = result["per_gpu_spread"]
    lines.append(f"{'spread (max - min)':40}{'':>10}{_f(spread['loss'])}{_f(spread['accuracy'], 10)}")
    for title, rows_ in (("ply", result["by_ply"]), ("rating", result["by_rating"])):
        if rows_:
            lines += ["", f"{'by ' + title:16}{'positions':>10}{'loss':>8}{'accuracy':>10}"]
            lines += [f"{_range(r):16}{r['positions']:>10,}{_f(r['loss'])}{_f(r['accuracy'], 10)}"
                      for r in rows_]
    lines += ["", f"{'calibration':16}{'positions':>10}{'mean p':>8}{'observed':>10}"]
    lines += [f"{r['lo']:.1f}-{r['hi']:.1f}{'':9}{r['positions']:>10,}{_f(r['mean_prob'])}"
              f"{_f(r['mean_label'], 10)}" for r in result["reliability"]]
    return "\n".join(lines)


def _comparison_label(name: str) -> str:
    """comparisons key -> the baseline's words: 'engine_evaluated' -> 'engine on evaluated positions'."""
    if name == "engine_evaluated":
        return "engine on evaluated positions"
    return BASELINE_LABELS.get(name, name)


def _span(row: dict[str, Any], metric: str) -> str:
    """'0.6600..0.7000' from a row's intervals (blank without; UNDEFINED for an undefined metric)."""
    pair = row.get("intervals", {}).get(metric)
    if not pair:
        return ""
    return scoring.UNDEFINED if None in pair else f"{pair[0]:.4f}..{pair[1]:.4f}"


def _f(value: float | None, width: int = 8) -> str:
    return f"{scoring.UNDEFINED:>{width}}" if value is None else f"{value:>{width}.4f}"


def _range(row: dict[str, Any]) -> str:
    lo = "" if row["lo"] is None else f"{row['lo']:g}"
    hi = "" if row["hi"] is None else f"{row['hi']:g}"
    return f"{lo}-{hi}" if hi else f"{lo}+"
