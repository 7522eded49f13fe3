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

XLA (train.jit_compile): each micro-batch's forward and backward pass (tower_gradients) is one
jit-compiled function; the accumulation over micro-batches, the all-reduce, clipping and the optimizer's
apply stay in the ordinary graph (no cross-device all-reduce inside an XLA cluster). With synchronised
batch norm the forward pass itself all-reduces, so jit_compile is ignored there (one log line).
Results equal the plain step's to float tolerance, not bit for bit (XLA fuses and reorders); a run resumed
with it is bit-identical to the uninterrupted one. Keras' model.fit uses no XLA on a CPU-only machine nor
under a tf.distribute strategy (jit_compile="auto"). train/base.toml turns it on for every preset
(docs/benchmarks.md, "Memory churn and XLA").

The loss (a LossSpec, part of the UpdateSpec) and the metric sums the steps return (METRIC_KEYS) are
losses.py's; a train step may add BUSY_KEY, the tower's own compute seconds (tower timing below).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Sequence

import keras
import tensorflow as tf

from shogi_dnn.config import Config
from shogi_dnn.training.losses import Batch, LossSpec, Sums, add_sums, example_losses, metric_keys
from shogi_dnn.training.model import has_policy_head

log = logging.getLogger(__name__)

BUSY_KEY = "busy_s"   # train steps only, besides METRIC_KEYS: the tower's own compute seconds (not a metric
                      # of the model; code iterating METRIC_KEYS, e.g. the eval step, never sees it)


@dataclasses.dataclass(frozen=True)
class UpdateSpec:
    """One optimizer update's settings besides the model and its optimizer (make_train_step)."""

    global_batch: int                  # positions per micro-batch over all towers
    micro_batches: int = 1             # micro-batches whose gradients make one update
    clip_global_norm: float = 0.0      # the all-reduced gradient's global-norm cap (0: none)
    time_towers: bool = False          # add BUSY_KEY, each tower's compute seconds
    jit_compile: bool = False          # XLA for each micro-batch's forward and backward pass
    loss: LossSpec = dataclasses.field(default_factory=LossSpec)   # the per-example loss

    @classmethod
    def for_run(cls, config: Config, global_batch: int, loss: LossSpec) -> UpdateSpec:
        """A run's update: optim.clip_global_norm and train.micro_batches/time_towers/jit_compile."""
        return cls(global_batch, config.train.micro_batches, config.optim.clip_global_norm,
                   config.train.time_towers, config.train.jit_compile, loss)

    @property
    def update_batch(self) -> int:
        """Positions per optimizer update: global_batch x micro_batches."""
        return self.global_batch * self.micro_batches


def make_train_step(strategy: tf.distribute.Strategy, model: keras.Model,
                    optimizer: keras.optimizers.Optimizer, spec: UpdateSpec) -> Callable[..., Sums]:
    """One optimizer update from `spec.micro_batches` distributed batches: step(b1, ..., bk).

    Each b is an element of strategy.experimental_distribute_dataset over global batches of
    `spec.global_batch` positions. Returns per-replica metric sums (losses.metric_keys) over the k
    micro-batches, and with spec.time_towers BUSY_KEY: the tower's own compute seconds of the update
    (batch available -> local gradients; left out when op determinism is enabled, which forbids
    tf.timestamp). spec.jit_compile: see the module docstring for what stays outside XLA.
    """
    jit_compile = spec.jit_compile
    if jit_compile and has_sync_batch_norm(model):
        log.info("train.jit_compile ignored: synchronised batch norm all-reduces inside the forward pass")
        jit_compile = False
    variables = model.trainable_variables
    losses_of = functools.partial(example_losses, model, training=True, spec=spec.loss)

    def replica_update(*batches: Batch) -> Sums:
        timed = spec.time_towers and tower_timing_available()
        start = tower_start_time(batches) if timed else None
        grads, total = tower_gradients(losses_of, optimizer, variables, batches, spec.update_batch,
                                       first_after=[start] if timed else [], jit_compile=jit_compile)
        if timed:
            total = {**total, BUSY_KEY: tower_busy_seconds(start, grads)}
        apply_all_reduced(optimizer, variables, grads, spec.clip_global_norm)
        return total

    @tf.function
    def step(*batches: Batch) -> Sums:
        if len(batches) != spec.micro_batches:
            raise ValueError(f"train step takes {spec.micro_batches} micro-batches, got {len(batches)}")
        return strategy.run(replica_update, args=batches)

    return step


def has_sync_batch_norm(model: keras.Model) -> bool:
    """Whether any layer of the model is a synchronised BatchNormalization (an all-reduce per call)."""
    return any(isinstance(layer, keras.layers.BatchNormalization) and getattr(layer, "synchronized", False)
               for layer in model._flatten_layers())


