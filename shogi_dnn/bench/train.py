"""`shogi-dnn bench train`: positions/s of the input pipeline, of our tower step and of Keras' model.fit.

    shogi-dnn bench train [--data DIR] [--config train/cpu-smoke.toml] [--set KEY=VALUE ...]
                          [--steps N] [--warmup N] [--devices 1,2,4] [--global-batch B]
                          [--repeats N] [--pipeline-batch B] [--pipeline-positions N]
                          [--synthetic-positions N] [--json FILE]

Measures, at one global batch B for every device count:
  (a) pipeline   the tf.data input pipeline alone (pipeline.make_train_dataset, whole-chunk reads),
                 windows of --pipeline-positions positions at --pipeline-batch (default: B);
  (b) towers     steps.make_train_step fed by strategy.experimental_distribute_dataset, on 1, 2 and 4
                 devices (the first GPUs, else logical CPUs split before TensorFlow initialises), called
                 as step(next(iterator)) from Python ("towers"), and as the trainer calls it,
                 steps.make_iterator_step: next() inside the update's tf.function, as model.fit feeds
                 itself ("towers-iter": the per-replica batch never crosses the Python boundary);
  (c) model.fit  Keras' own fit under the same MirroredStrategy, on the same model, data and batch.
The tower variants honour the config's train.jit_compile (XLA for the forward and backward pass); model.fit
uses no XLA here (Keras' jit_compile="auto" turns it off on CPU-only machines and under tf.distribute).
Each (b)/(c) point: --warmup untimed steps (tracing, allocation), then --repeats rounds of one window of
--steps optimizer steps per method, the order reversed every other round (A B C, C B A, ...) so that a
drifting load hits every method alike; the best window is the figure (the JSON also has every window and
the median). Each window is measured in wall seconds and in the process's CPU seconds (user + system, every
thread: the step's and the input pipeline's): on a shared machine the wall clock counts other processes'
time, CPU seconds count only the work done, so "pos/CPU-s" and its ratio to model.fit are the honest
comparison there, the wall figures the one that matters on a dedicated machine. The system share of that
CPU ("sys %") and the minor page faults per update (getrusage) show memory churn: memory handed back to the
kernel and faulted in again every update (training/allocator.py).
Without --data a synthetic dataset of --synthetic-positions positions is written to a temp folder
(bench.synthetic: random legal-ish encodings, real shard format and compression). Prints a table with
ratios and writes FILE (JSON) with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import logging
import os
import platform
import resource
import tempfile
import time
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn import config
from shogi_dnn.config import Config, load_config
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError, ShardFormatError
from shogi_dnn.folders import run_files
from shogi_dnn.training import schedule

log = logging.getLogger(__name__)

SCHEMA = "shogi-dnn/bench-train/1"
DEFAULT_DEVICES = (1, 2, 4)
SYNTHETIC_SHARD_ROWS = 131072           # 32 chunks of shards.CHUNK_ROWS per synthetic shard
PIPELINE = "pipeline"
TOWERS = "towers"                       # the step called from Python: step(next(iterator))
TOWERS_IN_GRAPH = "towers-iter"         # the trainer's loop: steps.make_iterator_step (next() in the graph)
FIT = "model.fit"


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One method on `devices` devices (0: host only): `positions` positions per timed window in `updates`
    optimizer updates (0: the pipeline alone), and per window its wall seconds, the process's CPU seconds
    (user + system, every thread), its system seconds and its minor page faults (empty: not measured). The
    figures are the best windows (the machine may be shared); the system share and the faults per update
    are those of the best CPU window."""

    method: str
    devices: int
    positions: int
    windows: tuple[float, ...]
    cpu_windows: tuple[float, ...] = ()
    sys_windows: tuple[float, ...] = ()
    fault_windows: tuple[int, ...] = ()
    updates: int = 0

    @property
    def seconds(self) -> float:
        return min(self.windows)

    @property
    def positions_per_s(self) -> float:
        return self.positions / self.seconds

    @property
    def cpu_seconds(self) -> float | None:
        return min(self.cpu_windows) if self.cpu_windows else None

    @property
    def positions_per_cpu_s(self) -> float | None:
        return None if self.cpu_seconds is None else self.positions / self.cpu_seconds

    def _best_cpu_window(self) -> int | None:
        return int(np.argmin(self.cpu_windows)) if self.cpu_windows else None

    @property
    def sys_share(self) -> float | None:
        """System seconds over CPU seconds in the best CPU window."""
        best = self._best_cpu_window()
        if best is None or not self.sys_windows or self.cpu_windows[best] <= 0:
            return None
        return self.sys_windows[best] / self.cpu_windows[best]

    @property
    def faults_per_update(self) -> float | None:
        """Minor page faults per optimizer update in the best CPU window."""
        best = self._best_cpu_window()
        if best is None or not self.fault_windows or self.updates < 1:
            return None
        return self.fault_windows[best] / self.updates

    def to_dict(self) -> dict[str, Any]:
        cpu = ({"cpu_seconds": self.cpu_seconds, "positions_per_cpu_s": self.positions_per_cpu_s,
                "median_positions_per_cpu_s": self.positions / float(np.median(self.cpu_windows))}
               if self.cpu_windows else {})
        kernel = {key: value for key, value in (("sys_share", self.sys_share),
                                                ("faults_per_update", self.faults_per_update))
                  if value is not None}
        return {**dataclasses.asdict(self), "seconds": self.seconds, "positions_per_s": self.positions_per_s,
                "median_positions_per_s": self.positions / float(np.median(self.windows)), **cpu, **kernel}


