#!/usr/bin/env python3
"""Training speed of float32 / bfloat16 with and without XLA, alternated in one run (docs/benchmarks.md).

  python scripts/train_speed.py --data DATA --config train/cpu-small.toml [--devices 1] [--rounds 3]
      [--steps 30] [--variants shipped,f32,f32-xla,bf16,bf16-xla] [--json OUT]

Each round runs `shogi-dnn bench train` once per variant, the order reversed every other round, so that a
drifting load hits every variant alike:
  shipped    the preset as shipped (no --set)
  f32        model.mixed_precision=none,           train.jit_compile=false
  f32-xla    model.mixed_precision=none,           train.jit_compile=true
  bf16       model.mixed_precision=mixed_bfloat16, train.jit_compile=false
  bf16-xla   model.mixed_precision=mixed_bfloat16, train.jit_compile=true
and prints, per variant, method and device count, the median over rounds of positions per CPU-second (user +
system of every thread: bench train's own getrusage), of wall positions per second, and the ratio to `f32`.
Read the machine's load before and after (printed): a figure taken beside other work flatters itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS = {
    "shipped": [],
    "f32": ["model.mixed_precision=none", "train.jit_compile=false"],
    "f32-xla": ["model.mixed_precision=none", "train.jit_compile=true"],
    "bf16": ["model.mixed_precision=mixed_bfloat16", "train.jit_compile=false"],
    "bf16-xla": ["model.mixed_precision=mixed_bfloat16", "train.jit_compile=true"],
}
METHODS = ("towers", "towers-iter", "model.fit")


def run_variant(name: str, args: argparse.Namespace, out: Path) -> list[dict]:
    sets = [arg for item in VARIANTS[name] for arg in ("--set", item)]
    cmd = [sys.executable, "-m", "shogi_dnn", "bench", "train", "--data", args.data, "--config", args.config,
           "--devices", args.devices, "--steps", str(args.steps), "--warmup", "5", "--repeats", "1",
           "--pipeline-positions", "20000", "--json", str(out), *sets]
    subprocess.run(cmd, check=True, env=os.environ, stdout=subprocess.DEVNULL)
    return [r for r in json.loads(out.read_text())["results"] if r["method"] in METHODS]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--devices", default="1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    order = [v for v in args.variants.split(",") if v]
    unknown = [v for v in order if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[tuple[str, str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for name in order if round_ % 2 == 0 else order[::-1]:
                for r in run_variant(name, args, Path(scratch) / f"{name}.json"):
                    runs.setdefault((name, r["method"], r["devices"]), []).append(r)
                print(f"round {round_ + 1} {name} done, load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")

    def median(key: tuple[str, str, int], field: str) -> float:
        return statistics.median(r[field] for r in runs[key])

    print(f"{args.config}, {args.rounds} rounds alternated, medians over rounds")
    print(f"{'variant':<9} {'method':<12} {'devices':>7} {'pos/CPU-s':>10} {'vs f32':>7} {'positions/s':>11} "
          f"{'rounds (pos/CPU-s)':<30}")
    for key in sorted(runs, key=lambda k: (k[2], k[1], order.index(k[0]))):
        name, method, devices = key
        cpu = median(key, "positions_per_cpu_s")
        base = ("f32", method, devices)
        ratio = cpu / median(base, "positions_per_cpu_s") if base in runs else float("nan")
        rounds = " ".join(f"{r['positions_per_cpu_s']:,.0f}" for r in runs[key])
        print(f"{name:<9} {method:<12} {devices:>7} {cpu:>10,.0f} {ratio:>7.2f} "
              f"{median(key, 'positions_per_s'):>11,.0f} {rounds:<30}")
    if args.json:
        Path(args.json).write_text(json.dumps([{"variant": k[0], "rounds": v} for k, v in runs.items()], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