def tower_gradients(losses_of: Callable[[Batch], tuple[tf.Tensor, Sums]],
                    optimizer: keras.optimizers.Optimizer, variables: Sequence[tf.Variable],
                    batches: Sequence[Batch], update_batch: int, first_after: Sequence[tf.Tensor] = (),
                    jit_compile: bool = False) -> tuple[list[tf.Tensor], Sums]:
    """This tower's gradient of sum(losses) / update_batch over its micro-batches, and their metric sums.

    losses_of(batch) -> ([B] float32 losses, sums); the gradients have the variables' shapes (scaled by
    the loss scale of a LossScaleOptimizer); first_after: what the first micro-batch waits for;
    jit_compile: each micro-batch's forward and backward pass is one XLA cluster.
    """
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def micro_batch_gradients(batch: Batch) -> tuple[list[tf.Tensor], Sums]:
        with tf.GradientTape() as tape:
            losses, sums = losses_of(batch)
            # Divide by the whole update batch: summing towers and micro-batches gives the mean.
            loss = tf.nn.compute_average_loss(losses, global_batch_size=update_batch)
            loss = optimizer.scale_loss(loss) if scaled else loss
        return tape.gradient(loss, variables), sums

    if jit_compile:
        micro_batch_gradients = tf.function(micro_batch_gradients, jit_compile=True)
    grads, total = [tf.zeros_like(v) for v in variables], None
    for batch in batches:                      # unrolled: micro_batches is static
        # Micro-batch i+1 starts after micro-batch i's gradient: without this edge the graph may run
        # their forward passes together and hold every micro-batch's activations at once, which
        # defeats accumulation's purpose (fitting a large update batch in device memory).
        with tf.control_dependencies(grads if total is not None else first_after):
            delta, sums = micro_batch_gradients(batch)
        grads = [g + d for g, d in zip(grads, delta)]
        total = add_sums(total, sums)
    assert total is not None                   # batches holds at least one micro-batch
    return grads, total


def apply_all_reduced(optimizer: keras.optimizers.Optimizer, variables: Sequence[tf.Variable],
                      grads: Sequence[tf.Tensor], clip_global_norm: float) -> None:
    """Sum the towers' gradients (ONE all-reduce), clip their global norm, apply them (replica context)."""
    grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, list(grads))
    if clip_global_norm > 0:   # a scaled gradient is clipped at the scaled norm: same update
        scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        scale = tf.cast(optimizer.dynamic_scale, tf.float32) if scaled else 1.0
        grads, _ = tf.clip_by_global_norm(grads, clip_global_norm * scale)
    # The optimizer's weight decay and step count do not depend on the gradient: without this edge they
    # ran even when the update failed for want of a batch (the stream ended on a shard read error), so
    # the checkpoint of the last good step held one more decay and step count than its weights had seen
    # and resumed off an uninterrupted run. Ops outside a nested tf.function's own graph do
    # not order it (a control edge on the call was measured to change nothing), hence here.
    with tf.control_dependencies(list(grads)):
        optimizer.apply(grads, variables)   # aggregation disabled by build_optimizer: no second sum


def make_iterator_step(train_step: Callable[..., Sums],
                       micro_batches: int = 1) -> Callable[[Iterator[Batch]], Sums]:
    """update(iterator): one train_step on the next `micro_batches` elements of a distributed iterator,
    fetched inside the same tf.function (as model.fit does: no Python round trip per batch; measured
    ~15% faster on 4 simulated towers). The caller runs exactly as many updates as there are batches."""

    @tf.function
    def update(iterator: Iterator[Batch]) -> Sums:
        return train_step(*[next(iterator) for _ in range(micro_batches)])

    return update


def make_eval_step(strategy: tf.distribute.Strategy, model: keras.Model) -> Callable[[Batch], Sums]:
    """step(dist_batch) -> per-replica metric sums (no update). Handles partial and empty tower batches.

    The sums are METRIC_KEYS, and losses.POLICY_KEYS for a model with a policy head (its batches carry
    `policy` labels)."""
    keys = metric_keys(policy=has_policy_head(model))

    def replica_eval(batch: Batch) -> Sums:
        # An empty batch (a tower that ran out before the others: tf.distribute hands it a 0-row dummy)
        # skips the model: some CPU conv kernels mis-shape 0-row inputs. Its sums are zero.
        zeros = {key: tf.constant(0.0) for key in keys}
        return tf.cond(tf.size(batch["win"]) > 0, lambda: example_losses(model, batch, training=False)[1],
                       lambda: zeros)

    @tf.function
    def step(batch: Batch) -> Sums:
        return strategy.run(replica_eval, args=(batch,))

    return step


# Tower timing (train.time_towers)


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