@dataclasses.dataclass(frozen=True)
class Usage:
    """The process's clocks at one moment: wall, user and system seconds (every thread) and minor page
    faults (getrusage)."""

    wall: float
    user: float
    sys: float
    faults: int

    @classmethod
    def now(cls) -> Usage:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(time.perf_counter(), usage.ru_utime, usage.ru_stime, usage.ru_minflt)

    def since(self, start: Usage) -> Window:
        """The window from `start` to this moment."""
        return Window(self.wall - start.wall, (self.user + self.sys) - (start.user + start.sys),
                      self.sys - start.sys, self.faults - start.faults)


class Window(typing.NamedTuple):
    """One timed window: wall seconds, CPU seconds (user + system), system seconds, minor page faults."""

    wall: float
    cpu: float
    sys: float = 0.0
    faults: int = 0


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(item) for item in text.split(",") if item.strip()}))
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: expected comma-separated integers, e.g. 1,2,4") from exc
    if not values or values[0] < 1:
        raise ConfigError(f"{flag} {text!r}: expected positive integers")
    return values


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn bench train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="dataset folder written by convert (default: synthetic shards)")
    parser.add_argument("--config", help="training preset for the model, optimizer and batch "
                        "(e.g. train/cpu-smoke.toml; default: built-in defaults)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per point (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed windows per point; the best is reported (default %(default)s)")
    parser.add_argument("--devices", default=",".join(map(str, DEFAULT_DEVICES)),
                        help="device counts to measure (default %(default)s)")
    parser.add_argument("--global-batch", type=int, default=0,
                        help="global batch for every point (default: the config's for the most devices)")
    parser.add_argument("--pipeline-batch", type=int, default=0,
                        help="global batch for the pipeline-alone figure (default: the training one), "
                        "e.g. 2048 for 8 GPUs x 256")
    parser.add_argument("--pipeline-positions", type=int, default=500_000,
                        help="positions per timed window of the pipeline alone (default %(default)s)")
    parser.add_argument("--synthetic-positions", type=int, default=8 * SYNTHETIC_SHARD_ROWS,
                        help="size of the synthetic dataset without --data (default %(default)s)")
    parser.add_argument("--json", help="write every figure to this JSON file")
    args = parser.parse_args(list(argv))
    args.devices = _int_list(args.devices, "--devices")
    if args.pipeline_batch < 0:
        raise ConfigError(f"--pipeline-batch {args.pipeline_batch} must be >= 0")
    if min(args.steps, args.warmup, args.repeats, args.pipeline_positions, args.synthetic_positions) < 1:
        raise ConfigError("--steps, --warmup, --repeats, --pipeline-positions and --synthetic-positions "
                          "must be >= 1")
    return args


