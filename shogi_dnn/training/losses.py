"""The per-example training loss and the metric sums every train and eval step returns.

Every setting of the loss is one LossSpec, built once per run from the config (LossSpec.for_run).

Engine evaluations as targets (train.eval_weight λ, train.eval_scale a; value_losses): the gradient
is taken of the per-example loss
  (1-λ)·BCE(logit, win) + λ·BCE(logit, sigmoid(eval / a))   where the position has an evaluation,
  BCE(logit, win)                                           where it has none (features.EVAL_NONE),
with λ replaced by λ·trust[ply range] when a trust table is given (train.eval_weighting = "trust", per
evalfit.PLY_EDGES range), and λ = 0 adds no op to the result-only loss. The metric sums below stay
about the *result*: loss_sum is the result BCE whatever λ, so the logged loss means what evaluate
reports, and runs with different λ (or none) compare on one scale; the blended loss is what the
optimizer minimises, never logged (it would need its own METRIC_KEYS entry in run_log and report, and
mixes two targets into one number).

Policy head (model.policy_head; policy_metric_sums): the per-example loss adds train.policy_weight x the
sparse softmax cross-entropy of the move played (batch["policy"], dataset/policy.py's label; a position
without one, label -1, adds 0). Every per-example loss, masked ones included, is divided by the whole
update batch by the step (steps.tower_gradients), so a masked position weighs 0 in a mean over all.

Positions without a game result (win NaN: annotate's off-path positions; no_result_weight set, which
assembly does when the training split has such shards): their result loss is masked, they train on the
evaluation target alone (λ = 1 for them; no evaluation: no value loss) plus the policy, the whole times
train.no_result_weight. Without such shards (no_result_weight None) no mask is built.

Metric sums (per tower, per update; a new training-time metric is a sum here and a field of run_log):
  loss_sum  float32  sum of per-example binary cross-entropy against the result (draws included)
  correct   float32  decisive positions (label 0 or 1) whose sign of the logit matches the label
  decisive  float32  positions with label 0 or 1 (draws, label 0.5, are excluded from accuracy)
  count     float32  positions seen
and with no_result_weight set (RESULTS_KEY; loss_sum, correct, decisive then leave out no-result rows):
  results   float32  positions with a game result (the denominator of the logged loss)
and with a policy head (POLICY_KEYS):
  policy_loss_sum  float32  sum of the policy cross-entropy over positions with a move label
  policy_correct   float32  of those, positions whose argmax over ALL 2187 labels is the label (legal or
                            not: no legal-move mask at training time; evaluate's top-1 is over legal moves)
  policy_count     float32  positions with a move label (label >= 0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
import tensorflow as tf

from shogi_dnn.config import TrainConfig
from shogi_dnn.dataset.evalfit import PLY_RANGE_WIDTH, EvalTarget
from shogi_dnn.dataset.features import EVAL_NONE
from shogi_dnn.training.schedule import KEY_POLICY

Batch = dict[str, tf.Tensor]
Sums = dict[str, tf.Tensor]    # per-replica sums of one step: METRIC_KEYS (and steps.BUSY_KEY)
METRIC_KEYS = ("loss_sum", "correct", "decisive", "count")   # per-tower sums of every train and eval step
RESULTS_KEY = "results"                                      # with no-result masking: positions with a result
POLICY_KEYS = ("policy_loss_sum", "policy_correct", "policy_count")   # with a policy head


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """The per-example loss's settings (the module docstring); the default is the result loss alone."""

    eval_weight: float = 0.0                        # λ: the evaluation target's share (0: results only)
    eval_scale: float = TrainConfig.eval_scale      # a (> 0): the target is sigmoid(eval / a)
    eval_trust: tuple[float, ...] | None = None     # λ's factor per evalfit.PLY_EDGES range (None: λ)
    policy_weight: float = TrainConfig.policy_weight   # the policy cross-entropy's factor (a policy head)
    no_result_weight: float | None = None           # None: every position has a result; else the loss
                                                    # factor of those without one (win NaN, result masked)

    @classmethod
    def for_run(cls, train: TrainConfig, target: EvalTarget, no_result: bool) -> LossSpec:
        """A run's loss: its resolved evaluation target, train.policy_weight, and train.no_result_weight
        when the training split has positions without a result."""
        return cls(target.weight, target.scale, target.trust, train.policy_weight,
                   train.no_result_weight if no_result else None)

    @property
    def masks_results(self) -> bool:
        """Whether positions without a result are masked (their sums then include RESULTS_KEY)."""
        return self.no_result_weight is not None


