"""The staged training loop: stages over sample groups, validation and a checkpoint after each stage,
periodic checkpoints inside a stage, SIGINT/SIGTERM -> checkpoint and clean exit, exact resume.

Run directory (file names: run_files.py; see also checkpoints.py and run_log.py):
  RUN/config.json   the resolved Config (config.from_dict(json.load(...)) reads it back)
  RUN/run.json      data_dir, dataset (its identity: identity.py), history, devices, num_replicas,
                    num_workers, batches, peak lr, resume command
  RUN/metrics.jsonl, RUN/tb/, RUN/checkpoints/, RUN/model.keras (at the end)

The data a run trains on is recorded (run.json and every checkpoint: identity.py); `--resume` on other
data (another --data, or the same folder converted again) is refused unless `data_changed` is given,
which is then appended to run.json's "history" (the entry: run_files.py).

Exact resume: a checkpoint stores the weights, the optimizer state (so the lr schedule and momentum
continue) and the data position (epoch, stage, group, positions consumed in the group, seeds). The
stream of a stage depends only on its shards and seed, so skipping the consumed prefix continues it
with no position skipped or repeated, with any number of towers at the same global batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from shogi_dnn import __version__
from shogi_dnn.dataset import evalfit, identity, shards
from shogi_dnn.folders import run_files
from shogi_dnn import config as config_mod
from shogi_dnn.config import Config
from shogi_dnn.errors import ConfigError, RunError, ShardFormatError
from shogi_dnn.training import cluster, pipeline, run_log, towers
from shogi_dnn.training.checkpoints import (
    CheckpointManager,
    list_checkpoints,
    read_dataset,
    read_state,
    save_model,
)
from shogi_dnn.training.model import build_model
from shogi_dnn.training.run_log import MetricsLog, TowerSums, eta_fields, summarise
from shogi_dnn.training.stages import Stage, StagePlan, TrainState
from shogi_dnn.wording import plural

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """How Trainer.run ended: the final state, and whether a stop request (signal) ended it early."""

    state: TrainState
    interrupted: bool


class StopFlag:
    """Set by SIGINT/SIGTERM (e.g. a reclaimed spot instance); the loop checks it after every update.

    A second SIGINT while stopping raises KeyboardInterrupt (the user insists)."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""

    def request(self, name: str = "request") -> None:
        self.requested, self.signal_name = True, name

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.request(signal.Signals(signum).name)
        log.info("%s: saving a checkpoint at the current step, then exiting", self.signal_name)

    @contextlib.contextmanager
    def catch_signals(self) -> Iterator[StopFlag]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


RELEASE_THREAD = "release-stage-input"
# A teardown still running when the interpreter exits can abort the process inside TensorFlow's C++ (seen
# once: "terminate called ... exception not rethrown" after a finished run), so a run waits for its
# teardowns before returning: long after a finished run (they are usually done), briefly after a stop.
RELEASE_WAIT_DONE, RELEASE_WAIT_STOPPED = 60.0, 5.0


def release_in_background(holder: list[Any]) -> threading.Thread:
    """Drop the objects of `holder` (the only references to a stage's input iterator) in a daemon thread.

    Destroying a tf.data iterator whose prefetch thread is inside a Python generator call waits for that
    call (a whole shuffle buffer read) and then for the generator's cleanup; on the main thread that wait
    came before the stage's checkpoint (once in five Ctrl-Cs at a stage boundary, 50+ s without output).
    In a daemon thread it overlaps the validation and the checkpoint, and never holds up the exit."""
    thread = threading.Thread(target=holder.clear, name=RELEASE_THREAD, daemon=True)
    thread.start()
    return thread


def join_releases(threads: list[threading.Thread], timeout: float) -> None:
    """Wait up to `timeout` seconds in all for the stage teardowns started by release_in_background."""
    deadline = time.perf_counter() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.perf_counter()))
    threads[:] = [t for t in threads if t.is_alive()]


