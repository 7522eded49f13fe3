"""Everything a run is built from, in one place: the parts the loop (trainer.py) only uses.

Two layers, so that a step can be built and run with no dataset on disk (tests/training/test_assembly.py):

  build_step_parts(config, strategy, ...)   the model, optimizer and the train/eval steps under the
                                            strategy: StepParts (needs only a Config and a strategy)
  assemble_run(config, data_dir, run_dir, strategy, ...)
                                            the dataset (manifest, shard checks, identity), the memory
                                            check, the stage plan, the evaluation target, then the step
                                            parts, checkpoints and metrics log: RunParts

The order of assemble_run is the order a start-up fails in: the data first (a missing or damaged shard
is one line before anything is built), then the memory a tower needs (before TensorFlow allocates it),
then the plan (a dataset too small for the preset), and only then TensorFlow objects.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import keras
import tensorflow as tf

from shogi_dnn import config as config_mod
from shogi_dnn.config import Config
from shogi_dnn.dataset import evalfit, identity, shards
from shogi_dnn.dataset.evalfit import EvalTarget
from shogi_dnn.training import cluster, devices
from shogi_dnn.training.checkpoints import CheckpointManager
from shogi_dnn.training.losses import Batch, LossSpec, Sums
from shogi_dnn.training.model import build_model
from shogi_dnn.training.optimizer import build_optimizer
from shogi_dnn.training.precision import Precision
from shogi_dnn.training.precision import resolve as resolve_precision
from shogi_dnn.training.run_log import MetricsLog
from shogi_dnn.training.stages import StagePlan
from shogi_dnn.training.steps import UpdateSpec, make_eval_step, make_iterator_step, make_train_step
from shogi_dnn.wording import plural

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StepParts:
    """The model and the steps that train and evaluate it, built under `strategy`.

    spec: the update's batches (global_batch per micro-batch over all towers, update_batch per optimizer
    update) and loss. train_step(b1, ..., bk) takes k distributed batches; update(iterator) fetches them
    itself (the loop's update); eval_step(batch) updates nothing. Each returns per-replica sums.
    """

    strategy: tf.distribute.Strategy
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    spec: UpdateSpec
    train_step: Callable[..., Sums]
    update: Callable[[Iterator[Batch]], Sums]
    eval_step: Callable[[Batch], Sums]

    @property
    def global_batch(self) -> int:
        return self.spec.global_batch

    @property
    def micro_batches(self) -> int:
        return self.spec.micro_batches

    @property
    def update_batch(self) -> int:
        return self.spec.update_batch


def build_step_parts(config: Config, strategy: tf.distribute.Strategy, eval_target: EvalTarget | None = None,
                     total_steps: int | None = None, no_result: bool = False) -> StepParts:
    """The model (seeded by train.seed), its optimizer and the train, update and eval steps.

    Args:
        config: the run's config (model, optim, train.global_batch/micro_batches/time_towers).
        strategy: the towers (devices.make_strategy); the model and optimizer are created in its scope.
        eval_target: λ, a and trust (evalfit.resolve_eval_target); None: results only.
        total_steps: the run's planned updates (the cosine decay's horizon; None without one).
        no_result: the training split has positions without a game result (annotate's off-path
            positions): their result loss is masked, train.no_result_weight scales theirs (losses.py).
    Raises:
        ConfigError: a global batch the towers cannot split, cosine decay without total_steps.
    """
    loss = LossSpec.for_run(config.train, eval_target or EvalTarget.results_only(config.train), no_result)
    spec = UpdateSpec.for_run(config, config_mod.global_batch(config, strategy.num_replicas_in_sync), loss)
    with strategy.scope():
        model = build_model(config.model, seed=config.train.seed)
    optimizer = build_optimizer(config.optim, spec.global_batch, total_steps, strategy=strategy, model=model,
                                micro_batches=spec.micro_batches,
                                loss_scale=config.model.mixed_precision == "mixed_float16")
    train_step = make_train_step(strategy, model, optimizer, spec)
    return StepParts(strategy, model, optimizer, spec, train_step,
                     make_iterator_step(train_step, spec.micro_batches), make_eval_step(strategy, model))


@dataclasses.dataclass(frozen=True)
class RunParts:
    """A run's parts: its data, plan, evaluation target, steps, checkpoints and metrics log.

    plan: the stages and their planned updates (StagePlan.total_updates is the lr decay's horizon,
    updates_left the ETA's). devices: every tower of every worker (cluster.device_names). started: when
    assembly began (time.perf_counter seconds): a run's elapsed time and cost count its start-up.
    precision: model.mixed_precision as resolved (config holds the policy) and why (run.json).
    """

    config: Config
    data_dir: Path
    run_dir: Path
    manifest: shards.Manifest
    dataset: identity.DatasetIdentity
    plan: StagePlan
    eval_target: EvalTarget
    steps: StepParts
    checkpoints: CheckpointManager
    metrics: MetricsLog
    devices: list[str]
    validation_paths: list[Path]
    started: float
    precision: Precision

    @property
    def is_chief(self) -> bool:
        return cluster.is_chief(self.steps.strategy)


def assemble_run(config: Config, data_dir: Path, run_dir: Path, strategy: tf.distribute.Strategy, *,
                 verify_shards: bool = False) -> RunParts:
    """Every part of a run on `data_dir` writing to `run_dir` (created), in the module docstring's order.

    verify_shards: also check every shard's sha256 (always checked: sizes, schema, counts, shapes).

    Raises:
        ShardFormatError: a missing, truncated or foreign shard.
        ConfigError: a model or batch that cannot fit a tower, a plan the dataset cannot fill.
        RunError: the workers of a multi-worker run differ in code, dataset or config
            (cluster.check_agreement).
    """
    started = time.perf_counter()
    data_dir = Path(data_dir).resolve()
    manifest = shards.read_manifest(data_dir)
    # Every shard this run reads (training and validation) against the manifest, before anything is
    # built: a missing, truncated or foreign shard is one line now, not a lost stage later. Training
    # shards may hold positions without a game result (annotate's off-path ones: losses.py masks them).
    shards.verify_shards(manifest, manifest.split("train"), full=verify_shards, allow_no_result=True)
    shards.verify_shards(manifest, manifest.split("validation"), full=verify_shards)
    no_result = no_result_positions(manifest, config)
    dataset = identity.dataset_identity(manifest)    # recorded in run.json and every checkpoint
    # Workers of one run share the code, the dataset and the config, before anything is built (a collective).
    config, chosen = resolve_precision(config, cluster.device_names(strategy), run_dir)
    log.info("model.mixed_precision = %s (%s)", chosen.policy, chosen.why)
    cluster.check_agreement(strategy, cluster.agreement_items(config.to_dict(), dataset.to_dict()))
    global_batch = config_mod.global_batch(config, strategy.num_replicas_in_sync)
    devices.check_model_fits(config, strategy, global_batch // strategy.num_replicas_in_sync)
    update_batch = global_batch * config.train.micro_batches
    plan = StagePlan(manifest, config, update_batch, cluster.num_workers(strategy))
    eval_target = evalfit.resolve_eval_target(config.train, manifest)
    steps = build_step_parts(config, strategy, eval_target, plan.total_updates(), no_result > 0)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = CheckpointManager(run_dir, steps.model, steps.optimizer, config.train.keep_checkpoints,
                                    dataset=dataset.to_dict())
    metrics = MetricsLog(run_dir, write_files=cluster.is_chief(strategy))   # the chief alone writes metrics
    return RunParts(config, data_dir, run_dir, manifest, dataset, plan, eval_target, steps,
                    checkpoints, metrics, cluster.device_names(strategy),
                    [manifest.shard_path(s) for s in manifest.split("validation")], started, chosen)


def no_result_positions(manifest: shards.Manifest, config: Config) -> int:
    """Training positions without a game result (manifest `no_result`), logged with their share: the
    share is what `annotate --off-path N` made; they train on their evaluation target alone (and the
    policy), times train.no_result_weight."""
    train = manifest.split("train")
    count = sum(s.no_result for s in train)
    if count:
        total = max(1, sum(s.positions for s in train))
        log.info("%s without a game result (%.1f%% of the training split: annotate's off-path positions): "
                 "evaluation target alone, loss weight train.no_result_weight = %g",
                 plural(count, "position"), 100 * count / total, config.train.no_result_weight)
    return count
