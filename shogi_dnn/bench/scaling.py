"""`shogi-dnn bench scaling`: positions/s of the real training step for each per-GPU batch and device
count, and the fitted throughput model time = B / v0 + t for each device count
(shogi_dnn.training.throughput).

    shogi-dnn bench scaling --config train/cpu-smoke.toml [--batch-sizes 8,16,32,64,128]
                            [--devices 1,2,4] [--steps 10] [--warmup 3] [--repeats 3] [--out scaling.json]

With GPUs present it measures the first N GPUs; without, it splits the CPU into max(--devices) logical
devices (before TensorFlow initialises) and measures subsets of them, so a laptop can rehearse the
sweep. Each point times `--steps` optimizer steps of steps.make_train_step on one synthetic in-memory
batch (the step and the all-reduce, not the input pipeline: `bench train` measures that), after
`--warmup` untimed steps (tracing, allocation), `--repeats` times, keeping the fastest. Writes FILE.json
(per device count: points, v0, t, fit quality, b90; speed-up and efficiency over one device), FILE.png
(points and fitted curves) and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.config import Config, load_config
from shogi_dnn.errors import ConfigError
from shogi_dnn.folders import run_files
from shogi_dnn.training import throughput
from shogi_dnn.wording import progress_bar

log = logging.getLogger(__name__)

DEFAULT_BATCHES = (8, 16, 32, 64, 128)
DEFAULT_DEVICES = (1, 2, 4)
SCHEMA = "shogi-dnn/bench-scaling/1"


@dataclasses.dataclass(frozen=True)
class Point:
    """One measurement: `steps` optimizer steps of `devices` towers on per_replica_batch each."""

    devices: int
    per_replica_batch: int
    steps: int
    seconds: float
    repeats: tuple[float, ...] = ()     # every timing of the point (seconds for `steps` steps); seconds = min

    @property
    def global_batch(self) -> int:
        return self.devices * self.per_replica_batch

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / self.steps

    @property
    def positions_per_s(self) -> float:
        return self.global_batch / self.seconds_per_step

    def to_dict(self) -> dict[str, float | int]:
        return {"per_replica_batch": self.per_replica_batch, "global_batch": self.global_batch,
                "steps": self.steps, "seconds_per_step": self.seconds_per_step,
                "positions_per_s": self.positions_per_s, "repeats_seconds": list(self.repeats)}


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: expected comma-separated integers, e.g. 8,16,32") from exc
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"{flag} {text!r}: expected positive integers")
    return tuple(sorted(set(values)))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn bench scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="training preset (model and optimizer), e.g. "
                        "train/cpu-smoke.toml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCHES)),
                        help="per-GPU batches to measure (default %(default)s)")
    parser.add_argument("--devices", default=",".join(map(str, DEFAULT_DEVICES)),
                        help="device counts to measure (default %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per point (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="time each point this many times and keep the fastest, which is the least "
                             "disturbed by other work on the machine (default %(default)s)")
    parser.add_argument("--out", default="scaling.json", help="JSON output; the plot goes beside it as .png")
    args = parser.parse_args(list(argv))
    args.batch_sizes = _int_list(args.batch_sizes, "--batch-sizes")
    args.devices = _int_list(args.devices, "--devices")
    if len(args.batch_sizes) < 2:
        raise ConfigError("--batch-sizes: need at least 2 batch sizes to fit v0 and t")
    if args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        raise ConfigError("--steps and --repeats must be >= 1 and --warmup >= 0")
    return args


def build_report(points: Sequence[Point], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document: per device count its points and fit; speed-up/efficiency over one device.

    A device count whose points do not fit (noisy timings: a time per step that does not grow with the
    batch) keeps its points under "unfitted", with the fit's error and what to do; "problems" lists it.
    A fit with no fixed cost (t = 0: the timings did not resolve one) has no b90, so its speed-up is taken
    at the largest per-replica batch measured on both counts, and "problems" says so.
    """
    counts = sorted({p.devices for p in points})
    fits: dict[int, throughput.ThroughputFit] = {}
    entries, unfitted, problems = [], [], []
    for n in counts:
        own = [p for p in points if p.devices == n]
        try:
            fit = throughput.fit_throughput([p.global_batch for p in own],
                                            [p.seconds_per_step for p in own], n)
        except ConfigError as exc:
            unfitted.append({"devices": n, "fit_error": str(exc), "points": [p.to_dict() for p in own]})
            problems.append(f"the {n}-device fit failed ({exc}); its points are kept under \"unfitted\": "
                            "rerun with more --steps and --repeats on a quiet machine")
            continue
        fits[n] = fit
        entries.append({**fit.to_dict(), "points": [p.to_dict() for p in own]})
    gains = []
    if 1 in fits:
        for n in sorted(fits)[1:]:
            batch = None
            if fits[n].per_replica_b90 <= 0:
                batch = max({p.per_replica_batch for p in points if p.devices == n}
                            & {p.per_replica_batch for p in points if p.devices == 1})
                problems.append(f"the {n}-device fit has no fixed cost (t = 0, so no b90): its speed-up is "
                                f"taken at per-GPU batch {batch}, the largest measured on 1 and {n} devices")
            at_b90 = throughput.scaling(fits[1], fits[n], batch)
            gains.append({**at_b90.to_dict(), "measured": _measured_speedups(points, n)})
    return {"schema": SCHEMA, **meta, "fits": entries, "unfitted": unfitted, "scaling": gains,
            "problems": problems}


