#!/usr/bin/env python3
"""Training speed with and without the allocator settings and XLA, side by side in one run (docs/benchmarks.md).

  python scripts/train_speed.py --data DATA --config train/cpu-small.toml [--devices 1] [--rounds 2]
      [--steps 40] [--json OUT]

Each round runs `shogi-dnn bench train` once per variant, the order reversed every other round:
  system        SHOGI_DNN_MALLOC=system (glibc's defaults), --set train.jit_compile=false
  allocator     the allocator settings (training/allocator.py), --set train.jit_compile=false
  shipped       the preset as shipped (the allocator settings; train.jit_compile as the preset has it)
and prints, per variant and method, the best round's positions per CPU-second (user + system of every
thread), its system share and page faults per update, and the ratio to `system`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS = {
    "system": ({"SHOGI_DNN_MALLOC": "system"}, ["--set", "train.jit_compile=false"]),
    "allocator": ({"SHOGI_DNN_MALLOC": ""}, ["--set", "train.jit_compile=false"]),
    "shipped": ({"SHOGI_DNN_MALLOC": ""}, []),
}
METHODS = ("towers", "towers-iter", "model.fit")


def run_variant(name: str, args: argparse.Namespace, out: Path) -> list[dict]:
    env, extra = VARIANTS[name]
    cmd = [sys.executable, "-m", "shogi_dnn", "bench", "train", "--data", args.data, "--config", args.config,
           "--devices", args.devices, "--steps", str(args.steps), "--repeats", "2",
           "--pipeline-positions", "20000", "--json", str(out), *extra]
    subprocess.run(cmd, check=True, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    return [r for r in json.loads(out.read_text())["results"] if r["method"] in METHODS]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--devices", default="1")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    best: dict[tuple[str, str, int], dict] = {}
    order = list(VARIANTS)
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for name in order if round_ % 2 == 0 else order[::-1]:
                for r in run_variant(name, args, Path(scratch) / f"{name}.json"):
                    key = (name, r["method"], r["devices"])
                    if key not in best or r["positions_per_cpu_s"] > best[key]["positions_per_cpu_s"]:
                        best[key] = r
    print(f"{args.config}, {args.rounds} rounds, best round per variant and method")
    print(f"{'variant':<10} {'method':<12} {'devices':>7} {'pos/CPU-s':>10} {'vs system':>9} {'sys %':>6} "
          f"{'faults/update':>13} {'positions/s':>11}")
    for (name, method, devices), r in sorted(best.items(), key=lambda kv: (kv[0][2], kv[0][1], order.index(kv[0][0]))):
        base = best.get(("system", method, devices))
        ratio = r["positions_per_cpu_s"] / base["positions_per_cpu_s"] if base else float("nan")
        print(f"{name:<10} {method:<12} {devices:>7} {r['positions_per_cpu_s']:>10,.0f} {ratio:>9.2f} "
              f"{100 * r.get('sys_share', 0):>6.0f} {r.get('faults_per_update', 0):>13,.0f} "
              f"{r['positions_per_s']:>11,.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps([{"variant": k[0], **v} for k, v in best.items()], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
