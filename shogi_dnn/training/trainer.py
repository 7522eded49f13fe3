"""The staged training loop: stages over sample groups, validation and a checkpoint after each stage,
periodic checkpoints inside a stage, SIGINT/SIGTERM -> checkpoint and clean exit, exact resume.

Read top to bottom: Trainer.run -> _train_stage (the stage's loop) -> self.update
(steps.make_iterator_step) -> the replica's step (steps.make_train_step). What the loop uses is built
by assembly.assemble_run; a run starts (fresh or resumed, config.json and run.json) in
resume.start_run; stop requests and the stage input teardowns are interrupts.py's.

Run directory (file names: run_files.py; see also checkpoints.py and run_log.py):
  RUN/config.json   the resolved Config (config.from_dict(json.load(...)) reads it back)
  RUN/run.json      data_dir, dataset (its identity: identity.py), history, devices, num_replicas,
                    num_workers, batches, peak lr, resume command
  RUN/metrics.jsonl, RUN/tb/, RUN/checkpoints/, RUN/model.keras (at the end)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any, NoReturn

import numpy as np
import tensorflow as tf

from shogi_dnn.dataset import identity, shards
from shogi_dnn.errors import RunError, ShardFormatError, ShogiDnnError
from shogi_dnn.folders import run_files
from shogi_dnn.training import cluster, pipeline, run_log
from shogi_dnn.training.assembly import RunParts
from shogi_dnn.training.checkpoints import save_model
from shogi_dnn.training.interrupts import (
    RELEASE_WAIT_DONE,
    RELEASE_WAIT_STOPPED,
    StopFlag,
    join_releases,
    stage_input,
)
from shogi_dnn.training.optimizer import current_lr, swap_average
from shogi_dnn.training.resume import StartOptions, start_run
from shogi_dnn.training.run_log import TowerSums, eta_fields, summarise
from shogi_dnn.training.stages import Stage, TrainState
from shogi_dnn.wording import progress_bar

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """How Trainer.run ended: the final state, and whether a stop request (signal) ended it early."""

    state: TrainState
    interrupted: bool


class _Interval:
    """Step outputs since the last log line, and when the interval started."""

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []
        self.start = time.perf_counter()


class Trainer:
    """Trains one run from its parts (assembly.assemble_run): call run().

    options: how the run starts (fresh or resumed, the command lines, the price); stop: the command's stop
    flag, which catches signals from start-up on. update: the loop's update(iterator) (StepParts.update);
    an attribute so that a test can wrap it.
    """

    def __init__(self, parts: RunParts, options: StartOptions | None = None,
                 stop: StopFlag | None = None) -> None:
        self.parts, self.options = parts, options or StartOptions()
        self.config, self.strategy, self.run_dir = parts.config, parts.steps.strategy, parts.run_dir
        self.plan, self.checkpoints = self.parts.plan, self.parts.checkpoints
        self.metrics, self.steps = self.parts.metrics, self.parts.steps
        self.update, self.update_batch = self.steps.update, self.steps.update_batch
        self.stop = stop or StopFlag()
        self.releases: list[threading.Thread] = []     # stage input teardowns (stage_input)

    def run(self) -> TrainResult:
        """Train every remaining stage; validate and checkpoint after each. Returns early on a signal.

        Raises:
            RunError: one line when the run directory was deleted, or the dataset replaced, under the run
                (_ground_lost), whatever error that caused.
        """
        folder = os.stat(self.run_dir)
        try:
            return self._run()
        except (OSError, tf.errors.OpError, ShogiDnnError) as exc:
            lost = self._ground_lost((folder.st_dev, folder.st_ino))
            if lost is None:
                raise
            raise RunError(lost) from exc

    def _run(self) -> TrainResult:
        state = start_run(self.parts, self.options)
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
        swap_average(self.steps.optimizer)      # the final model is the weights' average (optim.ema)
        if self.parts.is_chief:   # the other workers keep the final checkpoint (same weights)
            save_model(self.steps.model, self.run_dir)
            log.info("done: step=%d samples=%d, model saved to %s", state.step, state.samples,
                     self.run_dir / run_files.MODEL_FILE)
        else:
            log.info("done: step=%d samples=%d (the chief saves the model; this worker keeps its final "
                     "checkpoint)", state.step, state.samples)
        self.metrics.close()
        join_releases(self.releases, RELEASE_WAIT_DONE)
        return TrainResult(state, interrupted=False)

    # -- one stage --------------------------------------------------------------------------------

    def _train_stage(self, stage: Stage, state: TrainState) -> tuple[TrainState, bool]:
        """Run the stage's remaining updates. Returns (state, False) when stopped inside the stage.

        The stage's input iterator is held only by a one-item list, torn down in the background when the
        stage returns (interrupts.stage_input: its teardown can take 50+ s after a Ctrl-C)."""
        errors = pipeline.ReadErrors()     # the stage input's shard read errors
        try:                 # the stage opens its shards here: one unreadable now is a read error as well
            remaining = stage.remaining(state.position)
            holder = self._stage_batches(stage, state.position, errors)
        except ShardFormatError as exc:
            self._read_failed(exc, state, None)
        interval = _Interval()
        desc = run_log.position_label(stage.epoch, stage.index, stage.group)   # as the console line says it
        with stage_input(holder, self.releases) as batches, \
                progress_bar(total=stage.updates, initial=stage.updates - remaining, desc=desc, unit="step",
                             redirected="silent") as bar:
            for done in range(1, remaining + 1):
                try:
                    interval.outputs.append(self.update(batches[0]))
                except tf.errors.OpError as exc:
                    self._data_error(exc, errors, state, interval)
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

    def _stage_batches(self, stage: Stage, skip: int, errors: pipeline.ReadErrors) -> list[Any]:
        """[the stage's distributed input iterator from position `skip`], in a list that alone holds it;
        its shard read errors go to `errors`.

        One path on one machine or several: each worker's pipeline reads only its read lanes and yields
        its share of every global batch as per-replica batches (contiguous, tower 0 first)."""
        global_batch, mirror = self.steps.global_batch, self.config.data.mirror
        return [iter(self.strategy.distribute_datasets_from_function(
            lambda ctx: pipeline.make_train_dataset(
                stage.paths, global_batch=global_batch, seed=stage.seed, skip_samples=skip,
                shuffle_buffer=stage.shuffle_buffer, mirror=mirror, lanes=stage.lanes,
                input_context=ctx, rows=stage.rows, policy_labels=self.config.model.policy_head,
                errors=errors)))]

    def _remaining_updates(self, state: TrainState) -> tuple[int, int, int]:
        """Updates left in the current stage, epoch and run (from the plan, no data read)."""
        return self.plan.updates_left(state)

    # -- stops, errors, logs ----------------------------------------------------------------------

    def _interrupted(self, state: TrainState) -> TrainResult:
        if self.checkpoints.last_saved_step != state.step:
            self.checkpoints.save(state, self.config)
        log.info("stopped (%s) at step=%d samples=%d; checkpoint saved. Resume with:\n  %s",
                 self.stop.signal_name, state.step, state.samples, self.options.resume_command or "--resume")
        self.metrics.close()
        join_releases(self.releases, RELEASE_WAIT_STOPPED)
        return TrainResult(state, interrupted=True)

    def _data_error(self, exc: tf.errors.OpError, errors: pipeline.ReadErrors, state: TrainState,
                    interval: _Interval | None) -> None:
        """A failed input pipeline: a shard read error (recorded in `errors`) becomes one line, after
        saving a checkpoint of the last good step where possible (one worker: a cluster's workers could not
        agree on it any more); any other TensorFlow error is raised as it is."""
        error = errors.take()
        if error is None:
            raise exc
        self._read_failed(error, state, interval)

    def _read_failed(self, error: ShardFormatError, state: TrainState,
                     interval: _Interval | None) -> NoReturn:
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

    def _ground_lost(self, folder: tuple[int, int]) -> str | None:
        """Why the run cannot go on when its run directory is gone (deleted, or another folder in its place:
        its writes fail with "No such file or directory: 'RUN/metrics.jsonl'") or its dataset's manifest now
        lists other shards (converted again under the run: "rows [0, N) are outside the M positions of the
        shards"); None when neither happened."""
        good = self.checkpoints.last_saved_step
        try:
            now = os.stat(self.run_dir)
            moved = (now.st_dev, now.st_ino) != folder
        except OSError:
            moved = True
        if moved:
            lost = (f"the last checkpoint, step {good}, went with it" if good >= 0
                    else "no checkpoint was saved")
            return (f"{self.run_dir}: the run directory was deleted while this run wrote to it ({lost}); "
                    f"nothing more can be saved: start again with a new --run-dir")
        data_dir = self.parts.data_dir
        try:
            digest = identity.manifest_digest(shards.read_manifest(data_dir))
        except (OSError, ShogiDnnError):
            digest = None
        if digest == self.parts.dataset.manifest:
            return None
        where = f"the last good checkpoint is step {good}" if good >= 0 else "no checkpoint was saved"
        return (f"{data_dir}: the dataset was {'replaced' if digest else 'removed'} while this run read it "
                f"(its manifest.json no longer lists the shards the run started on; {where}): resume with "
                f"--resume --data-changed to go on with the new data, or restore the old one")

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
        bad = not all(np.isfinite(sums.sums[key]).all() for key in ("loss_sum", "policy_loss_sum")
                      if key in sums.sums)
        if not cluster.any_worker(self.strategy, bad):
            return
        good = self.checkpoints.last_saved_step
        where = f"the last good checkpoint is step {good}" if good >= 0 else "no checkpoint was saved"
        raise RunError(f"{self.run_dir}: the training loss is not finite by step {state.step} ({where}; "
                       f"resume from it with --resume after lowering optim.lr, or with "
                       f"optim.clip_global_norm, or model.mixed_precision = \"none\")")

    def _checkpoint_due(self, state: TrainState) -> bool:
        every = self.config.train.checkpoint_every_steps
        return every > 0 and state.step % every == 0

    def _log_train(self, state: TrainState, interval: _Interval) -> _Interval:
        sums = TowerSums.collect(self.strategy, interval.outputs)       # waits for the interval's steps
        self._check_finite(state, sums)
        seconds = time.perf_counter() - interval.start
        record = summarise("train", state, sums, self.parts.devices, seconds=seconds,
                           lr=current_lr(self.steps.optimizer))
        record.update(eta_fields(self._remaining_updates(state), self.update_batch,
                                 record.get("positions_per_s"),
                                 time.perf_counter() - self.parts.started, self.options.price_per_hour))
        self.metrics.write(record)
        return _Interval()

    def _validate(self, state: TrainState) -> None:
        """Loss and accuracy on the validation split (capped by data.validation_positions), per tower."""
        if not self.parts.validation_paths:
            log.info("no validation split in %s: skipping validation", self.parts.data_dir)
            return
        # Not cut short by a stop request: the pass is bounded (data.validation_positions), every worker
        # must make the same collectives, and the stage's record would otherwise be lost for good (the
        # checkpoint that follows is past it).
        start, errors = time.perf_counter(), pipeline.ReadErrors()
        # Each worker reads only its share of the rows (pipeline.make_eval_dataset with an input context).
        dataset = self.strategy.distribute_datasets_from_function(
            lambda ctx: pipeline.make_eval_dataset(self.parts.validation_paths,
                                                   global_batch=self.steps.global_batch,
                                                   max_positions=self.config.data.validation_positions,
                                                   input_context=ctx,
                                                   policy_labels=self.config.model.policy_head,
                                                   errors=errors))
        averaged = swap_average(self.steps.optimizer)  # validate the weights' average (optim.ema)
        try:
            outputs = [self.steps.eval_step(batch) for batch in dataset]
        except tf.errors.OpError as exc:
            self._data_error(exc, errors, state, _Interval())   # the stage is trained: a good checkpoint
        finally:
            if averaged:
                swap_average(self.steps.optimizer)      # training goes on from the trained weights
        failed = errors.take()                          # the pipeline ended early on a damaged chunk
        if failed is not None:
            self._read_failed(failed, state, _Interval())
        sums = TowerSums.collect(self.strategy, outputs)               # waits for the pass
        self.metrics.write(summarise("validation", state, sums, self.parts.devices,
                                     seconds=time.perf_counter() - start))
