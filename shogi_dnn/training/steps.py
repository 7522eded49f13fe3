"""The distributed steps: one optimizer update from k micro-batches on every tower, and the eval step.

The update is the mean gradient over every sample of every tower and every micro-batch:

  * each tower computes the gradient of  sum(per-example loss) / update_batch  on its micro-batches,
    where update_batch = global_batch * micro_batches (all towers, all micro-batches);
  * the towers' gradients are summed with ONE all-reduce per update (not per micro-batch), which
    yields exactly the mean gradient of a single device seeing all update_batch samples;
  * global-norm clipping is applied to that all-reduced gradient (Keras' own clipnorm/global_clipnorm
    would clip each tower's partial gradient before the sum, which is a different update);
  * the optimizer then applies it with its own all-reduce disabled (optimizer.build_optimizer): Keras 3
    always sums over replicas inside apply() and has no switch to skip it.

Batch-norm under towers: with model.batch_norm = "local" each tower normalises with its own
per-replica batch statistics, so results depend on the number of towers; "sync" uses
keras BatchNormalization(synchronized=True), which all-reduces the statistics (tower-count
independent, one extra all-reduce per layer); "none" has no batch-norm at all.

The loss and the metric sums the steps return (METRIC_KEYS) are losses.py's; a train step may add
BUSY_KEY, the tower's own compute seconds (tower timing below).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import keras
import tensorflow as tf

from shogi_dnn.config import TrainConfig
from shogi_dnn.training.losses import METRIC_KEYS, Batch, add_sums, example_losses

BUSY_KEY = "busy_s"   # train steps only, besides METRIC_KEYS: the tower's own compute seconds (not a metric
                      # of the model; code iterating METRIC_KEYS, e.g. the eval step, never sees it)


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
            total = add_sums(total, sums)
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