@dataclasses.dataclass(frozen=True)
class EvalTarget:
    """The evaluation target a run trains on, resolved from train.eval_* and the training split.

    weight: λ as trained (0 = results only); scale: a in centipawns per logit (> 0); trust: None or [R]
    per-ply-range factors of λ (evalfit.PLY_EDGES); fit: what the training split's evaluations say (None:
    none carry one, or λ = 0); requested: train.eval_weight (λ > 0 on data without evaluations trains at 0).
    """

    weight: float
    scale: float
    trust: tuple[float, ...] | None
    weighting: str
    fit: evalfit.EvalFit | None
    requested: float = 0.0

    def describe(self) -> str:
        """The run log's line: coverage, λ, a and the weighting."""
        if self.fit is None:
            return ("no engine evaluations in the training split: results only" if self.requested > 0 else
                    "evaluation targets off (train.eval_weight = 0): results only")
        coverage = f"evaluations on {self.fit.coverage:.1%} of training positions"   # fit: λ > 0 (resolve_eval_target)
        trust = "" if self.trust is None else f", trust by ply {self.fit.trust_text()}"    # trust is fit.trust
        return (f"{coverage}, λ = {self.weight:g}, a = {self.scale:.0f} cp/logit"
                f" ({'fitted' if self.fitted_scale else 'set'}; fitted on results: {self.fit.scale:.0f})"
                f", weighting {self.weighting}{trust}")

    @property
    def fitted_scale(self) -> bool:
        return self.fit is not None and self.scale == self.fit.scale

    def to_dict(self) -> dict[str, Any]:
        return {"weight": self.weight, "requested": self.requested, "scale": self.scale, "weighting": self.weighting,
                "trust": None if self.trust is None else list(self.trust),
                "fit": None if self.fit is None else self.fit.to_dict()}


def resolve_eval_target(cfg: config_mod.TrainConfig, manifest: shards.Manifest) -> EvalTarget:
    """λ, a and the trust table for a run: fitted on the training split's evaluations (evalfit.py) when
    train.eval_weight > 0; a dataset without evaluations trains on results only (λ has no effect)."""
    if cfg.eval_weight == 0:
        return EvalTarget(0.0, cfg.eval_scale or evalfit.DEFAULT_SCALE, None, cfg.eval_weighting, None)
    paths = [manifest.shard_path(s) for s in manifest.split("train")]
    fit = evalfit.fit_batches(_eval_columns(paths))
    if fit is None:
        return EvalTarget(0.0, cfg.eval_scale or evalfit.DEFAULT_SCALE, None, cfg.eval_weighting, None,
                          cfg.eval_weight)
    scale = cfg.eval_scale if cfg.eval_scale > 0 else fit.scale
    trust = fit.trust if cfg.eval_weighting == "trust" else None
    return EvalTarget(cfg.eval_weight, scale, trust, cfg.eval_weighting, fit, cfg.eval_weight)