def example_losses(model: keras.Model, batch: Batch, training: bool,
                   spec: LossSpec = LossSpec()) -> tuple[tf.Tensor, Sums]:
    """Per-example training loss [B] float32 and the metric sums of one (per-replica) batch.

    Args:
        model: the network: {"board", "hands"} -> [B, 1] value logits, or {"value": [B, 1], "policy":
            [B, 2187]} with a policy head.
        batch: board [B, 81] uint8, hands [B, 14] uint8, win [B] float32 (1 win, 0 loss, 0.5 draw, NaN
            none), eval [B] int16 (centipawns, side to move's view, EVAL_NONE = none; a batch without it
            has no evaluations), ply [B] (read with a trust table), policy [B] int32 (a policy head).
        training: the model's training flag (batch-norm statistics).
        spec: the loss's settings.

    Returns:
        The losses [B] float32 and metric_keys(policy, spec.masks_results) -> [] float32 sums, about the
        result target whatever λ (the module docstring says why).
    """
    outputs = model({"board": batch["board"], "hands": batch["hands"]}, training=training)
    value = outputs["value"] if isinstance(outputs, dict) else outputs
    logits = tf.reshape(tf.cast(value, tf.float32), [-1])
    losses, sums = value_losses(logits, batch, spec)
    if isinstance(outputs, dict) and "policy" in outputs:
        policy_losses, policy_sums = policy_metric_sums(outputs["policy"], batch[KEY_POLICY])
        losses = losses + float(spec.policy_weight) * policy_losses
        sums = {**sums, **policy_sums}
    weight = spec.no_result_weight                  # not None: spec.masks_results
    if weight is not None and weight != 1.0:
        has_result = tf.logical_not(tf.math.is_nan(tf.cast(batch["win"], tf.float32)))
        losses = losses * tf.where(has_result, 1.0, float(weight))
    return losses, sums


def value_losses(logits: tf.Tensor, batch: Batch, spec: LossSpec) -> tuple[tf.Tensor, Sums]:
    """The value loss [B] float32 of logits [B] float32 (result, blended with the evaluation target) and
    its metric sums; with spec.masks_results a position without a result trains on its evaluation alone."""
    win = tf.cast(batch["win"], tf.float32)
    has_result = tf.logical_not(tf.math.is_nan(win)) if spec.masks_results else None
    if has_result is not None:   # NaN labels never enter an op: their gradient would be NaN under tf.where
        win = tf.where(has_result, win, 0.5)
    result_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=win, logits=logits)
    if has_result is not None:
        result_losses = tf.where(has_result, result_losses, 0.0)
    losses = result_losses
    if "eval" in batch and (spec.eval_weight > 0 or has_result is not None):
        weight: float | tf.Tensor = (float(spec.eval_weight) if spec.eval_trust is None else
                                     spec.eval_weight * trust_by_ply(batch["ply"], spec.eval_trust))
        if has_result is not None:   # λ where there is a result, 1 (the evaluation alone) elsewhere
            weight = tf.where(has_result, tf.broadcast_to(tf.cast(weight, tf.float32), tf.shape(win)), 1.0)
        losses = blend_eval_losses(logits, result_losses, batch["eval"], weight, spec.eval_scale)
    return losses, metric_sums(logits, win, result_losses, has_result)


