"""Per-tower training and validation metrics: RUN/metrics.jsonl, TensorBoard (RUN/tb), one console line.

metrics.jsonl has one JSON object a line:
  kind             "train" | "validation"
  step, samples    optimizer steps and training positions seen when the line was written
  epoch, stage, group   where in the staged schedule (the stage just trained for "validation")
  loss             mean binary cross-entropy over every position of every tower (draws included; over
                   the positions with a game result when the training split has some without one)
  accuracy         over decisive positions only (label 0 or 1); null when there were none
  positions_per_s  all towers together (train: the interval's wall time; validation: the pass's)
  lr               learning rate of the next update (train only)
  policy_loss      only with a policy head: mean policy cross-entropy over the positions with a move
                   played (losses.py: the move's label); policy_acc: the share of them whose argmax over
                   all 2187 labels is that move (no legal-move mask: evaluate's top-1 has one)
  per_gpu          one {"device", "loss", "accuracy", "positions"[, "policy_loss", "policy_acc"]
                   [, "positions_per_s"][, "busy_s", "compute_positions_per_s"]} per tower.
                   positions_per_s: the tower's positions over the
                   interval's wall time (the same for every tower: they wait for each other at the
                   all-reduce);
                   busy_s (train only): the tower's own compute seconds, batch in hand to local gradients
                   done, before the all-reduce; compute_positions_per_s = positions / busy_s, which is
                   lower on a slower GPU (report flags it)
TensorBoard: loss, accuracy, positions_per_s, lr and gpuN/loss, gpuN/accuracy, gpuN/positions_per_s for
training (policy_loss, policy_acc and gpuN/policy_loss, gpuN/policy_acc with a policy head);
validation/loss, validation/accuracy, validation/gpuN/... for validation. Every scalar is written
at TensorBoard step = samples (training positions seen), the x axis of report's PNGs, so TensorBoard's
"Step" axis reads in positions; progress/optimizer_step (train) gives the optimizer steps at each point
(plot it, or read metrics.jsonl's step, to see updates instead of positions).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from shogi_dnn.errors import disk_full, is_disk_full
from shogi_dnn.folders import run_files
from shogi_dnn.training.devices import local_values
from shogi_dnn.training.losses import METRIC_KEYS, POLICY_KEYS, RESULTS_KEY
from shogi_dnn.training.stages import TrainState
from shogi_dnn.training.steps import BUSY_KEY
from shogi_dnn.wording import format_duration

log = logging.getLogger(__name__)
TB_OPTIMIZER_STEP = "progress/optimizer_step"      # optimizer steps at each point (the x axis is samples)
POLICY_FIELDS = ("policy_loss", "policy_acc")     # records of a model with a policy head
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


@dataclasses.dataclass(frozen=True)
class TowerSums:
    """Metric sums per tower: arrays [towers] float64 keyed as losses.METRIC_KEYS (and the other keys
    the steps return: RESULTS_KEY, POLICY_KEYS, BUSY_KEY)."""

    sums: dict[str, np.ndarray]

    @classmethod
    def collect(cls, strategy: tf.distribute.Strategy, outputs: Sequence[dict[str, Any]]) -> TowerSums:
        """Add up step outputs (per-replica dicts of sums) per tower; waits for those steps."""
        towers = strategy.num_replicas_in_sync
        keys = tuple(outputs[0]) if outputs else METRIC_KEYS     # train steps may add busy_s
        sums = {key: np.zeros(towers) for key in keys}
        for out in outputs:
            for key in keys:
                sums[key] += local_values(strategy, out[key])
        return cls(sums)

    @property
    def count(self) -> float:
        return float(self.sums["count"].sum())


def _ratio(num: float, den: float) -> float | None:
    return float(num / den) if den > 0 else None


def summarise(kind: str, state: TrainState, sums: TowerSums, devices: Sequence[str],
              seconds: float | None = None, lr: float | None = None) -> dict[str, Any]:
    """The metrics.jsonl record of one interval (train) or one validation pass."""
    s = sums.sums
    per_gpu = []
    results = s.get(RESULTS_KEY, s["count"])     # the loss is over the positions with a game result
    for i, device in enumerate(devices):
        entry = {"device": device, "loss": _ratio(s["loss_sum"][i], results[i]),
                 "accuracy": _ratio(s["correct"][i], s["decisive"][i]), "positions": int(s["count"][i])}
        if POLICY_KEYS[0] in s:
            entry.update(_policy_fields(s, i))
        if seconds:
            entry["positions_per_s"] = float(s["count"][i] / seconds)
        if BUSY_KEY in s:             # the tower's own compute time: a slow GPU shows here, not above
            entry["busy_s"] = float(s[BUSY_KEY][i])
            entry["compute_positions_per_s"] = _ratio(s["count"][i], s[BUSY_KEY][i])
        per_gpu.append(entry)
    record: dict[str, Any] = {"kind": kind, "step": state.step, "samples": state.samples,
                              "epoch": state.epoch, "stage": state.stage, "group": state.group,
                              "loss": _ratio(s["loss_sum"].sum(), results.sum()),
                              "accuracy": _ratio(s["correct"].sum(), s["decisive"].sum())}
    if POLICY_KEYS[0] in s:
        record.update(_policy_fields(s, slice(None)))
    if seconds:
        record["positions_per_s"] = float(s["count"].sum() / seconds)
    if lr is not None:
        record["lr"] = lr
    record["per_gpu"] = per_gpu
    return record


def _policy_fields(s: dict[str, np.ndarray], towers: int | slice) -> dict[str, float | None]:
    """policy_loss and policy_acc of one tower (an index) or of all (slice(None)) from the POLICY_KEYS
    sums."""
    loss, correct, count = (float(np.sum(s[key][towers])) for key in POLICY_KEYS)
    return {"policy_loss": _ratio(loss, count), "policy_acc": _ratio(correct, count)}


def eta_fields(remaining_updates: tuple[int, int, int], update_batch: int, positions_per_s: float | None,
               elapsed_s: float, price_per_hour: float = 0.0) -> dict[str, float]:
    """Expected seconds to the end of the stage, the epoch and the run at the measured rate, and, with a
    price, the cost so far (this process: since the start or the resume) and at the end.

    Args:
        remaining_updates: optimizer updates left in the stage, the epoch and the run.
        update_batch: positions per update; positions_per_s: the rate of the last log interval.
    Returns:
        {eta_stage_s, eta_epoch_s, eta_run_s[, cost_so_far, cost_at_end]} ({} without a rate).
    """
    if not positions_per_s:
        return {}
    stage, epoch, run = (updates * update_batch / positions_per_s for updates in remaining_updates)
    fields = {"eta_stage_s": stage, "eta_epoch_s": epoch, "eta_run_s": run}
    if price_per_hour > 0:
        fields["cost_so_far"] = price_per_hour * elapsed_s / 3600
        fields["cost_at_end"] = price_per_hour * (elapsed_s + run) / 3600
    return fields


def _short(value: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def position_label(epoch: int, stage: int, group: int) -> str:
    """`ep=0 stage=1 group=2`: the run's position as every output names it (console line, progress bar;
    metrics.jsonl, TensorBoard and report.md use the same 0-based epoch, stage and group)."""
    return f"ep={epoch} stage={stage} group={group}"


def console_line(record: dict[str, Any]) -> str:
    """`train step=120 samples=7.7k ep=0 stage=1 group=2 loss=0.6931 acc=0.512 pos/s=12.3k lr=0.01 |
    gpu loss 0.69 0.70 acc 0.51 0.52`: one compact line (`cpu loss` on CPU towers, `tower loss` if mixed)."""
    head = (f"{record['kind']} step={record['step']} samples={_short(record['samples'])} "
            f"{position_label(record['epoch'], record['stage'], record['group'])} "
            f"loss={_fmt(record['loss'])} "
            f"acc={_fmt(record['accuracy'], 3)}")
    if "policy_loss" in record:
        head += f" ploss={_fmt(record['policy_loss'])} pacc={_fmt(record['policy_acc'], 3)}"
    if "positions_per_s" in record:
        head += f" pos/s={_short(record['positions_per_s'])}"
    if "lr" in record:
        head += f" lr={record['lr']:.4g}"
    if "eta_run_s" in record:
        head += (f" eta stage {format_duration(record['eta_stage_s'])} "
                 f"epoch {format_duration(record['eta_epoch_s'])} run {format_duration(record['eta_run_s'])}")
    if "cost_at_end" in record:
        head += f" cost {record['cost_so_far']:.2f} -> {record['cost_at_end']:.2f}"
    gpus = record["per_gpu"]
    if len(gpus) > 1:
        head += (f" | {_tower_kind(gpus)} loss " + " ".join(_fmt(g["loss"], 3) for g in gpus)
                 + " acc " + " ".join(_fmt(g["accuracy"], 3) for g in gpus))
        if "policy_loss" in gpus[0]:
            head += " pacc " + " ".join(_fmt(g.get("policy_acc"), 3) for g in gpus)
    return head


def _tower_kind(towers: list[dict[str, Any]]) -> str:
    """'gpu' or 'cpu' when every tower's device is of that kind (`.../device:CPU:0`, `GPU:1`); else 'tower'.
    """
    kinds = {str(t["device"]).rsplit("device:", 1)[-1].split("/")[-1].split(":")[0].lower() for t in towers}
    return kinds.pop() if len(kinds) == 1 and kinds <= {"gpu", "cpu"} else "tower"


class MetricsLog:
    """Appends metrics.jsonl, writes TensorBoard scalars, logs the console line.

    With write_files=False (a non-chief worker of a cluster: the chief alone writes the run's metrics) it
    only logs the console line; the per-tower sums are still gathered by every worker (a collective)."""

    def __init__(self, run_dir: Path, write_files: bool = True) -> None:
        self.path = Path(run_dir) / run_files.METRICS_JSONL
        self.tb_dir = Path(run_dir) / run_files.TB_DIR
        self.write_files = write_files
        self.writer = tf.summary.create_file_writer(str(self.tb_dir)) if write_files else None

    def write(self, record: dict[str, Any]) -> None:
        if self.write_files:
            self._append(json.dumps(record) + "\n")
            self._tensorboard(record)
        log.info(console_line(record))

    def _tensorboard(self, record: dict[str, Any]) -> None:
        prefix = "" if record["kind"] == "train" else record["kind"] + "/"
        scalars = {f"{prefix}{key}": record.get(key)
                   for key in ("loss", "accuracy", "positions_per_s", "lr", *POLICY_FIELDS)}
        if record["kind"] == "train":
            scalars[TB_OPTIMIZER_STEP] = record["step"]
        for i, gpu in enumerate(record["per_gpu"]):
            for key in ("loss", "accuracy", "positions_per_s", *POLICY_FIELDS):
                scalars[f"{prefix}gpu{i}/{key}"] = gpu.get(key)
        assert self.writer is not None             # write_files: the writer exists
        try:
            with self.writer.as_default(step=record["samples"]):      # the x axis: samples, as the PNGs
                for name, value in scalars.items():
                    if value is not None:
                        # tf.summary.write with the scalars plugin's metadata is what tf.summary.scalar
                        # writes, without needing the tensorboard package at training time.
                        tf.summary.write(name, tf.constant(value, tf.float32), metadata=_SCALAR_METADATA)
            self.writer.flush()
        except (tf.errors.OpError, OSError) as exc:   # the event files are rebuilt from metrics.jsonl
                                                      # on resume
            if is_disk_full(exc):
                raise disk_full(self.tb_dir, 4096) from None
            raise

    def _append(self, line: str) -> None:
        """Append one line; on a full disk the file is cut back to its last whole line (a torn line is
        never left) and the error is one line naming the file."""
        size = self.path.stat().st_size if self.path.exists() else 0
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.truncate(self.path, size)
            if is_disk_full(exc):
                raise disk_full(self.path, len(line.encode("utf-8"))) from None
            raise

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines written after the checkpoint's step (they will be written again), and
        rebuild TensorBoard from the lines kept (event files cannot be truncated: the steps run again
        would otherwise show twice)."""
        if not self.write_files or not self.path.is_file():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if (line_step := _step_of(line)) is not None and line_step <= step]
        if len(kept) == len(lines):
            return
        run_files.write_atomic(self.path, "".join(line + "\n" for line in kept))
        assert self.writer is not None             # write_files: the writer exists
        self.writer.close()
        shutil.rmtree(self.tb_dir, ignore_errors=True)
        self.writer = tf.summary.create_file_writer(str(self.tb_dir))
        for line in kept:
            self._tensorboard(json.loads(line))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _step_of(line: str) -> int | None:
    """The step of a metrics.jsonl line; None for a blank or torn line (a write cut by a kill)."""
    try:
        return int(json.loads(line)["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