def _eval_columns(paths: list[Path]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(eval [N] int16, win [N] float32, ply [N] int16) of every position, a shard at a time. A shard without
    the optional `eval` dataset (no position of it has one) is only counted: nothing of it is decompressed."""
    for path in paths:
        with shards.open_shard(path) as f:
            if shards.KEY_EVAL not in f:
                n = int(f[shards.KEY_WIN].shape[0])
                yield np.full(n, evalfit.EVAL_NONE, np.int16), np.zeros(n, np.float32), np.zeros(n, np.int16)
                continue
            rows = shards.read_rows(f, 0, None, [shards.KEY_EVAL, shards.KEY_WIN, shards.KEY_PLY])
        yield rows[shards.KEY_EVAL], rows[shards.KEY_WIN], rows[shards.KEY_PLY]


class _Interval:
    """Step outputs since the last log line, and when the interval started."""

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []
        self.start = time.perf_counter()


class Trainer:
    """Trains one run. Build it (model, optimizer and steps under the strategy), then call run()."""

    def __init__(self, config: Config, data_dir: Path, run_dir: Path, strategy: tf.distribute.Strategy, *,
                 resume: bool = False, resume_command: str = "", stop: StopFlag | None = None,
                 strict_resume: bool = False, verify_shards: bool = False, price_per_hour: float = 0.0,
                 data_changed: bool = False, command: str = "") -> None:
        self.config, self.strategy, self.run_dir = config, strategy, Path(run_dir)
        self.started, self.price_per_hour = time.perf_counter(), price_per_hour   # ETA and cost (run_log)
        self.strict_resume = strict_resume      # refuse a corrupt newest checkpoint instead of the previous
        self.data_dir, self.resume, self.resume_command = Path(data_dir).resolve(), resume, resume_command
        self.data_changed, self.command = data_changed, command or resume_command   # --data-changed
        self.history_entry: dict[str, Any] | None = None     # run.json "history" entry of this start
        self.manifest = shards.read_manifest(self.data_dir)
        # Every shard this run reads (training and validation) against the manifest, before anything is
        # built: a missing, truncated or foreign shard is one line now, not a lost stage later.
        shards.verify_shards(self.manifest, self.manifest.split("train") + self.manifest.split("validation"),
                             full=verify_shards)
        self.dataset = identity.dataset_identity(self.manifest)   # recorded in run.json and every checkpoint
        self.global_batch = config_mod.global_batch(config, strategy.num_replicas_in_sync)
        # The memory a tower needs, from the config, before TensorFlow allocates any of it: a model or
        # batch that cannot fit is one line saying what to lower (training/memory.py).
        towers.check_model_fits(config, strategy, self.global_batch // strategy.num_replicas_in_sync)
        self.micro_batches = config.train.micro_batches
        self.update_batch = self.global_batch * self.micro_batches
        self.plan = StagePlan(self.manifest, config, self.update_batch, cluster.num_workers(strategy))
        self.devices = cluster.device_names(strategy)      # every tower of every worker
        self.eval_target = resolve_eval_target(config.train, self.manifest)
        with strategy.scope():
            self.model = build_model(config.model, seed=config.train.seed)
        self.optimizer = towers.build_optimizer(config.optim, self.global_batch, self._total_steps(),
                                                strategy=strategy, model=self.model,
                                                micro_batches=self.micro_batches,
                                                loss_scale=config.model.mixed_precision == "mixed_float16")
        self.train_step = towers.make_train_step(strategy, self.model, self.optimizer,
                                                 global_batch=self.global_batch, micro_batches=self.micro_batches,
                                                 clip_global_norm=config.optim.clip_global_norm,
                                                 time_towers=config.train.time_towers,
                                                 eval_weight=self.eval_target.weight,
                                                 eval_scale=self.eval_target.scale,
                                                 eval_trust=self.eval_target.trust)
        self.update = towers.make_iterator_step(self.train_step, self.micro_batches)
        self.eval_step = towers.make_eval_step(strategy, self.model)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints = CheckpointManager(self.run_dir, self.model, self.optimizer, config.train.keep_checkpoints,
                                             dataset=self.dataset.to_dict())
        self.is_chief = cluster.is_chief(strategy)
        self.metrics = MetricsLog(self.run_dir, write_files=self.is_chief)   # the chief alone writes metrics
        self.stop = stop or StopFlag()   # given by the command: it catches signals from start-up on
        self.validation_paths = [self.manifest.shard_path(s) for s in self.manifest.split("validation")]
        self.releases: list[threading.Thread] = []     # stage input teardowns (release_in_background)
        pipeline.take_read_error()               # clear: only this run's read errors count

    def _total_steps(self) -> int:
        """Planned updates of the whole run (every stage of every epoch): the lr decay's horizon."""
        self.stage_updates = [[self.plan.stage(epoch, index).updates for index in range(self.plan.num_groups)]
                              for epoch in range(self.plan.epochs)]      # also the ETA's (_remaining_updates)
        return sum(map(sum, self.stage_updates))

    def _remaining_updates(self, state: TrainState) -> tuple[int, int, int]:
        """Updates left in the current stage, epoch and run (from the plan, no data read)."""
        done_in_stage = state.position // self.update_batch
        this_stage = max(0, self.stage_updates[state.epoch][state.stage] - done_in_stage)
        epoch = this_stage + sum(self.stage_updates[state.epoch][state.stage + 1:])
        run = epoch + sum(sum(later) for later in self.stage_updates[state.epoch + 1:])
        return this_stage, epoch, run

    def run(self) -> TrainResult:
        """Train every remaining stage; validate and checkpoint after each. Returns early on a signal."""
        state = self._start()
        with self.stop.catch_signals():
            while not self.plan.finished(state):
                stage = self.plan.stage(state.epoch, state.stage)
                state, complete = self._train_stage(stage, state)
                if not complete:
                    return self._interrupted(state)
                self._validate(state)
                state = self.plan.next_stage(state)
                self.checkpoints.save(state, self.config)
                if self._stop_agreed():
                    return self._interrupted(state)
        if self.is_chief:   # the other workers keep the final checkpoint (same weights)
            save_model(self.model, self.run_dir)
        log.info("done: step=%d samples=%d, model saved to %s", state.step, state.samples,
                 self.run_dir / run_files.MODEL_FILE)
        self.metrics.close()
        join_releases(self.releases, RELEASE_WAIT_DONE)
        return TrainResult(state, interrupted=False)

    # -- start and stop ---------------------------------------------------------------------------

    def _start(self) -> TrainState:
        """Restore the latest checkpoint (--resume) or start fresh; write config.json and run.json."""
        existing = cluster.agreed_checkpoints(self.strategy, list_checkpoints(self.run_dir))  # same on every worker
        if existing and not self.resume:
            raise RunError(f"{self.run_dir} already has checkpoints (latest {existing[-1].name}): add --resume "
                           f"to continue it, or choose a new --run-dir")
        if existing:
            state = self._restore_newest_valid(existing)
        else:
            if self.resume:
                log.warning("--resume: no checkpoint in %s yet, starting from the beginning", self.run_dir)
            state = self.plan.initial_state()
        self.metrics.truncate_after(state.step)
        run_files.write_json_atomic(self.run_dir / run_files.CONFIG_JSON, self.config.to_dict(), sort_keys=True)
        run_files.write_json_atomic(self.run_dir / run_files.RUN_JSON, self._run_info(), sort_keys=True)
        log.info("%s %s, global batch %d x %s = %d per update, lr %.4g, %s, %s",
                 plural(len(self.devices), "tower"), ",".join(self.devices), self.global_batch,
                 plural(self.micro_batches, "micro-batch", "micro-batches"), self.update_batch,
                 towers.scaled_lr(self.config.optim, self.update_batch),
                 plural(self.plan.num_groups, "sample group"), plural(self.plan.epochs, "epoch"))
        log.info("%s", self.eval_target.describe())
        return state

    def _restore_newest_valid(self, existing: list[Path]) -> TrainState:
        """Restore the newest checkpoint that reads back on every worker: a corrupt newest one (damaged
        state.json or weights) is reported and the previous one used, unless --resume-strict refuses."""
        candidates = list(existing)
        while candidates:
            path = candidates.pop()
            try:
                state, ok, error = self._restore(path), True, None
            except RunError as exc:            # unreadable; a config mismatch (ConfigError) is not retried
                state, ok, error = None, False, exc
            if cluster.agree_on(self.strategy, ok, cluster.checkpoint_step(path)):
                return state
            reason = error or RunError(f"{path}: another worker could not restore it")
            if self.strict_resume or not candidates:
                raise RunError(f"{reason}" + (" (--resume-strict: no fallback to an older checkpoint)"
                                              if candidates else " (no older checkpoint to fall back to)"))
            log.warning("%s: resuming from the previous checkpoint, %s", reason, candidates[-1].name)
        raise RunError(f"{self.run_dir}: no checkpoint to resume from")

    def _restore(self, path: Path) -> TrainState:
        saved_state, saved_config = read_state(path)
        mismatch = config_mod.architecture_mismatch(saved_config, self.config)
        if mismatch:
            raise ConfigError(f"{path}: the model differs from the checkpoint's: {'; '.join(mismatch)}")
        self._check_data(path)
        self.plan.check_resume(saved_state)
        info = self._previous_run_info()
        if info:
            before = info.get("update_batch")
            if before not in (None, self.update_batch):
                log.warning("the update batch changes from %s to %d: the data stream continues at the same "
                            "position, but the run is no longer identical to an uninterrupted one",
                            before, self.update_batch)
            lanes = info.get("read_lanes", 1)        # runs before read lanes read one stream: one lane
            if lanes != self.plan.lanes:
                log.warning("the read lanes change from %s to %d (data.read_lanes; 0 = one per worker): the "
                            "stage continues at the same position of another sample order, so the run is no "
                            "longer identical to an uninterrupted one; set data.read_lanes=%s to keep it",
                            lanes, self.plan.lanes, lanes)
        state = self.checkpoints.restore(path)
        log.info("resumed from %s: step=%d samples=%d epoch=%d stage=%d group=%d position=%d", path.name,
                 state.step, state.samples, state.epoch, state.stage, state.group, state.position)
        return state

    def _check_data(self, path: Path) -> None:
        """Refuse to resume a checkpoint on data other than its own (another --data, or the folder converted
        again), unless --data-changed: then the change becomes run.json's next "history" entry.

        Raises:
            ConfigError: one line naming both datasets (not RunError: no fallback to an older checkpoint).
        """
        previous = self._previous_run_info()
        recorded = read_dataset(path)
        recorded = recorded if recorded is not None else previous.get(run_files.KEY_DATASET)
        try:
            check = identity.compare(recorded, self.dataset)
        except ValueError as exc:
            raise ConfigError(f"{path / run_files.CHECKPOINT_STATE}: dataset: {exc}") from exc
        old_dir = previous.get("data_dir")
        if check.status == "unknown":
            if not old_dir or Path(old_dir).resolve() == self.data_dir:
                log.warning("%s records no dataset identity (saved before runs recorded one): cannot check that "
                            "%s still holds the data it was trained on", path, self.data_dir)
                return
            check = identity.DataCheck("changed", f"dataset {old_dir} (its identity not recorded); --data "
                                                  f"{self.data_dir} is another folder", None, self.dataset)
        if check.status == "same":
            return
        if not self.data_changed:
            raise ConfigError(identity.refusal(str(path), check, "--data-changed",
                                               "continue it on this data (recorded in run.json's history)"))
        log.warning("--data-changed: continuing %s on other data: %s", path.name, check.detail)
        self.history_entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "event": "data changed",
                              "checkpoint": path.name, "command": self.command,
                              "from": recorded if recorded is not None else {"data_dir": old_dir},
                              "to": self.dataset.to_dict()}

    def _previous_run_info(self) -> dict[str, Any]:
        """RUN/run.json as the last start wrote it ({} when there is none)."""
        path = self.run_dir / run_files.RUN_JSON
        return run_files.read_json(path) if path.is_file() else {}

    def _run_info(self) -> dict[str, Any]:
        history = self._previous_run_info().get(run_files.KEY_HISTORY, [])     # kept across resumes
        history = [*(history if isinstance(history, list) else []), *filter(None, [self.history_entry])]
        return {"data_dir": str(self.data_dir), run_files.KEY_DATASET: self.dataset.to_dict(),
                run_files.KEY_HISTORY: history, "devices": self.devices, "num_replicas": len(self.devices),
                "num_workers": cluster.num_workers(self.strategy),
                "global_batch": self.global_batch, "micro_batches": self.micro_batches,
                "update_batch": self.update_batch, "num_groups": self.plan.num_groups,
                "read_lanes": self.plan.lanes,
                "peak_lr": towers.scaled_lr(self.config.optim, self.update_batch),
                "resume_command": self.resume_command, "shogi_dnn": __version__, "tensorflow": tf.__version__,
                "keras": keras.__version__, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "eval_target": self.eval_target.to_dict()}

    def _interrupted(self, state: TrainState) -> TrainResult:
        if self.checkpoints.last_saved_step != state.step:
            self.checkpoints.save(state, self.config)
        log.info("stopped (%s) at step=%d samples=%d; checkpoint saved. Resume with:\n  %s",
                 self.stop.signal_name, state.step, state.samples, self.resume_command or "--resume")
        self.metrics.close()
        join_releases(self.releases, RELEASE_WAIT_STOPPED)
        return TrainResult(state, interrupted=True)

    # -- one stage --------------------------------------------------------------------------------

    def _train_stage(self, stage: Stage, state: TrainState) -> tuple[TrainState, bool]:
        """Run the stage's remaining updates. Returns (state, False) when stopped inside the stage.

        The stage's input iterator is held only by a one-item list and torn down by release_in_background
        when the stage returns (finished or stopped; an error tears it down here before it propagates): its teardown waits for the generator call in flight (a
        whole shuffle buffer) and the generator's cleanup, seen to take 50+ s after a Ctrl-C at a stage
        boundary; the validation, the checkpoint and the exit that follow do not wait for it."""
        remaining = stage.remaining(state.position)
        # One path on one machine or several: each worker's pipeline reads only its read lanes and
        # yields its share of every global batch as per-replica batches (contiguous, tower 0 first).
        skip = state.position
        batches = [iter(self.strategy.distribute_datasets_from_function(lambda ctx: pipeline.make_train_dataset(
            stage.paths, global_batch=self.global_batch, seed=stage.seed, skip_samples=skip,
            shuffle_buffer=stage.shuffle_buffer, mirror=self.config.data.mirror, lanes=stage.lanes,
            input_context=ctx, rows=stage.rows)))]
        try:
            result = self._run_updates(stage, state, remaining, batches)
        except BaseException:
            # An error ends the process: tear down here, as before, so that no teardown thread is still
            # inside TensorFlow when the interpreter exits (a chief whose worker died aborted that way).
            batches.clear()
            raise
        self.releases.append(release_in_background(batches))
        return result

    def _run_updates(self, stage: Stage, state: TrainState, remaining: int,
                     batches: list[Any]) -> tuple[TrainState, bool]:
        """The stage's loop over `remaining` updates from batches[0] (see _train_stage)."""
        interval = _Interval()
        desc = run_log.position_label(stage.epoch, stage.index, stage.group)   # as the console line says it
        with tqdm(total=stage.updates, initial=stage.updates - remaining, desc=desc, unit="step",
                  disable=None, leave=False, dynamic_ncols=True) as bar:
            for done in range(1, remaining + 1):
                try:
                    interval.outputs.append(self.update(batches[0]))
                except tf.errors.OpError as exc:
                    self._data_error(exc, state, interval)
                state = state.advance(1, self.update_batch)
                bar.update()
                if state.step % self.config.train.log_every_steps == 0 or done == remaining:
                    interval = self._log_train(state, interval)
                if done < remaining and self._checkpoint_due(state):
                    self._check_finite(state, TowerSums.collect(self.strategy, interval.outputs))
                    self.checkpoints.save(state, self.config)
                if done < remaining and self._stop_agreed():
                    if interval.outputs:   # log the steps since the last line: each step is logged once
                        self._log_train(state, interval)
                    return state, False
        return state, True

    def _data_error(self, exc: tf.errors.OpError, state: TrainState, interval: _Interval | None) -> None:
        """A failed input pipeline: a shard read error (pipeline.take_read_error) becomes one line, after
        saving a checkpoint of the last good step where possible (one worker: a cluster's workers could not
        agree on it any more); any other TensorFlow error is raised as it is."""
        error = pipeline.take_read_error()
        if error is None:
            raise exc
        self._read_failed(error, state, interval)

    def _read_failed(self, error: ShardFormatError, state: TrainState, interval: _Interval | None) -> None:
        saved = ""
        if interval is not None and cluster.num_workers(self.strategy) == 1:
            if interval.outputs:
                self._check_finite(state, TowerSums.collect(self.strategy, interval.outputs))
            if self.checkpoints.last_saved_step != state.step:
                self.checkpoints.save(state, self.config)
        if self.checkpoints.last_saved_step >= 0:
            saved = f"; the last good checkpoint is step {self.checkpoints.last_saved_step}"
        self.metrics.close()
        raise ShardFormatError(f"{error}{saved}") from None

    def _stop_agreed(self) -> bool:
        """A stop request of this or any other worker, so that every worker stops at the same step
        (and saves that checkpoint); on one machine simply this process's request."""
        agreed = cluster.any_worker(self.strategy, self.stop.requested)   # not re-read: a signal may land now
        if agreed and not self.stop.requested:
            self.stop.request("stop requested by another worker")
        return agreed

    def _check_finite(self, state: TrainState, sums: TowerSums) -> None:
        """Stop the run when a loss since the last check is not finite (on every worker alike), before
        anything is saved: the newest checkpoint stays the last good one.

        Raises:
            RunError: one line with the step, the last good checkpoint and what to change.
        """
        bad = not np.isfinite(sums.sums["loss_sum"]).all()
        if not cluster.any_worker(self.strategy, bad):
            return
        good = self.checkpoints.last_saved_step
        where = f"the last good checkpoint is step {good}" if good >= 0 else "no checkpoint was saved"
        raise RunError(f"{self.run_dir}: the training loss is not finite by step {state.step} ({where}; resume "
                       f"from it with --resume after lowering optim.lr, or with optim.clip_global_norm, or "
                       f"model.mixed_precision = \"none\")")

    def _checkpoint_due(self, state: TrainState) -> bool:
        every = self.config.train.checkpoint_every_steps
        return every > 0 and state.step % every == 0

    def _log_train(self, state: TrainState, interval: _Interval) -> _Interval:
        sums = TowerSums.collect(self.strategy, interval.outputs)       # waits for the interval's steps
        self._check_finite(state, sums)
        seconds = time.perf_counter() - interval.start
        record = summarise("train", state, sums, self.devices, seconds=seconds, lr=towers.current_lr(self.optimizer))
        record.update(eta_fields(self._remaining_updates(state), self.update_batch, record.get("positions_per_s"),
                                 time.perf_counter() - self.started, self.price_per_hour))
        self.metrics.write(record)
        return _Interval()

    def _validate(self, state: TrainState) -> None:
        """Loss and accuracy on the validation split (capped by data.validation_positions), per tower."""
        if not self.validation_paths:
            log.info("no validation split in %s: skipping validation", self.data_dir)
            return
        # Not cut short by a stop request: the pass is bounded (data.validation_positions), every worker
        # must make the same collectives, and the stage's record would otherwise be lost for good (the
        # checkpoint that follows is past it).
        start = time.perf_counter()
        # Each worker reads only its share of the rows (pipeline.make_eval_dataset with an input context).
        dataset = self.strategy.distribute_datasets_from_function(
            lambda ctx: pipeline.make_eval_dataset(self.validation_paths, global_batch=self.global_batch,
                                                   max_positions=self.config.data.validation_positions,
                                                   input_context=ctx))
        try:
            outputs = [self.eval_step(batch) for batch in dataset]
        except tf.errors.OpError as exc:
            self._data_error(exc, state, _Interval())   # the stage is trained: its end is a good checkpoint
        failed = pipeline.take_read_error()             # the pipeline ended early on a damaged chunk
        if failed is not None:
            self._read_failed(failed, state, _Interval())
        sums = TowerSums.collect(self.strategy, outputs)               # waits for the pass
        self.metrics.write(summarise("validation", state, sums, self.devices,
                                     seconds=time.perf_counter() - start))
