"""Data-parallel towers: the strategy, the optimizer and its lr schedule, the train and eval steps.

One code path for 1..N devices: training always runs under a tf.distribute strategy and the same
step (strategy.run, a replica-context all-reduce, experimental_local_results) is compiled everywhere:
a `MirroredStrategy` over two or more devices, a `OneDeviceStrategy` on one (tf.distribute's strategy
for a single device: it pins the listed device, its all-reduce is the identity, and it skips the
mirrored-variable machinery a one-replica MirroredStrategy would carry), a
`MultiWorkerMirroredStrategy` across machines.

The update is the mean gradient over every sample of every tower and every micro-batch:

  * each tower computes the gradient of  sum(per-example loss) / update_batch  on its micro-batches,
    where update_batch = global_batch * micro_batches (all towers, all micro-batches);
  * the towers' gradients are summed with ONE all-reduce per update (not per micro-batch), which
    yields exactly the mean gradient of a single device seeing all update_batch samples;
  * global-norm clipping is applied to that all-reduced gradient (Keras' own clipnorm/global_clipnorm
    would clip each tower's partial gradient before the sum, which is a different update);
  * the optimizer then applies it with its own all-reduce disabled (build_optimizer): Keras 3 always
    sums over replicas inside apply() and has no switch to skip it.

Batch-norm under towers: with model.batch_norm = "local" each tower normalises with its own
per-replica batch statistics, so results depend on the number of towers; "sync" uses
keras BatchNormalization(synchronized=True), which all-reduces the statistics (tower-count
independent, one extra all-reduce per layer); "none" has no batch-norm at all.

Engine evaluations as targets (train.eval_weight λ, train.eval_scale a; example_losses): the gradient
is taken of the per-example loss
  (1-λ)·BCE(logit, win) + λ·BCE(logit, sigmoid(eval / a))   where the position has an evaluation,
  BCE(logit, win)                                           where it has none (features.EVAL_NONE),
with λ replaced by λ·trust[ply range] when a trust table is given (train.eval_weighting = "trust", per
evalfit.PLY_EDGES range), and λ = 0 builds exactly the result-only graph (bit-identical losses, gradients and metrics). The
metric sums below stay about the *result*: loss_sum is the result BCE whatever λ, so the logged loss
means what evaluate reports, and runs with different λ (or none) compare on one scale; the blended
loss is what the optimizer minimises, never logged (it would need its own METRIC_KEYS entry in
run_log and report, and mixes two targets into one number).

Metric sums returned by the steps (per tower, per update):
  loss_sum  float32  sum of per-example binary cross-entropy against the result (draws included)
  correct   float32  decisive positions (label 0 or 1) whose sign of the logit matches the label
  decisive  float32  positions with label 0 or 1 (draws, label 0.5, are excluded from accuracy)
  count     float32  positions seen
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence

import keras
import tensorflow as tf

from shogi_dnn.config import Config, OptimConfig, TrainConfig, scaled_lr  # scaled_lr: also towers.scaled_lr
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.dataset.evalfit import PLY_RANGE_WIDTH
from shogi_dnn.dataset.features import EVAL_NONE
from shogi_dnn.training import memory
from shogi_dnn.training.cluster import Cluster, replica_values
from shogi_dnn.training.cluster import make_multi_worker_strategy as multi_worker_strategy
from shogi_dnn.wording import plural

log = logging.getLogger(__name__)

Batch = dict[str, tf.Tensor]
METRIC_KEYS = ("loss_sum", "correct", "decisive", "count")   # per-tower sums of every train and eval step
BUSY_KEY = "busy_s"   # train steps only, besides METRIC_KEYS: the tower's own compute seconds (not a metric
                      # of the model; code iterating METRIC_KEYS, e.g. the eval step, never sees it)


# ----------------------------------------------------------------------------------------------------
# Strategy


def make_strategy(simulate_devices: int | None = None, devices: Sequence[str] | None = None,
                  cluster: Cluster | None = None) -> tf.distribute.Strategy:
    """A MirroredStrategy over the chosen devices; a OneDeviceStrategy when there is one (same step).

    Args:
        simulate_devices: split the CPU into this many logical devices and use them as towers (to
            rehearse a multi-GPU run). If TF is already initialised with >= N logical CPUs, the first
            N are used.
        devices: explicit device names ("/gpu:0", "GPU:1", ...); default: every visible GPU, else the CPU.
        cluster: several machines (shogi_dnn.training.cluster): a MultiWorkerMirroredStrategy over every GPU of every
            worker (with simulate_devices: that many logical CPUs per worker). Create it before anything
            else touches TensorFlow.
    Raises:
        RunError: both options given, fewer logical CPUs than requested, or an unknown device.
    """
    if simulate_devices is not None and devices:
        raise RunError("--simulate-devices and --devices are exclusive")
    if cluster is not None:
        if devices:
            raise RunError("--devices with --workers: each worker uses all its GPUs (limit them with "
                           "CUDA_VISIBLE_DEVICES)")
        return multi_worker_strategy(cluster, simulate_devices)
    if simulate_devices is not None:
        names = _simulated_cpus(simulate_devices)
    elif devices:
        names = _check_devices(devices)
    else:
        gpus = tf.config.list_logical_devices("GPU")
        names = [d.name for d in gpus] or [tf.config.list_logical_devices("CPU")[0].name]
    if len(names) == 1:
        return tf.distribute.OneDeviceStrategy(names[0])
    # Logical CPUs: reduce on one device. The default (collective ops) keys its groups per process, so a
    # second strategy over a different CPU set in the same process (tests, bench) would collide.
    cpu_only = all("CPU" in name.upper() for name in names)
    cross_ops = tf.distribute.ReductionToOneDevice() if cpu_only else None
    return tf.distribute.MirroredStrategy(devices=names, cross_device_ops=cross_ops)


def benchmark_devices(max_devices: int) -> list[str]:
    """The devices a benchmark measures on: the first max_devices GPUs, else max_devices logical CPUs
    (split now: call before TensorFlow initialises, i.e. before any model or strategy is built).

    Raises:
        RunError: fewer GPUs than max_devices, or the CPU cannot be split any more.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < max_devices:
            raise RunError(f"--devices asks for {max_devices} devices but {len(gpus)} GPU(s) are visible")
        return [f"/gpu:{i}" for i in range(max_devices)]
    _simulated_cpus(max_devices)
    return [f"/cpu:{i}" for i in range(max_devices)]