def _measured_speedups(points: Sequence[Point], n: int) -> list[dict[str, float]]:
    """Speed-up of n devices over one at each per-replica batch measured on both."""
    one = {p.per_replica_batch: p.positions_per_s for p in points if p.devices == 1}
    out = []
    for p in points:
        if p.devices == n and p.per_replica_batch in one:
            speedup = p.positions_per_s / one[p.per_replica_batch]
            out.append({"per_replica_batch": p.per_replica_batch, "speedup": speedup,
                        "efficiency": speedup / n})
    return out


def format_table(report: Mapping[str, Any]) -> str:
    """Console table: measured positions/s per batch and device count, then the fits and scaling."""
    measured = sorted([*report["fits"], *report.get("unfitted", [])], key=lambda f: f["devices"])
    batches = sorted({pt["per_replica_batch"] for f in measured for pt in f["points"]})
    lines = ["positions/s by per-GPU batch (rows) and device count (columns)",
             f"{'batch':>7} " + " ".join(f"{str(f['devices']) + ' dev':>10}" for f in measured)]
    for b in batches:
        cells = []
        for f in measured:
            match = [pt["positions_per_s"] for pt in f["points"] if pt["per_replica_batch"] == b]
            cells.append(f"{match[0]:>10.0f}" if match else f"{'-':>10}")
        lines.append(f"{b:>7} " + " ".join(cells))
    lines.append("")
    lines.append(f"{'devices':>7} {'v0 pos/s':>10} {'t s/step':>9} {'R^2':>7} {'rel.rms':>8} {'b90/GPU':>8}")
    for f in report["fits"]:
        r2 = f"{f['r2']:.4f}" if f["r2"] is not None else "-"
        lines.append(f"{f['devices']:>7} {f['v0']:>10.0f} {f['t']:>9.4f} {r2:>7} {f['rel_rms']:>8.3f} "
                     f"{f['per_replica_b90']:>8.0f}")
    for g in report["scaling"]:
        lines.append(f"{g['devices']} devices over 1 at per-GPU batch {g['per_replica_batch']:.0f} "
                     f"(their b90): "
                     f"speed-up {g['speedup']:.2f}, efficiency {100 * g['efficiency']:.0f}%")
    for f in report.get("unfitted", []):
        lines.append(f"{f['devices']:>7} not fitted: {f['fit_error']}")
    return "\n".join(lines)


