"""`shogi-dnn plan`: how long one epoch of a dataset and the configured run take on 1, 2, 4, 8 devices,
and what they cost, before renting (numpy only, no TensorFlow).

Per device count N (throughput.py's model, time per step = B / v0 + t):
  B         global batch of a micro-batch: config.global_batch(config, N) (per-GPU batch b = B / N)
  update    micro_batches x B positions; one update takes micro_batches x (B / v0 + t) seconds (the
            fixed cost counted once per micro-batch: an upper bound, the all-reduce happens once)
  stage     one sample group (data.num_groups groups of the training split, cut as training cuts them):
            floor(group positions / update) updates (capped by train.max_steps_per_stage)
  epoch     every stage once; run = train.epochs epochs (validation time not included)
  rate      B / (B / v0 + t) positions/s from the GPUs; with a pipeline rate (bench train's pipeline figure,
            scaled by target cores / this machine's cores) the rate used is the smaller of the two
  cost      hours x price of the N-device machine per hour (a bare price is per device-hour: N x P)
  speed-up  epoch time on one device (same config) / epoch time on N; efficiency = speed-up / N
  lr        config.scaled_lr for the update batch (what the trainer would use)
Flags: "batch<90%" where b is below the per-GPU batch reaching 90% of v0 (9 v0 t / N); "input-bound"
where the pipeline is slower than the GPUs. A device count without its own fit uses the nearest measured
one scaled (v0 x N / M, the same t; marked "~M" in the table): a rough guess, measure it if you can.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shogi_dnn import config as config_lib
from shogi_dnn.config import Config
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import gpus as gpus_lib
from shogi_dnn.training import memory, schedule, throughput
from shogi_dnn.training.throughput import ThroughputFit
from shogi_dnn.wording import duration_unit, format_duration

DEFAULT_DEVICES = (1, 2, 4, 8)
FLAG_BATCH = "batch<90%"
FLAG_INPUT = "input-bound"


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """The input pipeline's rate: measured positions/s on this machine, scaled to the target's cores."""

    rate: float
    target_cores: int = 0
    this_cores: int = 0

    @property
    def target_rate(self) -> float:
        if self.target_cores and self.this_cores:
            return self.rate * self.target_cores / self.this_cores
        return self.rate


@dataclasses.dataclass(frozen=True)
class Row:
    """The plan for one device count (times in seconds, costs in the price's currency, None without price)."""

    devices: int
    fit_devices: int                # the device count the fit was measured on (scaled when != devices)
    v0: float
    t: float
    global_batch: int
    per_gpu_batch: int
    per_gpu_b90: float
    fraction_v0: float
    update_batch: int
    gpu_rate: float                 # positions/s the GPUs give
    pipeline_rate: float | None     # positions/s the input pipeline gives on the target
    rate: float                     # positions/s used for the times (the smaller of the two)
    updates_per_epoch: int
    stage_seconds: float            # mean over the stages of an epoch
    epoch_seconds: float
    run_seconds: float
    price_per_hour: float | None
    epoch_cost: float | None
    run_cost: float | None
    speedup: float
    efficiency: float
    lr: float
    flags: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["flags"] = list(self.flags)
        return data


@dataclasses.dataclass(frozen=True)
class Plan:
    """The table and what it was computed from."""

    data_dir: str
    train_positions: int
    group_positions: tuple[int, ...]
    epochs: int
    micro_batches: int
    rows: tuple[Row, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"data_dir": self.data_dir, "train_positions": self.train_positions,
                "group_positions": list(self.group_positions), "epochs": self.epochs,
                "micro_batches": self.micro_batches, "rows": [r.to_dict() for r in self.rows]}


# What to change when a sample group cannot fill one update (as train's start-up check says it).
_SMALL_FIX = ("lower data.num_groups, train.global_batch or train.micro_batches (--set), or plan fewer "
              "devices, or convert more games")

def fit_for(fits: Mapping[int, ThroughputFit], devices: int) -> ThroughputFit:
    """The fit of `devices`, else the nearest measured count M scaled: v0 x devices / M, the same t."""
    nearest = throughput.select_fit(fits, devices)
    if nearest.devices == devices:
        return nearest
    return ThroughputFit(devices=devices, v0=nearest.v0 * devices / nearest.devices, t=nearest.t)


def parse_prices(specs: Sequence[str]) -> tuple[float | None, dict[int, float]]:
    """--price-per-hour values: a bare P (per device-hour) and/or N=P (the N-device machine per hour).

    Raises:
        ConfigError: a malformed or negative price.
    """
    per_device, per_count = None, {}
    for spec in specs:
        for item in str(spec).split(","):
            key, sep, value = item.partition("=")
            try:
                if sep:
                    count, price = int(key), float(value)
                    if count < 1:
                        raise ValueError
                else:
                    count, price = 0, float(key)
            except ValueError as exc:
                raise ConfigError(f"--price-per-hour {spec!r}: expected P (per device-hour) or "
                                  f"N=P (the N-device machine per hour), e.g. 8=7.2") from exc
            if not (math.isfinite(price) and price >= 0):
                raise ConfigError(f"--price-per-hour {spec!r}: a price must be a non-negative number")
            if sep:
                per_count[count] = price
            else:
                per_device = price
    return per_device, per_count


def machine_price(devices: int, per_device: float | None, per_count: Mapping[int, float]) -> float | None:
    """Price per hour of an N-device machine: its own price if given, else N x the per-device price."""
    if devices in per_count:
        return per_count[devices]
    return None if per_device is None else devices * per_device


def group_positions(manifest: shards.Manifest, cfg: Config) -> tuple[int, ...]:
    """Training positions of each sample group (the stages of an epoch), as training cuts the split."""
    train = manifest.split("train")
    if not train:
        raise ConfigError(f"{manifest.root}: the dataset has no training shards")
    return tuple(group.positions for group in schedule.split_groups(train, cfg.data.num_groups))


def _epoch(cfg: Config, groups: Sequence[int], fit: ThroughputFit, devices: int,
           pipeline: Pipeline | None) -> dict[str, Any]:
    global_batch = config_lib.global_batch(cfg, devices)
    micro = cfg.train.micro_batches
    update_batch = global_batch * micro
    gpu_rate = float(fit.throughput(global_batch))
    pipe_rate = pipeline.target_rate if pipeline else None
    rate = min(gpu_rate, pipe_rate) if pipe_rate else gpu_rate
    update_seconds = update_batch / rate
    updates = []
    for positions in groups:
        if positions < update_batch:
            raise ConfigError(f"{devices} device(s): a sample group has {positions} positions, fewer than "
                              f"one update ({update_batch} = global batch x micro-batches): {_SMALL_FIX}")
        n = positions // update_batch
        updates.append(min(n, cfg.train.max_steps_per_stage) if cfg.train.max_steps_per_stage > 0 else n)
    epoch_seconds = sum(updates) * update_seconds
    return {"global_batch": global_batch, "update_batch": update_batch, "gpu_rate": gpu_rate,
            "pipeline_rate": pipe_rate, "rate": rate, "updates": sum(updates),
            "stage_seconds": epoch_seconds / len(groups), "epoch_seconds": epoch_seconds}


def make_plan(manifest: shards.Manifest, cfg: Config, fits: Mapping[int, ThroughputFit],
              devices: Sequence[int] = DEFAULT_DEVICES, price_per_device_hour: float | None = None,
              machine_prices: Mapping[int, float] | None = None, pipeline: Pipeline | None = None) -> Plan:
    """The plan table: one Row per device count (see the module docstring).

    Raises:
        ConfigError: no fits, a device count < 1, a global batch not divisible by the devices, or a
            sample group smaller than one update.
    """
    if not fits:
        raise ConfigError("plan needs a throughput fit (--scaling-fit FILE or --fit devices=N,v0=..,t=..)")
    if not devices or min(devices) < 1:
        raise ConfigError(f"device counts must be >= 1, got {list(devices)}")
    groups = group_positions(manifest, cfg)
    machine_prices = dict(machine_prices or {})
    single = _epoch(cfg, groups, fit_for(fits, 1), 1, pipeline)
    rows = []
    for n in sorted(set(devices)):
        fit = fit_for(fits, n)
        measured = throughput.select_fit(fits, n).devices
        e = _epoch(cfg, groups, fit, n, pipeline)
        run_seconds = e["epoch_seconds"] * cfg.train.epochs
        price = machine_price(n, price_per_device_hour, machine_prices)
        per_gpu = e["global_batch"] // n
        flags = []
        if per_gpu < fit.per_replica_b90 - 1e-9:
            flags.append(FLAG_BATCH)
        if e["pipeline_rate"] is not None and e["pipeline_rate"] < e["gpu_rate"]:
            flags.append(FLAG_INPUT)
        speedup = single["epoch_seconds"] / e["epoch_seconds"]
        rows.append(Row(
            devices=n, fit_devices=measured, v0=fit.v0, t=fit.t, global_batch=e["global_batch"],
            per_gpu_batch=per_gpu, per_gpu_b90=fit.per_replica_b90,
            fraction_v0=fit.fraction(e["global_batch"]),
            update_batch=e["update_batch"], gpu_rate=e["gpu_rate"], pipeline_rate=e["pipeline_rate"],
            rate=e["rate"], updates_per_epoch=e["updates"], stage_seconds=e["stage_seconds"],
            epoch_seconds=e["epoch_seconds"], run_seconds=run_seconds, price_per_hour=price,
            epoch_cost=None if price is None else price * e["epoch_seconds"] / 3600,
            run_cost=None if price is None else price * run_seconds / 3600,
            speedup=speedup, efficiency=speedup / n, lr=config_lib.scaled_lr(cfg.optim, e["update_batch"]),
            flags=tuple(flags)))
    return Plan(str(manifest.root), sum(groups), groups, cfg.train.epochs, cfg.train.micro_batches,
                tuple(rows))


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def format_plan(plan: Plan) -> str:
    """The table as text, one line per device count, with a header naming the inputs."""
    head = (f"{plan.train_positions:,} training positions in {len(plan.group_positions)} stages per epoch, "
            f"{plan.epochs} epoch(s), {plan.micro_batches} micro-batch(es) per update ({plan.data_dir})")
    cols = ["GPUs", "fit", "b/GPU", "b90/GPU", "%v0", "pos/s", "stage", "epoch", "run", "cost/epoch",
            "cost/run", "speed-up", "eff.", "lr", "flags"]
    lines = [head, ""]
    table = [cols]
    for r in plan.rows:
        fit = str(r.fit_devices) if r.fit_devices == r.devices else f"~{r.fit_devices}"
        table.append([str(r.devices), fit, str(r.per_gpu_batch), f"{math.ceil(r.per_gpu_b90 - 1e-9)}",
                      f"{100 * r.fraction_v0:.0f}", f"{r.rate:,.0f}", format_duration(r.stage_seconds),
                      format_duration(r.epoch_seconds), format_duration(r.run_seconds), _money(r.epoch_cost),
                      _money(r.run_cost), f"{r.speedup:.2f}x", f"{100 * r.efficiency:.0f}%", f"{r.lr:.4g}",
                      " ".join(r.flags)])
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        lines.append("  ".join(cell.rjust(w) if i < len(cols) - 1 else cell
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
    notes = []
    if any(FLAG_BATCH in r.flags for r in plan.rows):
        notes.append(f"{FLAG_BATCH}: the per-GPU batch is below the one reaching 90% of v0 (b90/GPU): "
                     "GPUs wait")
    if any(FLAG_INPUT in r.flags for r in plan.rows):
        notes.append(f"{FLAG_INPUT}: the input pipeline is slower than the GPUs; pos/s is the pipeline's")
    if any(r.fit_devices != r.devices for r in plan.rows):
        notes.append("~M: no fit for this device count; the fit of M devices scaled (v0 x N / M, same t)")
    notes.append("not counted: start-up (TensorFlow, the shards' checks, building and compiling the step: "
                 "tens of seconds), the validation passes and checkpoints; on a small dataset they are most "
                 "of a run")
    return "\n".join(lines + [""] + notes)


def plot_plan(plan: Plan, path: str | Path) -> Path:
    """PNG of plan_figure, written atomically."""
    from shogi_dnn import plotting

    return plotting.save_png(plan_figure(plan), path)


def plan_figure(plan: Plan):
    """Time per epoch (in minutes, hours or days: wording.duration_unit of the longest) and, if priced,
    cost per run against the device count; each point labelled with its time as the table says it."""
    from shogi_dnn import plotting

    fig = plotting.new_figure((7, 4), tight_layout=True)
    ax = fig.add_subplot()
    devices = [r.devices for r in plan.rows]
    unit, seconds = duration_unit(max(r.epoch_seconds for r in plan.rows))
    times = [r.epoch_seconds / seconds for r in plan.rows]
    ax.plot(devices, times, "o-", color="tab:blue", label=f"{unit} per epoch")
    for n, y, row in zip(devices, times, plan.rows, strict=True):
        last = n == devices[-1]            # its label left of the point: inside the frame
        ax.annotate(format_duration(row.epoch_seconds), (n, y), xytext=(-4 if last else 4, 4),
                    ha="right" if last else "left", textcoords="offset points", fontsize=8, color="tab:blue")
    ax.set_xlabel("devices")
    ax.set_ylabel(f"{unit} per epoch", color="tab:blue")
    ax.set_xticks(devices)
    ax.margins(x=0.1)
    costs = [r.run_cost for r in plan.rows if r.run_cost is not None]
    if len(costs) == len(plan.rows):
        cost = ax.twinx()
        cost.plot(devices, costs, "s--", color="tab:red", label="cost per run")
        cost.set_ylabel(f"cost per run ({plan.epochs} epoch(s))", color="tab:red")
        cost.set_ylim(bottom=0, top=1.15 * max(costs) or 1)
    ax.set_ylim(bottom=0, top=max(1.15 * max(times), 1e-9))
    ax.set_title(f"time per epoch of {plan.train_positions:,} positions "
                 f"({plan.epochs} epoch(s) per run)")
    return fig


@dataclasses.dataclass(frozen=True)
class Estimate:
    """`plan --gpu`: a run's time and cost on N named GPUs from published peaks (gpus.py's rule), each
    an interval (low, high); costs None without a price."""

    gpu: gpus_lib.Gpu
    devices: int
    flops_per_position: int
    peak_flops: float
    gpu_rate: tuple[float, float]
    pipeline_rate: float | None
    rate: tuple[float, float]
    train_positions: int
    updates_per_epoch: int
    update_batch: int
    epochs: int
    epoch_seconds: tuple[float, float]
    run_seconds: tuple[float, float]
    price_per_hour: float | None
    run_cost: tuple[float, float] | None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["gpu"] = dataclasses.asdict(self.gpu)
        return data


def estimate_plan(manifest: shards.Manifest, cfg: Config, gpu: gpus_lib.Gpu, devices: int = 1,
                  price_per_hour: float | None = None, cpus: int = 0) -> Estimate:
    """Time and cost of the configured run on `devices` GPUs `gpu` before any measurement (gpus.py's
    rule; `cpus` > 0 adds the input pipeline's ceiling).

    Raises:
        ConfigError: a device count < 1, a global batch not divisible by the devices, or a sample group
            smaller than one update.
    """
    if devices < 1:
        raise ConfigError(f"--gpus {devices}: must be >= 1")
    groups = group_positions(manifest, cfg)
    update_batch = config_lib.global_batch(cfg, devices) * cfg.train.micro_batches
    updates = 0
    for positions in groups:
        if positions < update_batch:
            raise ConfigError(f"{devices} GPU(s): a sample group has {positions} positions, fewer than one "
                              f"update ({update_batch} = global batch x micro-batches): {_SMALL_FIX}")
        n = positions // update_batch
        updates += min(n, cfg.train.max_steps_per_stage) if cfg.train.max_steps_per_stage > 0 else n
    flops = memory.training_flops(cfg.model)
    low, high = gpus_lib.gpu_rate(gpu, flops, cfg.model.mixed_precision, devices)
    pipeline = cpus * gpus_lib.PIPELINE_PER_CORE if cpus > 0 else None
    rate = (min(low, pipeline), min(high, pipeline)) if pipeline else (low, high)
    positions = updates * update_batch
    epoch = (positions / rate[1], positions / rate[0])
    run = (epoch[0] * cfg.train.epochs, epoch[1] * cfg.train.epochs)
    cost = (None if price_per_hour is None else
            (price_per_hour * run[0] / 3600, price_per_hour * run[1] / 3600))
    return Estimate(gpu, devices, flops, gpu.peak_flops(cfg.model.mixed_precision), (low, high), pipeline,
                    rate, sum(groups), updates, update_batch, cfg.train.epochs, epoch, run, price_per_hour,
                    cost)


def format_estimate(e: Estimate) -> str:
    """The estimate as a few lines: inputs, rate, epoch, run and cost intervals, and the rule's caveat."""
    precision = "float32 (TF32)" if e.peak_flops == 1e12 * e.gpu.float32_tflops else "mixed precision"
    pipeline = (f"; input pipeline at most {e.pipeline_rate:,.0f}" if e.pipeline_rate else
                "; input pipeline not bounded: give --cpus")
    cost = ("" if e.run_cost is None else
            f", cost: {_money(e.run_cost[0])} - {_money(e.run_cost[1])} at {_money(e.price_per_hour)}/hour")
    lines = [(f"{e.devices} x {e.gpu.name} ({e.peak_flops / 1e12:,.1f} TFLOP/s peak, {precision}; "
              f"{e.gpu.source}), {e.flops_per_position / 1e9:,.3f} GFLOP per training position"),
             (f"{e.train_positions:,} training positions, {e.updates_per_epoch:,} updates of "
              f"{e.update_batch:,} per epoch, {e.epochs} epoch(s)"),
             (f"positions/s: {e.rate[0]:,.0f} - {e.rate[1]:,.0f} (GPUs at {100 * gpus_lib.MFU_LOW:.0f}-"
              f"{100 * gpus_lib.MFU_HIGH:.0f}% of peak: {e.gpu_rate[0]:,.0f} - {e.gpu_rate[1]:,.0f}"
              f"{pipeline})"),
             (f"epoch: {format_duration(e.epoch_seconds[0])} - {format_duration(e.epoch_seconds[1])}, "
              f"run: {format_duration(e.run_seconds[0])} - {format_duration(e.run_seconds[1])}{cost}"),
             "",
             ("An estimate from published peaks (the interval is the utilisation's, not a measurement's): "
              "measure with `shogi-dnn bench scaling` on the rented machine and re-plan with --scaling-fit.")]
    return "\n".join(lines)