def _simulated_cpus(count: int) -> list[str]:
    if count < 1:
        raise RunError(f"--simulate-devices {count}: must be >= 1")
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu) or []
    if len(configured) < count:   # keep a larger split made earlier (e.g. by the test harness)
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
        except RuntimeError:   # TF already initialised: use what is there if it is enough
            pass
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < count:
        raise RunError(f"--simulate-devices {count}: TensorFlow is already initialised with "
                       f"{len(logical)} logical CPU device(s)")
    return [d.name for d in logical[:count]]


def _check_devices(devices: Sequence[str]) -> list[str]:
    known = {d.name.lower(): d.name for d in tf.config.list_logical_devices()}
    names = []
    for device in devices:
        key = device.strip().lower()
        key = key if key.startswith("/") else "/device:" + key
        key = key.replace("/gpu:", "/device:gpu:").replace("/cpu:", "/device:cpu:")
        match = [name for k, name in known.items() if k.endswith(key.removeprefix("/"))]
        if not match:
            raise RunError(f"--devices: unknown device {device!r} (have: {', '.join(known.values())})")
        names.append(match[0])
    return names


def device_memory(strategy: tf.distribute.Strategy) -> tuple[int, str, int]:
    """(bytes, words, towers sharing them) of the memory one tower of this machine trains in: the
    smallest memory limit TensorFlow reports for its GPUs (device_lib; the towers have one each), else
    the host's RAM (memory.host_memory), which every local CPU tower shares. (0, ...) when unknown."""
    names = [name.upper() for name in strategy.extended.worker_devices]
    gpus = [name for name in names if "GPU" in name]
    if gpus:
        try:
            from tensorflow.python.client import device_lib

            limits = {d.name.upper().rsplit("DEVICE:", 1)[-1]: int(d.memory_limit)
                      for d in device_lib.list_local_devices() if d.device_type == "GPU"}
        except Exception as exc:                     # noqa: BLE001 - the check is advice: never fail on it
            log.debug("GPU memory unknown: %s", exc)
            return 0, "GPU memory (unknown)", 1
        known = [limits[key] for key in (name.rsplit("DEVICE:", 1)[-1] for name in gpus) if key in limits]
        return (min(known), f"{gpus[0].rsplit('DEVICE:', 1)[-1]} (TensorFlow's memory limit)", 1) if known else \
            (0, "GPU memory (unknown)", 1)
    available, words = memory.host_memory()
    return available, words, len(names)