def write_json(report: Mapping[str, Any], path: Path) -> None:
    """The report as JSON at `path` (its folder made if needed), written atomically (run_files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run_files.write_json_atomic(path, dict(report))


def write_plot(report: Mapping[str, Any], path: Path) -> None:
    """PNG: measured positions/s against the global batch, with each device count's fitted curve."""
    from shogi_dnn import plotting

    fig = plotting.new_figure((7, 4.5))
    ax = fig.add_subplot()
    for index, entry in enumerate(report["fits"]):
        color = f"C{index}"
        x = np.array([pt["global_batch"] for pt in entry["points"]], dtype=np.float64)
        y = np.array([pt["positions_per_s"] for pt in entry["points"]])
        fit = throughput.ThroughputFit(devices=entry["devices"], v0=entry["v0"], t=entry["t"])
        grid = np.geomspace(x.min() / 2, max(x.max() * 2, fit.b90 * 1.5), 200)
        ax.plot(x, y, "o", color=color, label=f"{fit.devices} device(s) measured")
        ax.plot(grid, fit.throughput(grid), "-", color=color,
                label=f"fit v0={fit.v0:.0f}/s, t={1000 * fit.t:.1f} ms")
        ax.axhline(fit.v0, color=color, linestyle=":", linewidth=0.8)
    for index, entry in enumerate(report.get("unfitted", []), start=len(report["fits"])):
        x = np.array([pt["global_batch"] for pt in entry["points"]], dtype=np.float64)
        y = np.array([pt["positions_per_s"] for pt in entry["points"]])
        ax.plot(x, y, "x", color=f"C{index}", label=f"{entry['devices']} device(s) measured (no fit)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("global batch (positions per step)")
    ax.set_ylabel("positions / s")
    ax.set_title("throughput v = B / (B / v0 + t)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plotting.save_png(fig, path)


# --- measurement (TensorFlow from here on; imported lazily so --help and the report stay light) ---

def synthetic_batch(global_batch: int, seed: int) -> dict[str, np.ndarray]:
    """One in-memory batch shaped like the pipeline's: board [B,81] u8, hands [B,14] u8, win [B] f32,
    ply [B] i16."""
    from shogi_dnn.bench.synthetic import random_positions
    from shogi_dnn.dataset import shards

    rows = random_positions(global_batch, np.random.default_rng(seed))
    return {"board": rows[shards.KEY_BOARD], "hands": rows[shards.KEY_HANDS],
            "win": rows[shards.KEY_WIN].astype(np.float32), "ply": rows[shards.KEY_PLY]}


def measure_point(strategy, config: Config, per_replica_batch: int, steps: int, warmup: int,
                  repeats: int = 1) -> Point:
    """Seconds for `steps` optimizer steps of the real tower step on one synthetic batch per step
    (the fastest of `repeats` timings).

    The model and optimizer are built in the strategy's scope (optimizer.build_optimizer, as training does);
    one micro-batch per update, so the step's batch is the global batch of the throughput model.
    """
    import tensorflow as tf

    from shogi_dnn.training.devices import check_model_fits, local_values
    from shogi_dnn.training.model import build_model
    from shogi_dnn.training.optimizer import build_optimizer
    from shogi_dnn.training.precision import resolve
    from shogi_dnn.training.steps import UpdateSpec, make_train_step

    config, _ = resolve(config, strategy.extended.worker_devices)
    n = strategy.num_replicas_in_sync
    global_batch = n * per_replica_batch
    check_model_fits(config, strategy, per_replica_batch)
    with strategy.scope():
        model = build_model(config.model, seed=config.train.seed)
    # Throughput only: a decaying lr costs the same per step, and a bench has no run length to decay over.
    optim = dataclasses.replace(config.optim, lr_decay="none")
    optimizer = build_optimizer(optim, global_batch, strategy=strategy, model=model)
    step = make_train_step(strategy, model, optimizer,
                           UpdateSpec(global_batch, clip_global_norm=config.optim.clip_global_norm,
                                      time_towers=config.train.time_towers))
    rows = synthetic_batch(global_batch, config.train.seed)
    if config.model.policy_head:            # a move label per row (label 0: any label costs the same)
        rows["policy"] = np.zeros(global_batch, np.int32)
    dataset = tf.data.Dataset.from_tensor_slices(rows).batch(global_batch, drop_remainder=True)
    dataset = dataset.cache().repeat()
    batches = iter(strategy.experimental_distribute_dataset(dataset))
    for _ in range(warmup):
        sums = step(next(batches))
        local_values(strategy, sums["count"])          # waits: tracing is not timed
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            sums = step(next(batches))
        local_values(strategy, sums["count"])          # waits for the last step
        timings.append(time.perf_counter() - start)
    return Point(devices=n, per_replica_batch=per_replica_batch, steps=steps, seconds=min(timings),
                 repeats=tuple(timings))


def sweep(config: Config, devices: Sequence[int], batches: Sequence[int], steps: int, warmup: int,
          repeats: int, device_names: Sequence[str]) -> list[Point]:
    """Measure every (device count, per-replica batch); Ctrl-C stops early and keeps what was measured."""

    from shogi_dnn.training.devices import make_strategy

    points: list[Point] = []
    todo = [(n, b) for n in devices for b in batches]
    try:
        with progress_bar(todo, desc="bench scaling", unit="point") as progress:
            for n, b in progress:
                progress.set_postfix_str(f"{n} dev x {b}")
                strategy = (make_strategy(simulate_devices=n) if device_names[0].startswith("/cpu")
                            else make_strategy(devices=device_names[:n]))
                points.append(measure_point(strategy, config, b, steps, warmup, repeats))
                log.debug("%d devices x %d: %.0f positions/s", n, b, points[-1].positions_per_s)
    except KeyboardInterrupt:
        log.warning("interrupted: reporting the %d of %d points measured", len(points), len(todo))
    return points


def complete_counts(points: Sequence[Point]) -> list[Point]:
    """Points of the device counts measured at >= 2 batch sizes (an interrupted sweep leaves the last one
    short: it is dropped with a warning instead of failing the fit).

    Raises:
        ConfigError: no device count has 2 batch sizes (interrupted too early).
    """
    sizes = {n: {p.per_replica_batch for p in points if p.devices == n} for n in {p.devices for p in points}}
    short = sorted(n for n, batches in sizes.items() if len(batches) < 2)
    if short:
        log.warning("dropping device count(s) %s: fewer than 2 batch sizes measured", short)
    kept = [p for p in points if p.devices not in short]
    if not kept:
        raise ConfigError("no device count was measured at 2 batch sizes: nothing to fit")
    return kept


def main(argv: Sequence[str]) -> int:
    """`shogi-dnn bench scaling`: sweep, fit, write JSON + PNG, print the table."""
    args = parse_args(argv)
    config = load_config(args.config, args.set)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)     # one INFO line per all-reduce otherwise
    from shogi_dnn.training.devices import benchmark_devices  # TensorFlow from here on

    device_names = benchmark_devices(max(args.devices))
    points = complete_counts(sweep(config, args.devices, args.batch_sizes, args.steps, args.warmup,
                                   args.repeats, device_names))
    meta = {"config": str(args.config), "overrides": list(args.set),
            "model": dataclasses.asdict(config.model),
            "optimizer": config.optim.optimizer, "steps": args.steps, "warmup": args.warmup,
            "repeats": args.repeats,
            "devices": device_names, "simulated": device_names[0].startswith("/cpu"),
            "host": platform.node(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0]}
    report = build_report(points, meta)
    out = Path(args.out)
    write_json(report, out)
    write_plot(report, out.with_suffix(".png"))
    print(format_table(report))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    for problem in report["problems"]:
        print(f"shogi-dnn bench scaling: {problem}", file=sys.stderr)
    if not report["fits"]:
        print("shogi-dnn bench scaling: no device count could be fitted, so `plan --scaling-fit` and "
              f"`train --scaling-fit` cannot use {out} (its points are kept)", file=sys.stderr)
        return 1
    return 0
