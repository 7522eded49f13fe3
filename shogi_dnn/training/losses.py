"""The per-example training loss and the metric sums every train and eval step returns.

Engine evaluations as targets (train.eval_weight λ, train.eval_scale a; example_losses): the gradient
is taken of the per-example loss
  (1-λ)·BCE(logit, win) + λ·BCE(logit, sigmoid(eval / a))   where the position has an evaluation,
  BCE(logit, win)                                           where it has none (features.EVAL_NONE),
with λ replaced by λ·trust[ply range] when a trust table is given (train.eval_weighting = "trust", per
evalfit.PLY_EDGES range), and λ = 0 builds exactly the result-only graph (bit-identical losses,
gradients and metrics). The metric sums below stay about the *result*: loss_sum is the result BCE
whatever λ, so the logged loss means what evaluate reports, and runs with different λ (or none) compare
on one scale; the blended loss is what the optimizer minimises, never logged (it would need its own
METRIC_KEYS entry in run_log and report, and mixes two targets into one number).

Metric sums (per tower, per update; a new training-time metric is a sum here and a field of run_log):
  loss_sum  float32  sum of per-example binary cross-entropy against the result (draws included)
  correct   float32  decisive positions (label 0 or 1) whose sign of the logit matches the label
  decisive  float32  positions with label 0 or 1 (draws, label 0.5, are excluded from accuracy)
  count     float32  positions seen
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from shogi_dnn.config import TrainConfig
from shogi_dnn.dataset.evalfit import PLY_RANGE_WIDTH
from shogi_dnn.dataset.features import EVAL_NONE

Batch = dict[str, tf.Tensor]
METRIC_KEYS = ("loss_sum", "correct", "decisive", "count")   # per-tower sums of every train and eval step


def example_losses(model: keras.Model, batch: Batch, training: bool, *, eval_weight: float = 0.0,
                   eval_scale: float = TrainConfig.eval_scale, eval_trust: Sequence[float] | None = None,
                   ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Per-example training loss [B] float32 and the metric sums of one (per-replica) batch.

    Args:
        model: the value network: {"board", "hands"} -> [B, 1] logit.
        batch: board [B, 81] uint8, hands [B, 14] uint8, win [B] float32 (1 win, 0 loss, 0.5 draw), and
            eval [B] int16 (centipawns, side to move's view, EVAL_NONE = none; read only when
            eval_weight > 0, a batch without it counts as having no evaluations).
        training: the model's training flag (batch-norm statistics).
        eval_weight, eval_scale: λ and a of the module docstring (a Python float: λ = 0 adds no op at all).
        eval_trust: None (λ everywhere) or [R] floats, λ's factor per evalfit.PLY_EDGES range (reads
            batch["ply"]).

    Returns:
        The losses [B] float32 and the metric sums (METRIC_KEYS, [] float32), about the result target
        whatever λ (the module docstring says why).
    """
    logits = tf.cast(model({"board": batch["board"], "hands": batch["hands"]}, training=training), tf.float32)
    logits = tf.reshape(logits, [-1])
    win = tf.cast(batch["win"], tf.float32)
    result_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=win, logits=logits)
    losses = result_losses
    if eval_weight > 0 and "eval" in batch:
        weight = (float(eval_weight) if eval_trust is None else
                  eval_weight * trust_by_ply(batch["ply"], eval_trust))
        losses = blend_eval_losses(logits, result_losses, batch["eval"], weight, eval_scale)
    return losses, metric_sums(logits, win, result_losses)


def metric_sums(logits: tf.Tensor, win: tf.Tensor, result_losses: tf.Tensor) -> dict[str, tf.Tensor]:
    """METRIC_KEYS -> [] float32 from logits [B], labels [B] and the result losses [B] (float32 each)."""
    decisive = tf.cast(tf.not_equal(win, 0.5), tf.float32)
    correct = decisive * tf.cast(tf.equal(logits > 0.0, win > 0.5), tf.float32)
    return {"loss_sum": tf.reduce_sum(result_losses), "correct": tf.reduce_sum(correct),
            "decisive": tf.reduce_sum(decisive), "count": tf.cast(tf.size(win), tf.float32)}


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


def add_sums(total: dict[str, tf.Tensor] | None, sums: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The metric sums of two micro-batches added key by key (total None: the first micro-batch)."""
    return sums if total is None else {k: total[k] + sums[k] for k in METRIC_KEYS}