def metric_sums(logits: tf.Tensor, win: tf.Tensor, result_losses: tf.Tensor,
                has_result: tf.Tensor | None = None) -> Sums:
    """METRIC_KEYS -> [] float32 from logits [B], labels [B] (no NaN) and the result losses [B] (float32).

    has_result: None, or [B] bool: loss_sum, correct and decisive then count only those positions (their
    result losses are 0 elsewhere), count all, and RESULTS_KEY counts them."""
    decisive = tf.cast(tf.not_equal(win, 0.5), tf.float32)
    counted = None if has_result is None else tf.cast(has_result, tf.float32)
    if counted is not None:
        decisive = counted * decisive
    correct = decisive * tf.cast(tf.equal(logits > 0.0, win > 0.5), tf.float32)
    sums = {"loss_sum": tf.reduce_sum(result_losses), "correct": tf.reduce_sum(correct),
            "decisive": tf.reduce_sum(decisive), "count": tf.cast(tf.size(win), tf.float32)}
    if counted is not None:
        sums[RESULTS_KEY] = tf.reduce_sum(counted)
    return sums


def trust_by_ply(ply: tf.Tensor, trust: Sequence[float]) -> tf.Tensor:
    """[B] float32 trust[range of ply] for ply [B] int (evalfit.ply_range: 20 plies a range, the last
    open)."""
    table = tf.constant(list(trust), tf.float32)
    index = tf.clip_by_value(tf.cast(tf.reshape(ply, [-1]), tf.int32) // PLY_RANGE_WIDTH, 0, len(trust) - 1)
    return tf.gather(table, index)


def blend_eval_losses(logits: tf.Tensor, result_losses: tf.Tensor, evals: tf.Tensor,
                      eval_weight: float | tf.Tensor, eval_scale: float) -> tf.Tensor:
    """[B] (1-λ)·result_losses + λ·BCE(logits, sigmoid(eval / a)) where eval != EVAL_NONE, else
    result_losses.

    eval_weight: λ, a float or a [B] float32 tensor (one λ per example)."""
    evals = tf.reshape(evals, [-1])
    has_eval = tf.not_equal(evals, tf.constant(EVAL_NONE, evals.dtype))
    target = tf.sigmoid(tf.cast(evals, tf.float32) / float(eval_scale))
    eval_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=logits)
    weight = eval_weight if isinstance(eval_weight, tf.Tensor) else float(eval_weight)
    blended = (1.0 - weight) * result_losses + weight * eval_losses
    return tf.where(has_eval, blended, result_losses)


def add_sums(total: Sums | None, sums: Sums) -> Sums:
    """The metric sums of two micro-batches added key by key (total None: the first micro-batch)."""
    return sums if total is None else {k: total[k] + sums[k] for k in sums}


def metric_keys(policy: bool = False, no_result: bool = False) -> tuple[str, ...]:
    """The metric sums a step returns: METRIC_KEYS, then RESULTS_KEY with no-result masking, then
    POLICY_KEYS with a policy head."""
    return METRIC_KEYS + ((RESULTS_KEY,) if no_result else ()) + (POLICY_KEYS if policy else ())


def policy_metric_sums(policy_logits: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """[B] float32 policy cross-entropy (0 where label < 0) and the POLICY_KEYS sums.

    Args:
        policy_logits: [B, 2187] float logits; labels: [B] integer labels (dataset/policy.py, -1: no move).
    """
    logits = tf.cast(policy_logits, tf.float32)
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    has = labels >= 0
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(labels, 0), logits=logits)
    losses = tf.where(has, losses, 0.0)
    counted = tf.cast(has, tf.float32)
    hits = counted * tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
    return losses, {"policy_loss_sum": tf.reduce_sum(losses), "policy_correct": tf.reduce_sum(hits),
                    "policy_count": tf.reduce_sum(counted)}