def train_paths(data: str | None, scratch: Path, synthetic_positions: int) -> tuple[list[Path], str]:
    """Shard paths of the training split and a description of where they come from.

    Raises:
        ShardFormatError: --data is not a dataset folder or has no training shards.
    """
    if data is None:
        from shogi_dnn.bench.synthetic import write_synthetic_dataset

        sizes = [SYNTHETIC_SHARD_ROWS] * (synthetic_positions // SYNTHETIC_SHARD_ROWS)
        rest = synthetic_positions % SYNTHETIC_SHARD_ROWS
        sizes += [rest] if rest else []
        log.info("writing a synthetic dataset of %d positions in %d shards ...", synthetic_positions,
                 len(sizes))
        manifest = write_synthetic_dataset(scratch, {"train": sizes}, seed=0)
        source = f"synthetic ({synthetic_positions} positions)"
    else:
        manifest = shards.read_manifest(data)
        source = str(Path(data).resolve())
    paths = [manifest.shard_path(s) for s in manifest.split("train")]
    if not paths:
        raise ShardFormatError(f"{manifest.root}: the manifest lists no training shards")
    return paths, source


# --- measurement (TensorFlow from here on; imported lazily so --help stays light) ---


def _dataset(paths: Sequence[Path], cfg: Config, global_batch: int):
    """The training stream of the benchmark, repeated (one pass may be shorter than a measurement)."""
    from shogi_dnn.training import pipeline

    return pipeline.make_train_dataset(paths, global_batch=global_batch, seed=cfg.train.seed,
                                       shuffle_buffer=cfg.data.shuffle_buffer,
                                       mirror=cfg.data.mirror,
                                       policy_labels=cfg.model.policy_head).repeat()


def measure_pipeline(paths: Sequence[Path], cfg: Config, global_batch: int, positions: int,
                     repeats: int) -> Measurement:
    """(a) The input pipeline alone: windows of about `positions` positions (batches as host tensors)."""
    batches = iter(_dataset(paths, cfg, global_batch))
    per_window = max(1, positions // global_batch)
    next(batches)                          # start-up: opening shards, first buffer
    marks = [Usage.now()]
    for _ in range(repeats):
        for _ in range(per_window):
            next(batches)
        marks.append(Usage.now())
    return _measurement(PIPELINE, 0, per_window * global_batch, 0,
                        [end.since(start) for start, end in itertools.pairwise(marks)])


def _measurement(method: str, devices: int, positions: int, updates: int,
                 windows: Sequence[Window]) -> Measurement:
    return Measurement(method, devices, positions, tuple(w.wall for w in windows),
                       tuple(w.cpu for w in windows), tuple(w.sys for w in windows),
                       tuple(w.faults for w in windows), updates)


def _build(strategy, cfg: Config, global_batch: int):
    """Model and towers optimizer created (and built) in the strategy's scope."""
    from shogi_dnn.training.devices import check_model_fits
    from shogi_dnn.training.model import build_model
    from shogi_dnn.training.optimizer import build_optimizer

    check_model_fits(cfg, strategy, global_batch // strategy.num_replicas_in_sync)
    with strategy.scope():
        model = build_model(cfg.model, seed=cfg.train.seed)
        # Throughput only: a decaying lr costs the same per step, and a bench has no run length to decay over.
        optim = dataclasses.replace(cfg.optim, lr_decay="none")
        optimizer = build_optimizer(optim, global_batch, None, model, strategy=strategy,
                                    loss_scale=cfg.model.mixed_precision == "mixed_float16")
    return model, optimizer


class TowerRunner:
    """(b) Our tower step (steps.make_train_step) on the distributed pipeline.

    in_graph=False: step(next(iterator)) from Python (TOWERS);
    in_graph=True: steps.make_iterator_step, the trainer's update: next(iterator) inside the tf.function,
    as model.fit feeds itself (TOWERS_IN_GRAPH): the per-replica batch never crosses the Python boundary.
    """

    def __init__(self, strategy, paths: Sequence[Path], cfg: Config, global_batch: int,
                 in_graph: bool) -> None:
        from shogi_dnn.training.steps import UpdateSpec, make_iterator_step, make_train_step

        self.method = TOWERS_IN_GRAPH if in_graph else TOWERS
        self.strategy = strategy
        model, optimizer = _build(strategy, cfg, global_batch)
        spec = UpdateSpec(global_batch, 1, cfg.optim.clip_global_norm, cfg.train.time_towers,
                          cfg.train.jit_compile)
        train_step = make_train_step(strategy, model, optimizer, spec)

        def step(iterator):
            return train_step(next(iterator))

        self._step = make_iterator_step(train_step, 1) if in_graph else step
        self._batches = iter(strategy.experimental_distribute_dataset(_dataset(paths, cfg, global_batch)))

    def run(self, steps: int) -> Window:
        """The window of `steps` updates, waiting for the last one to finish."""
        from shogi_dnn.training.devices import local_values

        start = Usage.now()
        for _ in range(steps):
            sums = self._step(self._batches)
        local_values(self.strategy, sums["count"])
        return Usage.now().since(start)


def _step_clock():
    """A Keras callback marking the process's clocks (Usage, .marks) at the end of every step."""
    import keras

    class StepClock(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.marks: list[Usage] = []

        def on_train_batch_end(self, batch, logs=None):
            self.marks.append(Usage.now())

    return StepClock()


class FitRunner:
    """(c) Keras' model.fit under the same strategy, on the same model, optimizer, data and batch."""

    method = FIT

    def __init__(self, strategy, paths: Sequence[Path], cfg: Config, global_batch: int) -> None:
        import keras

        self.model, towers_optimizer = _build(strategy, cfg, global_batch)
        with strategy.scope():
            # The same optimizer class, lr schedule and decay, as a fresh instance: the towers' one has its
            # own all-reduce disabled (make_train_step reduces), which model.fit relies on.
            optimizer = type(towers_optimizer).from_config(towers_optimizer.get_config())
            value_loss = keras.losses.BinaryCrossentropy(from_logits=True)
            if cfg.model.policy_head:     # the two outputs, the policy's -1 labels (no move) ignored
                self.model.compile(optimizer=optimizer, loss={
                    "value": value_loss,
                    "policy": keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)})
            else:
                self.model.compile(optimizer=optimizer, loss=value_loss)
        policy = cfg.model.policy_head
        self._data = _dataset(paths, cfg, global_batch).map(
            lambda b: ({"board": b["board"], "hands": b["hands"]},
                       {"value": b["win"][:, None], "policy": b["policy"]} if policy else b["win"][:, None]))

    def run(self, steps: int) -> Window:
        """The window of `steps` updates: one fit call of steps + 1, timed from the end of its first step
        (which carries fit's per-call set-up and the pipeline's start)."""
        clock = _step_clock()
        self.model.fit(self._data, steps_per_epoch=steps + 1, epochs=1, verbose=0, shuffle=False,
                       callbacks=[clock])
        return clock.marks[-1].since(clock.marks[0])


def alternate_windows(runners: Sequence[Any], repeats: int,
                      steps: int) -> dict[str, list[Window]]:
    """method -> [Window] of `repeats` windows of `steps` updates each, one window per runner and round,
    the order reversed every other round (A B C, C B A, A B C, ...): a load that drifts during the
    measurement then costs each method about the same. runner.run(steps) -> Window."""
    windows: dict[str, list[Window]] = {runner.method: [] for runner in runners}
    for round_ in range(repeats):
        for runner in runners if round_ % 2 == 0 else runners[::-1]:
            windows[runner.method].append(runner.run(steps))
    return windows


def measure_training(strategy, paths: Sequence[Path], cfg: Config, global_batch: int,
                     args: argparse.Namespace) -> list[Measurement]:
    """(b) and (c) on one strategy, windows interleaved with the order reversed every other round
    (towers, towers-iter, fit, fit, towers-iter, towers, ...) so that a shared machine's load changes hit
    every method alike; the best window counts (wall and CPU seconds each)."""
    runners = [TowerRunner(strategy, paths, cfg, global_batch, in_graph=False),
               TowerRunner(strategy, paths, cfg, global_batch, in_graph=True),
               FitRunner(strategy, paths, cfg, global_batch)]
    for runner in runners:
        runner.run(args.warmup)                            # tracing, allocation
    windows = alternate_windows(runners, args.repeats, args.steps)
    n = strategy.num_replicas_in_sync
    return [_measurement(method, n, args.steps * global_batch, args.steps, w)
            for method, w in windows.items()]


def run_benchmark(args: argparse.Namespace, cfg: Config, paths: Sequence[Path], devices: Sequence[str],
                  global_batch: int) -> list[Measurement]:
    """Every measurement: the pipeline, then towers, towers-iter and model.fit for each device count."""
    from shogi_dnn.training.devices import make_strategy

    pipeline_batch = args.pipeline_batch or global_batch
    results = [measure_pipeline(paths, cfg, pipeline_batch, args.pipeline_positions, args.repeats)]
    log.info("pipeline: %.0f positions/s", results[-1].positions_per_s)
    for n in args.devices:
        if global_batch % n:
            raise ConfigError(f"--global-batch {global_batch} is not divisible by {n} devices")
        strategy = make_strategy(devices=list(devices[:n]))
        for measurement in measure_training(strategy, paths, cfg, global_batch, args):
            results.append(measurement)
            log.info("%s on %d device(s): %.0f positions/s, %.0f per CPU second (sys %.0f%%), %.0f page "
                     "faults an update", measurement.method, n, measurement.positions_per_s,
                     measurement.positions_per_cpu_s, 100 * (measurement.sys_share or 0.0),
                     measurement.faults_per_update or 0.0)
    return results


def build_report(results: Sequence[Measurement], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document: every measurement and the ratios: each tower variant over model.fit (wall:
    over_fit, CPU seconds: over_fit_cpu), each method's speed-up over one device, the pipeline over the
    fastest training step."""
    by = {(r.method, r.devices): r.positions_per_s for r in results}
    by_cpu = {(r.method, r.devices): r.positions_per_cpu_s for r in results if r.cpu_windows}
    methods = [m for m in (TOWERS, TOWERS_IN_GRAPH, FIT) if any(r.method == m for r in results)]
    counts = sorted({r.devices for r in results if r.method != PIPELINE})

    def over_fit(rates: Mapping[tuple[str, int], float]) -> dict[str, dict[str, float]]:
        return {m: {str(n): rates[m, n] / rates[FIT, n] for n in counts
                    if (m, n) in rates and (FIT, n) in rates} for m in methods if m != FIT}

    ratios: dict[str, Any] = {
        "over_fit": over_fit(by),
        "over_fit_cpu": over_fit(by_cpu),
        "speedup_over_1": {m: {str(n): by[m, n] / by[m, 1] for n in counts if (m, n) in by and (m, 1) in by}
                           for m in methods},
    }
    train_rates = [v for (method, _), v in by.items() if method != PIPELINE]
    if (PIPELINE, 0) in by and train_rates:
        ratios["pipeline_over_fastest_step"] = by[PIPELINE, 0] / max(train_rates)
    return {"schema": SCHEMA, **meta, "results": [r.to_dict() for r in results], "ratios": ratios}


def format_table(report: Mapping[str, Any]) -> str:
    """Console table: positions/s (wall) and per CPU second per method and device count, with the ratios."""
    ratios = report["ratios"]
    header = (f"global batch {report['global_batch']} (pipeline alone: {report.get('pipeline_batch', '-')}), "
              f"data: {report['data']}")
    lines = [header, f"{'method':<12} {'devices':>7} {'positions/s':>12} {'vs fit':>7} {'vs 1 dev':>8} "
                     f"{'pos/CPU-s':>10} {'CPU vs fit':>10} {'sys %':>6} {'faults/update':>13}"]

    def cell(value: float | None, width: int, spec: str = ".2f") -> str:
        return f"{'' if value is None else format(value, spec):>{width}}"

    def percent(share: float | None) -> float | None:
        return None if share is None else 100 * share

    for r in report["results"]:
        key = str(r["devices"])
        vs_fit = ratios["over_fit"].get(r["method"], {}).get(key)
        cpu_vs_fit = ratios.get("over_fit_cpu", {}).get(r["method"], {}).get(key)
        speedup = ratios["speedup_over_1"].get(r["method"], {}).get(key)
        lines.append(f"{r['method']:<12} {r['devices'] or 'host':>7} {r['positions_per_s']:>12,.0f} "
                     f"{cell(vs_fit, 7)} {cell(speedup, 8)} {cell(r.get('positions_per_cpu_s'), 10, ',.0f')} "
                     f"{cell(cpu_vs_fit, 10)} {cell(percent(r.get('sys_share')), 6, '.0f')} "
                     f"{cell(r.get('faults_per_update'), 13, ',.0f')}".rstrip())
    if "pipeline_over_fastest_step" in ratios:
        lines.append(f"pipeline alone / fastest training step: {ratios['pipeline_over_fastest_step']:.1f}x")
    return "\n".join(lines)


def write_json(report: Mapping[str, Any], path: Path) -> None:
    """The report as JSON at `path` (its folder made if needed), written atomically (run_files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run_files.write_json_atomic(path, dict(report))


def _meta(args: argparse.Namespace, cfg: Config, devices: Sequence[str], global_batch: int, source: str,
          paths: Sequence[Path]) -> dict[str, Any]:
    import tensorflow as tf

    return {"data": source, "train_positions": schedule.count_positions(paths), "global_batch": global_batch,
            "pipeline_batch": args.pipeline_batch or global_batch, "steps": args.steps,
            "warmup": args.warmup, "repeats": args.repeats, "devices": list(devices),
            "config": cfg.to_dict(), "tensorflow": tf.__version__, "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "load_average_1min_at_end": os.getloadavg()[0]}


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)   # MirroredStrategy logs every reduction
    from shogi_dnn.training.devices import benchmark_devices  # TensorFlow from here on
    from shogi_dnn.training.precision import resolve

    devices = benchmark_devices(max(args.devices))        # before anything initialises TensorFlow
    cfg, chosen = resolve(cfg, devices)                   # model.mixed_precision "auto": as train decides
    log.info("model.mixed_precision = %s (%s)", chosen.policy, chosen.why)
    global_batch = args.global_batch or config.global_batch(cfg, len(devices))
    with tempfile.TemporaryDirectory(prefix="shogi-dnn-bench-") as scratch:
        paths, source = train_paths(args.data, Path(scratch), args.synthetic_positions)
        results = run_benchmark(args, cfg, paths, devices, global_batch)
        report = build_report(results, _meta(args, cfg, devices, global_batch, source, paths))
    print(format_table(report))
    if args.json:
        write_json(report, Path(args.json))
        log.info("wrote %s", args.json)
    return 0