def check_model_fits(config: Config, strategy: tf.distribute.Strategy, per_device_batch: int) -> None:
    """ConfigError (one line) when config.model cannot train on this machine's towers (memory.check_fits);
    call before the model is built. Only the parameter limit is checked when the memory is unknown."""
    available, where, sharing = device_memory(strategy)
    if available <= 0:
        memory.check_model_size(config.model)
        return
    estimate = memory.check_fits(config, per_device_batch, available, where, sharing)
    log.debug("memory: %s per tower, %s has %s", estimate.breakdown(), where, memory.gib(available))


def local_values(strategy: tf.distribute.Strategy, per_replica: tf.Tensor) -> list[float]:
    """One Python float per tower (experimental_local_results), in device order; with several workers,
    every tower of the cluster (a collective all-gather that every worker makes at the same point)."""
    return replica_values(strategy, per_replica)


# ----------------------------------------------------------------------------------------------------
# Learning rate and optimizer




@keras.saving.register_keras_serializable(package="shogi_dnn")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak_lr` over `warmup_steps` updates, then constant or cosine decay.

    lr(step) = peak_lr * min(1, (step + 1) / warmup_steps) * decay(step); step is the optimizer's update
    count. decay = 1 ("none"), or ("cosine") 0.5 * (1 + cos(pi * t)) with t = (step - warmup_steps) /
    (total_steps - warmup_steps) clipped to [0, 1]: 1 at the end of warm-up, 0 at `total_steps`.
    """

    def __init__(self, peak_lr: float, warmup_steps: int, decay: str = "none", total_steps: int = 0) -> None:
        if decay not in ("none", "cosine"):
            raise ValueError(f"unknown lr decay {decay!r} (none, cosine)")
        if decay == "cosine" and total_steps <= 0:
            raise ValueError("cosine lr decay needs the run's total_steps")
        self.peak_lr = float(peak_lr)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.total_steps = int(total_steps)

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        step = tf.cast(step, tf.float32)
        if self.warmup_steps <= 0:
            lr = tf.constant(self.peak_lr, tf.float32) + 0.0 * step
        else:
            lr = self.peak_lr * tf.minimum(1.0, (step + 1.0) / float(self.warmup_steps))
        if self.decay == "cosine":
            span = float(max(1, self.total_steps - self.warmup_steps))
            t = tf.clip_by_value((step - float(self.warmup_steps)) / span, 0.0, 1.0)
            lr = lr * 0.5 * (1.0 + tf.cos(math.pi * t))
        return lr

    def get_config(self) -> dict[str, float | int | str]:
        return {"peak_lr": self.peak_lr, "warmup_steps": self.warmup_steps, "decay": self.decay,
                "total_steps": self.total_steps}


MAX_WARMUP_SHARE = 0.1       # warm-up takes at most this share of a run's planned updates


def make_lr_schedule(cfg: OptimConfig, update_batch: int, total_steps: int | None = None) -> WarmupSchedule:
    """The lr schedule for `update_batch` samples per update; warm-up given in samples is rounded up
    to whole updates. total_steps: the run's planned updates (needed by cfg.lr_decay = "cosine").

    The warm-up is relative to the run's length: given total_steps, it spans at most MAX_WARMUP_SHARE of
    them (a preset's warm-up sized for a large corpus would otherwise fill most of a run on a small one:
    cpu-small's 20,000 samples were 80% of a run on 88 games), with one log line saying so.

    Raises:
        ConfigError: cosine decay without total_steps.
    """
    warmup_steps = math.ceil(cfg.warmup_samples / update_batch) if cfg.warmup_samples else 0
    if cfg.lr_decay != "none" and not total_steps:
        raise ConfigError(f"optim.lr_decay = {cfg.lr_decay!r} needs the run's planned number of updates")
    cap = int(MAX_WARMUP_SHARE * total_steps) if total_steps else warmup_steps
    if warmup_steps > cap:
        instead = (f"warming up over {plural(cap, 'update')} ({100 * MAX_WARMUP_SHARE:.0f}% of the run, "
                   f"{cap * update_batch:,} samples) instead" if cap else
                   f"no warm-up instead (the run is too short for one: at most {100 * MAX_WARMUP_SHARE:.0f}%)")
        log.warning("optim.warmup_samples = %s is %s of this run's %s (%.0f%%): %s", f"{cfg.warmup_samples:,}",
                    plural(warmup_steps, "update"), plural(total_steps, "planned update"),
                    100 * warmup_steps / total_steps, instead)
        warmup_steps = cap
    return WarmupSchedule(scaled_lr(cfg, update_batch), warmup_steps, cfg.lr_decay, total_steps or 0)


def build_optimizer(cfg: OptimConfig, global_batch: int, total_steps: int | None = None,
                    model: keras.Model | None = None, *, strategy: tf.distribute.Strategy | None = None,
                    micro_batches: int = 1, loss_scale: bool = False) -> keras.optimizers.Optimizer:
    """Create the optimizer inside strategy.scope() and build() it on the model's variables.

    Building before the first step (and before restoring a checkpoint) creates its slot variables as
    mirrored variables, so a restore fills them instead of silently deferring.

    Args:
        global_batch: positions per micro-batch over all towers.
        total_steps: planned updates of the whole run (required by cfg.lr_decay = "cosine").
        model: the model whose trainable variables the optimizer updates (required).
        strategy: the towers' strategy (default: the one whose scope is active).
        micro_batches: micro-batches accumulated per update (the lr is scaled for their total).
        loss_scale: wrap in a dynamic LossScaleOptimizer (for model.mixed_precision = "mixed_float16").
    """
    if model is None:
        raise TypeError("build_optimizer needs the model")
    strategy = strategy or tf.distribute.get_strategy()
    schedule = make_lr_schedule(cfg, global_batch * micro_batches, total_steps)
    decay = cfg.weight_decay if cfg.weight_decay > 0 else None
    with strategy.scope():
        if cfg.optimizer == "sgd":
            optimizer = keras.optimizers.SGD(schedule, momentum=cfg.momentum, nesterov=cfg.momentum > 0,
                                             weight_decay=decay)
        else:
            optimizer = keras.optimizers.Adam(schedule, weight_decay=decay)
        _disable_gradient_aggregation(optimizer)
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    return optimizer


def _disable_gradient_aggregation(optimizer: keras.optimizers.Optimizer) -> None:
    """Make the optimizer apply gradients that make_train_step has already all-reduced.

    Keras 3's TensorFlow optimizer always sums gradients over replicas inside apply() (tf.keras had
    `experimental_aggregate_gradients=False`; Keras 3 has no such switch, keras-team/keras#19308), and
    it cannot apply in cross-replica context under MirroredStrategy (it needs merge_call). The step
    does the one all-reduce itself so that it can clip the summed gradient, so the optimizer's own
    reduction becomes the identity. Pinned by tests/training/test_towers.py (N towers == one device).
    """
    if not hasattr(optimizer, "_all_reduce_sum_gradients"):
        raise RuntimeError(f"this Keras version's {type(optimizer).__name__} has no "
                           "_all_reduce_sum_gradients: the tower update needs to be revisited")
    optimizer._all_reduce_sum_gradients = list


def current_lr(optimizer: keras.optimizers.Optimizer) -> float:
    """The learning rate the next update will use."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = optimizer._learning_rate   # the schedule object (optimizer.learning_rate is its value)
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(optimizer.iterations))
    return float(optimizer.learning_rate)


# ----------------------------------------------------------------------------------------------------
# Steps


def example_losses(model: keras.Model, batch: Batch, training: bool, *, eval_weight: float = 0.0,
                   eval_scale: float = TrainConfig.eval_scale, eval_trust: Sequence[float] | None = None,
                   ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Per-example training loss [B] float32 and the metric sums of one (per-replica) batch.

    batch: board [B, 81] uint8, hands [B, 14] uint8, win [B] float32 (1 win, 0 loss, 0.5 draw), and
    eval [B] int16 (centipawns, side to move's view, EVAL_NONE = none; read only when eval_weight > 0,
    a batch without it counts as having no evaluations).
    eval_weight, eval_scale: λ and a of the module docstring (a Python float: λ = 0 adds no op at all).
    eval_trust: None (λ everywhere) or [R] floats, λ's factor per evalfit.PLY_EDGES range (reads batch["ply"]).
    The sums are about the result target whatever λ (the module docstring says why).
    """
    logits = tf.cast(model({"board": batch["board"], "hands": batch["hands"]}, training=training), tf.float32)
    logits = tf.reshape(logits, [-1])
    win = tf.cast(batch["win"], tf.float32)
    result_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=win, logits=logits)
    losses = result_losses
    if eval_weight > 0 and "eval" in batch:
        weight = float(eval_weight) if eval_trust is None else eval_weight * trust_by_ply(batch["ply"], eval_trust)
        losses = blend_eval_losses(logits, result_losses, batch["eval"], weight, eval_scale)
    decisive = tf.cast(tf.not_equal(win, 0.5), tf.float32)
    correct = decisive * tf.cast(tf.equal(logits > 0.0, win > 0.5), tf.float32)
    sums = {"loss_sum": tf.reduce_sum(result_losses), "correct": tf.reduce_sum(correct),
            "decisive": tf.reduce_sum(decisive), "count": tf.cast(tf.size(win), tf.float32)}
    return losses, sums


def trust_by_ply(ply: tf.Tensor, trust: Sequence[float]) -> tf.Tensor:
    """[B] float32 trust[range of ply] for ply [B] int (evalfit.ply_range: 20 plies a range, the last open)."""
    table = tf.constant(list(trust), tf.float32)
    index = tf.clip_by_value(tf.cast(tf.reshape(ply, [-1]), tf.int32) // PLY_RANGE_WIDTH, 0, len(trust) - 1)
    return tf.gather(table, index)


def blend_eval_losses(logits: tf.Tensor, result_losses: tf.Tensor, evals: tf.Tensor,
                      eval_weight: float | tf.Tensor, eval_scale: float) -> tf.Tensor:
    """[B] (1-λ)·result_losses + λ·BCE(logits, sigmoid(eval / a)) where eval != EVAL_NONE, else result_losses.

    eval_weight: λ, a float or a [B] float32 tensor (one λ per example)."""
    evals = tf.reshape(evals, [-1])
    has_eval = tf.not_equal(evals, tf.constant(EVAL_NONE, evals.dtype))
    target = tf.sigmoid(tf.cast(evals, tf.float32) / float(eval_scale))
    eval_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=logits)
    weight = eval_weight if isinstance(eval_weight, tf.Tensor) else float(eval_weight)
    blended = (1.0 - weight) * result_losses + weight * eval_losses
    return tf.where(has_eval, blended, result_losses)


def _add_sums(total: dict[str, tf.Tensor] | None, sums: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return sums if total is None else {k: total[k] + sums[k] for k in METRIC_KEYS}


def tower_timing_available() -> bool:
    """Whether towers can be timed: tf.timestamp fails under op determinism (the tests enable it)."""
    from tensorflow.python.framework import config as tf_config

    return not tf_config.is_op_determinism_enabled()


def tower_start_time(batches: Sequence[Batch]) -> tf.Tensor:
    """[] float64 seconds: the moment the tower's batches are available (its work starts)."""
    with tf.control_dependencies(tf.nest.flatten(batches)):
        return tf.timestamp()


def tower_busy_seconds(start: tf.Tensor, grads: Sequence[tf.Tensor]) -> tf.Tensor:
    """[] float32 seconds from `start` until the tower's local gradients are done (before the all-reduce).

    On a GPU an op counts as done once its kernel is enqueued, so the end is taken after a tiny
    device-to-host sync: one scalar (a sum of the last gradient, after all of them) copied to this
    worker's host CPU. The only host copy the timing adds; the all-reduce does not wait for it.
    """
    with tf.control_dependencies(list(grads)):
        probe = tf.reduce_sum(grads[-1])
    with tf.device("/device:CPU:0"):   # merges with the tower's job/task: this worker's host CPU
        probe = tf.identity(probe)
        with tf.control_dependencies([probe]):
            end = tf.timestamp()
    return tf.cast(end - start, tf.float32)


def make_train_step(strategy: tf.distribute.Strategy, model: keras.Model,
                    optimizer: keras.optimizers.Optimizer, *, global_batch: int, micro_batches: int = 1,
                    clip_global_norm: float = 0.0, time_towers: bool = False, eval_weight: float = 0.0,
                    eval_scale: float = TrainConfig.eval_scale, eval_trust: Sequence[float] | None = None,
                    ) -> Callable[..., dict[str, tf.Tensor]]:
    """One optimizer update from `micro_batches` distributed batches: step(b1, ..., bk).

    eval_weight, eval_scale, eval_trust: λ, the resolved a (> 0) and the per-ply-range trust or None
    (example_losses; λ = 0 = results only).

    Each b is an element of strategy.experimental_distribute_dataset over global batches of
    `global_batch` positions. Returns per-replica metric sums (METRIC_KEYS) over the k micro-batches,
    and with time_towers BUSY_KEY: the tower's own compute seconds of the update (batch available ->
    local gradients; left out when op determinism is enabled, which forbids tf.timestamp).
    """
    update_batch = global_batch * micro_batches
    variables = model.trainable_variables
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def replica_update(*batches: Batch) -> dict[str, tf.Tensor]:
        timed = time_towers and tower_timing_available()
        start = tower_start_time(batches) if timed else None
        grads, total = [tf.zeros_like(v) for v in variables], None
        for batch in batches:                      # unrolled: micro_batches is static
            # Micro-batch i+1 starts after micro-batch i's gradient: without this edge the graph may run
            # their forward passes together and hold every micro-batch's activations at once, which
            # defeats accumulation's purpose (fitting a large update batch in device memory).
            first = [start] if timed else []
            with tf.control_dependencies(grads if total is not None else first), tf.GradientTape() as tape:
                losses, sums = example_losses(model, batch, training=True, eval_weight=eval_weight,
                                              eval_scale=eval_scale, eval_trust=eval_trust)
                # Divide by the whole update batch: summing towers and micro-batches gives the mean.
                loss = tf.nn.compute_average_loss(losses, global_batch_size=update_batch)
                loss = optimizer.scale_loss(loss) if scaled else loss
            grads = [g + d for g, d in zip(grads, tape.gradient(loss, variables))]
            total = _add_sums(total, sums)
        if timed:
            total = {**total, BUSY_KEY: tower_busy_seconds(start, grads)}
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        if clip_global_norm > 0:   # a scaled gradient is clipped at the scaled norm: same update
            scale = tf.cast(optimizer.dynamic_scale, tf.float32) if scaled else 1.0
            grads, _ = tf.clip_by_global_norm(grads, clip_global_norm * scale)
        optimizer.apply(grads, variables)   # aggregation disabled by build_optimizer: no second sum
        return total

    @tf.function
    def step(*batches: Batch) -> dict[str, tf.Tensor]:
        if len(batches) != micro_batches:
            raise ValueError(f"train step takes {micro_batches} micro-batches, got {len(batches)}")
        return strategy.run(replica_update, args=batches)

    return step


def make_iterator_step(train_step: Callable[..., dict[str, tf.Tensor]],
                       micro_batches: int = 1) -> Callable[[Iterator[Batch]], dict[str, tf.Tensor]]:
    """update(iterator): one train_step on the next `micro_batches` elements of a distributed iterator,
    fetched inside the same tf.function (as model.fit does: no Python round trip per batch; measured
    ~15% faster on 4 simulated towers). The caller runs exactly as many updates as there are batches."""

    @tf.function
    def update(iterator: Iterator[Batch]) -> dict[str, tf.Tensor]:
        return train_step(*[next(iterator) for _ in range(micro_batches)])

    return update


def make_eval_step(strategy: tf.distribute.Strategy, model: keras.Model) -> Callable[[Batch], dict[str, tf.Tensor]]:
    """step(dist_batch) -> per-replica metric sums (no update). Handles partial and empty tower batches."""

    def replica_eval(batch: Batch) -> dict[str, tf.Tensor]:
        # An empty batch (a tower that ran out before the others: tf.distribute hands it a 0-row dummy)
        # skips the model: some CPU conv kernels mis-shape 0-row inputs. Its sums are zero.
        zeros = {key: tf.constant(0.0) for key in METRIC_KEYS}
        return tf.cond(tf.size(batch["win"]) > 0, lambda: example_losses(model, batch, training=False)[1],
                       lambda: zeros)

    @tf.function
    def step(batch: Batch) -> dict[str, tf.Tensor]:
        return strategy.run(replica_eval, args=(batch,))

    return step
