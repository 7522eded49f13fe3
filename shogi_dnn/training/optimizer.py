"""The optimizer and its learning-rate schedule: warm-up, cosine decay, the lr for the update batch.

The optimizer applies a gradient that the train step (steps.py) has already summed over the towers and
clipped, with its own all-reduce disabled (_disable_gradient_aggregation): Keras 3 always sums over
replicas inside apply() and has no switch to skip it.
"""

from __future__ import annotations

import logging
import math

import keras
import tensorflow as tf

from shogi_dnn.config import OptimConfig, scaled_lr  # scaled_lr: also optimizer.scaled_lr
from shogi_dnn.errors import ConfigError
from shogi_dnn.wording import plural

log = logging.getLogger(__name__)

__all__ = ["MAX_WARMUP_SHARE", "WarmupSchedule", "build_optimizer", "current_lr", "make_lr_schedule",
           "scaled_lr", "swap_average"]


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
    if total_steps and warmup_steps > cap:       # without total_steps the cap is the warm-up itself
        share = f"{100 * MAX_WARMUP_SHARE:.0f}%"
        instead = (f"warming up over {plural(cap, 'update')} ({share} of the run, "
                   f"{cap * update_batch:,} samples) instead" if cap else
                   f"no warm-up instead (the run is too short for one: at most {share})")
        log.warning("optim.warmup_samples = %s is %s of this run's %s (%.0f%%): %s",
                    f"{cfg.warmup_samples:,}", plural(warmup_steps, "update"),
                    plural(total_steps, "planned update"),
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
    ema = {"use_ema": True, "ema_momentum": cfg.ema} if cfg.ema > 0 else {}
    with strategy.scope():
        if cfg.optimizer == "sgd":
            optimizer = keras.optimizers.SGD(schedule, momentum=cfg.momentum, nesterov=cfg.momentum > 0,
                                             weight_decay=decay, **ema)
        else:
            optimizer = keras.optimizers.Adam(schedule, weight_decay=decay, **ema)
        _disable_gradient_aggregation(optimizer)
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    return optimizer


def swap_average(optimizer: keras.optimizers.Optimizer) -> bool:
    """Exchange the model's trainable weights with their moving average (optim.ema), on every tower; a
    second call swaps them back, bit for bit. Returns False (and does nothing) without an average.
    Call in cross-replica context (outside strategy.run)."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    if not getattr(optimizer, "use_ema", False):
        return False
    for weight, average in zip(optimizer._trainable_variables, optimizer._model_variables_moving_average):
        held = tf.identity(weight.value)
        weight.assign(average.value)
        average.assign(held)
    return True


def _disable_gradient_aggregation(optimizer: keras.optimizers.Optimizer) -> None:
    """Make the optimizer apply gradients that make_train_step has already all-reduced.

    Keras 3's TensorFlow optimizer always sums gradients over replicas inside apply() (tf.keras had
    `experimental_aggregate_gradients=False`; Keras 3 has no such switch, keras-team/keras#19308), and
    it cannot apply in cross-replica context under MirroredStrategy (it needs merge_call). The step
    does the one all-reduce itself so that it can clip the summed gradient, so the optimizer's own
    reduction becomes the identity. Pinned by tests/training/test_steps.py (N towers == one device).
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
